"""Configuration: the schema (``config``), composition of presets and overrides (``compose``), checks against the
machine (``checks``) and against Lightning (``lightning_check``), budget matching (``budget``) and sweep parameters
(``sweep_params``).
"""
