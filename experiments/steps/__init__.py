"""The steps a command runs: pretraining, fine-tuning (and where its model comes from), probes, zero-shot
evaluation, suites, and a comparison's set-up, jobs and scheduler. Commands (:mod:`famlab.experiments.commands`)
parse the command line and call these; no command imports another."""
