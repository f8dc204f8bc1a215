"""`python -m minisgl.trace merge DIR`: merge the per-process traces of a run into DIR/trace.json."""

from __future__ import annotations

import argparse
import sys

from .chrome import merge


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minisgl.trace", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    merging = commands.add_parser("merge", help="one trace.json from the trace-*.json files of a --trace folder")
    merging.add_argument("folder", metavar="DIR")
    args = parser.parse_args(argv)
    try:
        path = merge(args.folder)
    except FileNotFoundError as error:
        print(f"minisgl.trace: error: {error}", file=sys.stderr)
        return 1
    print(f"{path}: open it in https://ui.perfetto.dev or chrome://tracing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
