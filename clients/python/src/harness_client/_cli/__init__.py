"""The parts of the `harness` command (`harness_client.cli` is its entry point).

Each module reads on its own and imports only those above it in this list, so there is no
cycle:

- `failures`: the exit codes, `UsageError`, and what a failed command says (`Failure`,
  `describe_failure`); imports no other part.
- `env`: tokens, the gateway's URL, defaults and environment values.
- `output`: `Output` (stdout and stderr, text or JSON) and `dumps`, the one JSON form.
- `text`: the `-o text` forms of results (`describe_*`).
- `reach`: dialling the gateway once, so an unreachable address fails at once.
- `commands`: one coroutine per command, their `Context`, and `run`.
- `parser`: the argument parser and the output form the arguments ask for.

The package is private: the command's behaviour (its texts, flags and exit codes) is the
interface, and `harness_client.cli.main` the one entry.
"""
