"""Weights & Biases: starting runs so that W&B trouble never stops training (``wandb_guard``), chart axes and
summaries (``wandb_metrics``), artifacts and lineage (``wandb_artifacts``), the W&B runs among a run's loggers
(``wandb_loggers``) and a comparison's own report run (``wandb_report``).
"""
