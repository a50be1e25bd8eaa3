"""``python -m famlab ...`` is ``famlab ...``."""

import sys

from famlab.experiments.commands.cli import main

# Guarded: under strategy=ddp Lightning re-executes the entry point once per rank.
if __name__ == "__main__":
    sys.exit(main())
