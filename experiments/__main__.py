"""``python -m experiments ...`` is ``famlab ...``."""

import sys

from experiments.cli import main

# Guarded: under strategy=ddp Lightning re-executes the entry script once per rank (REFERENCE.md).
if __name__ == "__main__":
    sys.exit(main())
