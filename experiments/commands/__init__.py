"""One module per ``famlab`` command: ``cli`` holds the command table, each other module one command's entry
(``pretrain``, ``finetune``, ``probe``, ``suite``, ``compare``, ``compare_suite``, ``evaluate``, ``generate``,
``export``, ``sweep``). ``famlab report`` and ``famlab bench`` keep their entries beside what they build
(:mod:`famlab.experiments.analysis.report`, :mod:`famlab.experiments.perf.bench`).
"""
