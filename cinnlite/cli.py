"""The ``cinnlite`` command line."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cinnlite", description="cinnlite: a compiler for gather/scatter operators")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="compile, run and check a graph of every operator; print its code")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main

        return demo_main()
    return 2


if __name__ == "__main__":
    sys.exit(main())
