"""`harness-gateway`: the process entry point (serve, router, registry, check-config, version)."""

from __future__ import annotations

import argparse
import sys

from gateway import __version__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness-gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve", help="run the gateway daemon (embedded default with no flags)")
    commands.add_parser("version", help="print the version")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `harness-gateway` command and return its exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "version":
        print(f"harness-gateway {__version__}")
        return 0
    print(
        "harness-gateway serve: the daemon is not built yet (issue 3); "
        "the API and the contract core are in place.",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
