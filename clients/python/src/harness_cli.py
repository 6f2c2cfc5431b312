"""The `harness` command's entry point, outside the `harness_client` package on purpose.

gRPC's C core writes its own lines (`E1201 12:12:53.062695 31082 filter_stack_call.cc:409]
...`, `I1201 ... chttp2_transport.cc:1403] ... Got goaway`) straight to stderr, past Python
logging, where they would read as the command's output; every failure the CLI reports
already comes back as a typed error. The core reads `GRPC_VERBOSITY` once, when grpc is
first imported, and importing anything in `harness_client` imports grpc. So this module
sets the default first and only then imports the CLI. A user who sets `GRPC_VERBOSITY` or
a non-empty `GRPC_TRACE` sees the lines again. Library users' environments are never
touched: only the command sets it.

Nothing here may end in a traceback either: Ctrl-C while grpc loads exits 130, as
`harness_client.cli` does later, and an installation that cannot load prints one line (the
traceback with `HARNESS_DEBUG=1`).
"""

from __future__ import annotations

import os
import sys
import traceback

GRPC_CORE_VERBOSITY = "NONE"
"""`GRPC_VERBOSITY` of a `harness` process whose user set neither it nor `GRPC_TRACE`."""
EXIT_INTERRUPTED = 130
"""Ctrl-C before the command started (`harness_client._cli.failures.EXIT_INTERRUPTED`)."""
EXIT_BROKEN_INSTALL = 70
"""The CLI could not be loaded (`harness_client._cli.failures.EXIT_INTERNAL`)."""


def main() -> int:
    """Run `harness` with the process's arguments and return its exit code."""
    if "GRPC_VERBOSITY" not in os.environ and not os.environ.get("GRPC_TRACE"):
        os.environ["GRPC_VERBOSITY"] = GRPC_CORE_VERBOSITY
    try:
        from harness_client.cli import main as run
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as error:  # a broken installation: one line, as every other failure
        if os.environ.get("HARNESS_DEBUG", "").strip().lower() in ("1", "true", "yes", "on"):
            traceback.print_exception(error, file=sys.stderr)
        sys.stderr.write(f"harness: cannot load: {type(error).__name__}: {error}\n")
        return EXIT_BROKEN_INSTALL
    return run()


if __name__ == "__main__":
    sys.exit(main())
