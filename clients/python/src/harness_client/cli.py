"""`harness`: the operator's and agent developer's command line (operations.md §8).

Built on the client library. A result goes to stdout in one of two forms: readable text, or
JSON (`-o json` or `--json`: one compact object per result, one line per delivery for
`listen`; keys are the contract's camelCase names). The operator commands (`status`,
`agents`, `conversations`, `history`), `send-state` and `ack` print text unless `-o json`
asks; the agent commands whose result is a contract value (`send`, `gather`, `all-gather`,
`answer`, `parse`, `listen`) print JSON unless `-o text` asks for the readable form.

A failure goes to stderr and leads with what went wrong, in the client library's words
(`connect failed: cannot reach 127.0.0.1:7770: connection refused`, `connect failed: the
gateway at 127.0.0.1:7770 does not know this agent token`), then `reason=<reason>`, the kebab-case reason of the contract's closed vocabulary (never a
gRPC code name); with `-o json` or `--json` given, one `{"error": {"type", "reason", ...}}`
object carrying every field of the typed error instead. No traceback reaches the user: a
defect prints one line, and `--debug` (or `HARNESS_DEBUG=1`) adds the traceback.

Exit codes: 0 success; 1 a contract failure, or a refused management call; 2 usage (a bad
flag, file or environment value, a missing token); 3 the gateway unreachable, or the token
refused; 70 an unexpected error; 130 interrupted; 141 stdout closed before the output ended
(`harness agents list | head -1`).

Texts need not fit on a command line: `-` in place of a text reads it from stdin and
`--text-file PATH` (`--question-file` for a question) from a file; one final newline is
dropped. `--schema` takes inline JSON (a value starting with `{`) or the path of a JSON file.

A send the local firewall admitted prints, after its readable result, one
`guidance <checkId>: ...` line per instruction (its JSON result carries `guidance` itself).

The command's parts live in `harness_client._cli` (see its docstring); this module is the
entry point and its last guards, and exports `main` alone.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from collections.abc import Sequence

from harness_client._cli.commands import Context, run
from harness_client._cli.env import DEBUG_VARIABLE, env_flag
from harness_client._cli.failures import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
)
from harness_client._cli.parser import build_parser, output_for

__all__ = ["main"]


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is no file (a test's capture): nothing will flush into a pipe


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr is gone too: the exit code is all that is left


def main(argv: Sequence[str] | None = None) -> int:
    """Run `harness` with `argv` (default: the process's) and return the exit code."""
    env = dict(os.environ)
    debug = False
    try:
        debug = env_flag(env, DEBUG_VARIABLE)
        parser = build_parser(env)
        try:
            args = parser.parse_args(None if argv is None else list(argv))
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else EXIT_USAGE
        else:
            debug = debug or args.debug
            out = output_for(args, sys.stdout, sys.stderr)
            ctx = Context(args=args, env=env, out=out, stdin=sys.stdin)
            code = asyncio.run(run(ctx))
        # Here, not at the interpreter's exit, where a closed pipe would print a traceback.
        sys.stdout.flush()
        return code
    except UsageError as error:
        _say(f"harness: error: {error}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _detach_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as error:  # the last guard: a defect prints one line, not a traceback
        if debug:
            traceback.print_exception(error, file=sys.stderr)
        hint = "" if debug else f" (--debug or {DEBUG_VARIABLE}=1 shows the traceback)"
        _say(f"harness: unexpected error: {type(error).__name__}: {error}{hint}")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
