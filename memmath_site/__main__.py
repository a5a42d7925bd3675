"""Command line: `python -m memmath_site build [OUT] [--notebooks DIR]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .assets import AssetLayoutError
from .build import SERVE_COMMAND, BuildError, build_site


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memmath_site",
                                     description="Build the workbook as a static site that works offline.")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="export every lesson, the index page and marimo's frontend")
    build.add_argument("out", nargs="?", default="site", type=Path, help="output folder (default: site)")
    build.add_argument("--notebooks", default="notebooks", type=Path, help="lessons folder (default: notebooks)")
    args = parser.parse_args(argv)

    try:
        build_site(args.out, args.notebooks)
    except (BuildError, AssetLayoutError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"\nBuilt {args.out}/. Serve it with: {SERVE_COMMAND.replace(' site ', f' {args.out} ')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
