"""Fast CPU kernels beside the blocks: one small module per kernel, chosen in one place (``dispatch.use_fast``).

Every kernel computes what a block's plain reference computes (the tests compare outputs and gradients);
the blocks, heads and the objective ask :func:`famlab.families.kernels.dispatch.use_fast` whether to call it.
Which kernels exist, when each runs and how to add one: ``docs/architecture.md``, "Fast CPU kernels".
"""
