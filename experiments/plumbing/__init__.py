"""Run plumbing: run directories (``rundir``), provenance (``provenance``), the prepared corpus and tokenizer cache
(``data_cache``), loggers (``loggers``) and Trainer assembly (``trainer``); the callbacks every fit gets
(``reliability``) over one module per concern: RNG states (``rng``), ``last.ckpt`` rotation (``checkpoints``),
preemption (``signals``), non-finite steps (``nonfinite``), resume resolution (``resume``), exit statuses
(``exits``), ``metrics.csv`` across resumes (``csv_logger``), collective decisions (``collective``); rank-0 data
preparation and the process's rank (``prepare_once``), the run directory handed to DDP ranks (``launch_env``), and
the test hook for fault injection (``faults``).
"""
