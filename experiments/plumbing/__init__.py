"""Run plumbing: run directories, tokenizer cache, loggers and Trainer assembly (``run``); the callbacks every fit
gets (``reliability``) over one module per concern: RNG states (``rng``), ``last.ckpt`` rotation (``checkpoints``),
preemption (``signals``), non-finite steps (``nonfinite``), resume resolution (``resume``), exit statuses
(``exits``), ``metrics.csv`` across resumes (``csv_logger``), collective decisions (``collective``); rank-0 data
preparation and the process's rank (``prepare_once``), the run directory handed to DDP ranks (``launch_env``), the
private library attributes famlab uses (``internals``), and the test hook for fault injection (``faults``).
"""
