"""`python -m minisgl`: the server (see `python -m minisgl --help`)."""

if __name__ == "__main__":  # spawned children re-import this module; only the real entry runs main
    import sys

    from minisgl.server.__main__ import main

    sys.exit(main())
