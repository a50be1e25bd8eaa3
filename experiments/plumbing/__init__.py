"""Run plumbing: run directories, tokenizer cache, loggers and Trainer assembly (``run``), exact resume, preemption and
non-finite steps (``reliability``), rank-0 data preparation and the process's rank (``prepare_once``), and the fault
injection the tests use (``faults``).
"""
