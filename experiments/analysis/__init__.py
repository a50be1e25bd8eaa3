"""Analysis of finished runs: statistics (``stats``), reference baselines (``baselines``), family-neutral measures
(``yardsticks``), what pretraining bought (``transfer``), suite scores and tables (``suite_score``, ``suite_table``),
the zero-shot table (``zeroshot_table``), and the comparison and sweep reports (``report``, ``sweep_report``,
``sweep_plots``).
"""
