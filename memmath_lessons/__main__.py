"""`python -m memmath_lessons [--static DIR] [--port N] [--headless] [--path]`: open the workbook's lessons in a
browser (marimo run), or build them as a static site: the same as `memmath lessons`, with the same options."""

import sys

from memmath.cli import main

if __name__ == "__main__":
    sys.exit(main(["lessons", *sys.argv[1:]]))
