"""`python -m minisgl.server` and the `minisgl` console script: parse the flags, launch (chapter 02)."""

from __future__ import annotations

import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    from minisgl.config import ArgsError
    from minisgl.models.config import ModelError
    from minisgl.process.start import start_child_server

    from .args import check_and_bind, parse_args

    args = parse_args(argv)  # --help and malformed flags end here, before any process starts
    try:
        args, sock = check_and_bind(args)  # every other bad flag, and a taken port, end here
    except (ArgsError, ModelError) as error:
        print(f"minisgl: error: {error}", file=sys.stderr, flush=True)
        return 2
    start_child_server()  # its imports of torch & co. overlap ours below
    from .launch import launch_server

    level = args.log_level.upper()
    os.environ["MINISGL_LOG_LEVEL"] = level  # children read it when they set up their logging
    logging.basicConfig(level=level, format="[minisgl] %(message)s")
    return launch_server(args, sock)


if __name__ == "__main__":
    sys.exit(main())
