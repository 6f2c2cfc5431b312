"""What `harness` reads from outside its command line's grammar: tokens, the gateway's URL,
the defaults and environment values.

Each value is checked where it is read, so a wrong one is a `UsageError` naming where it
came from (`--token-file`, `HARNESS_URL`) rather than an exception deep in gRPC. `seconds`
is here, not with the other flag types, because `HARNESS_CONNECT_TIMEOUT` and
`--connect-timeout` must take the same numbers.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from harness_client._channel import parse_target
from harness_client._cli.failures import UsageError

DEFAULT_URL: Final = "127.0.0.1:7770"
"""Where the embedded daemon listens (operations.md §1)."""
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
"""Seconds to reach a gateway and check the token, when no flag or variable sets them.

A refused connection or an unknown host fails at once, whatever this says; the bound is for
a gateway that does not answer (a firewall dropping packets, a stopped process)."""
ADMIN_TOKEN_FILE_NAME: Final = "admin-token"  # noqa: S105 - a file name, not a secret
"""The file the embedded daemon writes its generated admin token to, in its data dir."""
DEBUG_VARIABLE: Final = "HARNESS_DEBUG"
"""`1` shows the traceback of an unexpected error, as `--debug` does."""
CONNECT_TIMEOUT_VARIABLE: Final = "HARNESS_CONNECT_TIMEOUT"
"""Seconds to reach the gateway, as `--connect-timeout` sets them."""

_HOST_PORT: Final = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]@]+):(\d{1,5})")
"""`HOST:PORT`, the host a name, an IPv4 address or a bracketed IPv6 address."""
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


def default_data_dir(env: Mapping[str, str]) -> Path:
    """The embedded daemon's data directory: `$XDG_STATE_HOME/harness-gateway`, else
    `~/.local/state/harness-gateway` (the gateway's own default)."""
    base = env.get("XDG_STATE_HOME") or str(
        Path(env.get("HOME", "~")).expanduser() / ".local/state"
    )
    return Path(base) / "harness-gateway"


def read_text_file(path: str, what: str) -> str:
    """The UTF-8 text of the file at `path`; a `UsageError` names it as `what` otherwise."""
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read the {what} {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"the {what} {path} is not UTF-8 text") from None


def _checked_token(token: str, source: str) -> str:
    # gRPC refuses such metadata with an exception deep in its core; say it here instead.
    if not token.isascii() or not token.isprintable() or " " in token:
        raise UsageError(
            f"the token from {source} has characters no token has "
            "(spaces, control or non-ASCII characters)"
        )
    return token


def _read_token_file(path: str, what: str, source: str) -> str:
    token = read_text_file(path, f"{what} file").strip()
    if not token:
        raise UsageError(f"the {what} file {path} is empty")
    return _checked_token(token, f"{source} {path}")


def agent_token(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """`--token`, `--token-file`, `HARNESS_TOKEN`, `HARNESS_TOKEN_FILE`, in that order."""
    if args.token:
        return _checked_token(str(args.token), "--token")
    if args.token_file:
        return _read_token_file(args.token_file, "token", "--token-file")
    if env.get("HARNESS_TOKEN"):
        return _checked_token(env["HARNESS_TOKEN"], "HARNESS_TOKEN")
    if env.get("HARNESS_TOKEN_FILE"):
        return _read_token_file(env["HARNESS_TOKEN_FILE"], "token", "HARNESS_TOKEN_FILE")
    raise UsageError(
        "no agent token: pass --token or --token-file, or set HARNESS_TOKEN "
        "(`harness agents register NAME` prints a new agent's token)"
    )


def admin_token(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """`--admin-token`, `--admin-token-file`, `HARNESS_ADMIN_TOKEN`,
    `HARNESS_ADMIN_TOKEN_FILE`, then `admin-token` in the embedded default data directory."""
    if args.admin_token:
        return _checked_token(str(args.admin_token), "--admin-token")
    if args.admin_token_file:
        return _read_token_file(args.admin_token_file, "admin token", "--admin-token-file")
    if env.get("HARNESS_ADMIN_TOKEN"):
        return _checked_token(env["HARNESS_ADMIN_TOKEN"], "HARNESS_ADMIN_TOKEN")
    if env.get("HARNESS_ADMIN_TOKEN_FILE"):
        return _read_token_file(
            env["HARNESS_ADMIN_TOKEN_FILE"], "admin token", "HARNESS_ADMIN_TOKEN_FILE"
        )
    default = default_data_dir(env) / ADMIN_TOKEN_FILE_NAME
    if default.is_file():
        return _read_token_file(str(default), "admin token", "the default")
    raise UsageError(
        "no admin token: pass --admin-token or --admin-token-file, set HARNESS_ADMIN_TOKEN, "
        f"or run the embedded daemon (which writes {default})"
    )


def _checked_url(url: str, source: str) -> str:
    target, _ = parse_target(url)
    if target.startswith(("unix:", "unix-abstract:")):
        return url
    match = _HOST_PORT.fullmatch(target)
    if match is None or not 0 < int(match[1]) < 2**16:
        raise UsageError(
            f"{source} {url!r} is not HOST:PORT, grpc://HOST:PORT or grpcs://HOST:PORT"
        )
    return url


def gateway_url(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """`--url`, else `HARNESS_URL`, else the embedded daemon's address; checked."""
    if args.url:
        return _checked_url(str(args.url), "--url")
    if env.get("HARNESS_URL"):
        return _checked_url(env["HARNESS_URL"], "HARNESS_URL")
    return DEFAULT_URL


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """A yes/no variable: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (or unset)."""
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise UsageError(f"{name}={env[name]!r}: use 1 or 0")


def env_seconds(env: Mapping[str, str], name: str) -> float | None:
    """A positive number of seconds from `name`, or None when it is unset or empty."""
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        return seconds(text)
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"{name}: {error}") from None


def seconds(text: str) -> float:
    """A positive, finite number of seconds (`--timeout 2.5`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value
