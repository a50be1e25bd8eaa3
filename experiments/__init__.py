"""famlab.experiments: how a run is assembled from config to report (CLI, presets, training, W&B, reports).

The only layer that reads YAML, argv, environment variables or W&B; nothing imports it. See docs/architecture.md.
"""
