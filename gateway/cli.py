"""`harness-gateway`: the process entry point (serve, check-config, version).

`serve` with no flags is the embedded default: in-process Router and Registry, SQLite under
the data directory, 127.0.0.1 only. It logs one `ready` line with the bound addresses and
shuts down in the written order on SIGTERM or SIGINT (a second signal skips the waits).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.settings import SettingsError, describe, load_settings

logger = logging.getLogger("harness.gateway")

EXIT_USAGE = 2
"""Exit code of invalid flags or settings."""


def _add_serve_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", help="gRPC address, HOST:PORT (default 127.0.0.1:7770)")
    parser.add_argument(
        "--metrics-listen", help="Prometheus address, HOST:PORT or off (default 127.0.0.1:9770)"
    )
    parser.add_argument(
        "--data-dir", help="data directory (default $XDG_STATE_HOME/harness-gateway)"
    )
    parser.add_argument("--stream-window", help="unacknowledged deliveries per stream (256)")
    parser.add_argument("--commit-delay", help="group commit window, e.g. 2ms")
    parser.add_argument("--commit-max-batch", help="most writes per group commit (512)")
    parser.add_argument("--send-certify-timeout", help="certification wait of a send, e.g. 30s")
    parser.add_argument("--shutdown-delay", help="serve on after health turns NOT_SERVING, e.g. 5s")
    parser.add_argument("--shutdown-grace", help="in-flight calls' grace at shutdown, e.g. 30s")
    parser.add_argument(
        "--reflection", action=argparse.BooleanOptionalAction, default=None, help="gRPC reflection"
    )
    parser.add_argument("--log-format", help="json, text or auto")
    parser.add_argument("--log-level", help="debug, info, warning or error")
    parser.add_argument(
        "--no-uvloop", dest="uvloop", action="store_false", default=None, help="use asyncio's loop"
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness-gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve", help="run the gateway daemon (embedded default with no flags)"
    )
    _add_serve_flags(serve)
    check = commands.add_parser(
        "check-config", help="validate settings and print the effective values"
    )
    _add_serve_flags(check)
    commands.add_parser("version", help="print the version")
    return parser


_FLAG_NAMES = (
    "listen",
    "metrics_listen",
    "data_dir",
    "stream_window",
    "commit_delay",
    "commit_max_batch",
    "send_certify_timeout",
    "shutdown_delay",
    "shutdown_grace",
    "reflection",
    "log_format",
    "log_level",
    "uvloop",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `harness-gateway` command and return its exit code."""
    args = _build_parser().parse_args(argv)
    if args.command == "version":
        print(f"harness-gateway {__version__}")
        return 0
    flags = {name: getattr(args, name) for name in _FLAG_NAMES}
    try:
        settings = load_settings(flags=flags)
    except SettingsError as error:
        for problem in error.errors:
            print(f"harness-gateway: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.command == "check-config":
        print(json.dumps(describe(settings), indent=2, sort_keys=True))
        return 0
    from gateway.observability.logs import configure_logging

    configure_logging(log_format=settings.log_format, level=settings.log_level)
    if settings.uvloop:
        # Installed here only: libraries and tests never set a loop policy (house style 8).
        import uvloop

        return uvloop.run(_serve(settings))
    return asyncio.run(_serve(settings))


async def _serve(settings: object) -> int:
    from gateway.app import Gateway
    from gateway.settings import Settings
    from gateway.store import DataDirLocked

    assert isinstance(settings, Settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        gateway = await Gateway.start(settings)
    except DataDirLocked as error:
        logger.error("%s", error)
        print(f"harness-gateway: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        logger.error("cannot start: %s", error)
        print(f"harness-gateway: {error}", file=sys.stderr)
        return 1
    loop = asyncio.get_running_loop()
    shutdowns: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        # A second signal skips the waits of steps 3 and 5 (operations.md §5).
        shutdowns.append(
            loop.create_task(gateway.shutdown(skip_waits=bool(shutdowns)), name="shutdown")
        )

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    logger.info(
        "ready",
        extra={
            "listen": gateway.address,
            "metrics": gateway.metrics_address or "off",
            "data_dir": str(settings.data_dir),
            "admin_token_file": str(gateway.admin_token_path),
        },
    )
    await gateway.wait_stopped()
    await asyncio.gather(*shutdowns, return_exceptions=True)
    return gateway.exit_code


if __name__ == "__main__":
    sys.exit(main())
