"""`python -m minisgl.server` and the `minisgl` console script: parse the flags, launch (chapter 02)."""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    from .args import parse_args
    from .launch import launch_server

    args = parse_args(argv)
    level = args.log_level.upper()
    os.environ["MINISGL_LOG_LEVEL"] = level  # children read it when they set up their logging
    logging.basicConfig(level=level, format="[minisgl] %(message)s")
    return launch_server(args)


if __name__ == "__main__":
    sys.exit(main())
