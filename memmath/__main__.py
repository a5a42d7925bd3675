"""`python -m memmath ...`: the same command line as the `memmath` console script (memmath/cli)."""

import sys

from .cli import main

sys.exit(main())
