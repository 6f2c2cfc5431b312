"""The `harness` command's entry point, outside the `harness_client` package on purpose.

gRPC's C core writes its own lines (`E1201 12:12:53.062695 31082 filter_stack_call.cc:409]
...`, `I1201 ... chttp2_transport.cc:1403] ... Got goaway`) straight to stderr, past Python
logging, where they would read as the command's output; every failure the CLI reports
already comes back as a typed error. The core reads `GRPC_VERBOSITY` once, when grpc is
first imported, and importing anything in `harness_client` imports grpc. So this module
sets the default first and only then imports the CLI. A user who sets `GRPC_VERBOSITY` or
a non-empty `GRPC_TRACE` sees the lines again. Library users' environments are never
touched: only the command sets it.
"""

from __future__ import annotations

import os
import sys

GRPC_CORE_VERBOSITY = "NONE"
"""`GRPC_VERBOSITY` of a `harness` process whose user set neither it nor `GRPC_TRACE`."""


def main() -> int:
    """Run `harness` with the process's arguments and return its exit code."""
    if "GRPC_VERBOSITY" not in os.environ and not os.environ.get("GRPC_TRACE"):
        os.environ["GRPC_VERBOSITY"] = GRPC_CORE_VERBOSITY
    from harness_client.cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
