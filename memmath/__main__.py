"""`python -m memmath ...`: the same command line as the `memmath` console script (memmath/cli.py)."""

import sys

from .cli import main

sys.exit(main())
