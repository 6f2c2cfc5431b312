"""`python -m bench.history`: a data directory with a long history, and the daemon's start on it.

Two commands (issue 26, engine.md §8 "Rehydration"):

- `build --records N --data-dir DIR` writes a real data directory: a gateway started in this
  process on DIR (`gateway.testing.run_gateway`, the daemon's own composition root) registers
  `2 x conversations` agents, and each pair's posts are bound through the agents' own posting
  port (`AgentPosting.bind_posts`, the send pipeline's bind, in batches of `--batch`) and
  certified by the daemon's local order; the receivers' runtimes classify every delivery
  into their inboxes, and all but `--unread` items per agent are acknowledged through the
  inbox (`AgentInbox.acknowledge`). Nothing is written around the gateway's code: every row
  and signature is the one a daemon serving `Send` calls writes. `N` counts
  `certified_records` rows: a post in a pair is one row at each member, so N / 2 posts.
  `--open K` (K >= 2) leaves K intents per conversation bound and not certified (the next
  start certifies them); `open --data-dir DIR --intents K` adds them to a directory `build`
  wrote.
- `measure --data-dir DIR` starts `harness-gateway serve` on DIR itself `--rounds` times,
  warm (the file in the page cache) and cold (every file of DIR evicted first with
  `os.posix_fadvise(..., POSIX_FADV_DONTNEED)`), and prints the seconds from the process's
  start to its `ready` log line, with the medians, as one JSON line.

Both are for the benchmark only: timings never belong in tests (AGENTS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

from harness_contract.content import check_content
from harness_contract.values import TextPart

from gateway.settings import Settings

if TYPE_CHECKING:
    from gateway.app import Components
    from gateway.endpoint.runtime import AgentRuntime

    Pair: TypeAlias = tuple[AgentRuntime, AgentRuntime]

DEFAULT_CONVERSATIONS: Final = 20
"""Pairs, as the issue's 195 MB store had (20,000 items in 20 conversations)."""

DEFAULT_BATCH: Final = 512
"""Posts one bind transaction carries: local order's `UNIT_MAX_POSTS`, so one bind's posts
certify in one unit."""

DEFAULT_UNREAD: Final = 50
"""Items per agent left unread (the rest are acknowledged)."""

ACK_CHUNK: Final = 2_000
"""Tokens per acknowledgment call."""

READY_TIMEOUT: Final = 300.0
"""Seconds `measure` waits for a `ready` line before it gives the start up as failed."""


def _text(conversation: int, index: int) -> str:
    # About the size of a chat message; varied so that no two records share a body.
    return f"history post {index} of conversation {conversation}: " + "lorem ipsum " * 8


async def build(
    data_dir: Path,
    *,
    records: int,
    conversations: int = DEFAULT_CONVERSATIONS,
    batch: int = DEFAULT_BATCH,
    unread: int = DEFAULT_UNREAD,
    open_intents: int = 0,
) -> dict[str, float]:
    """Write the history into `data_dir` (new or empty); returns what it did and how long."""
    from gateway.testing import run_gateway

    posts_total = max(1, records // 2)
    per_conversation = max(1, posts_total // conversations)
    started = time.monotonic()
    cpu_started = time.process_time()
    async with run_gateway(Settings(), data_dir=data_dir) as gw:
        components = gw.gateway.components
        pairs = []
        for k in range(conversations):
            await gw.register(f"history-a{k}")
            await gw.register(f"history-b{k}")
            a = components.hosted.by_id(gw.agents[f"history-a{k}"].agent_id)
            b = components.hosted.by_id(gw.agents[f"history-b{k}"].agent_id)
            assert a is not None
            assert b is not None
            pairs.append((a, b))

        async def converse(k: int) -> None:
            a, b = pairs[k]
            descriptor = a.posting.membership_with([b.identity.card])
            done = 0
            while done < per_conversation:
                n = min(batch, per_conversation - done)
                # Both members write: each one's half of the batch, so both inboxes fill.
                for sender, count in ((a, (n + 1) // 2), (b, n // 2)):
                    if count == 0:
                        continue
                    posts = [
                        (descriptor, check_content((TextPart(text=_text(k, done + i)),)))
                        for i in range(count)
                    ]
                    handles = await sender.posting.bind_posts(posts, within=60.0)
                    await asyncio.gather(*(handle.certified for handle in handles))
                done += n
            if k == 0:
                print(f"conversation 0: {done} posts certified", file=sys.stderr)

        await asyncio.gather(*(converse(k) for k in range(conversations)))
        certified_at = time.monotonic()
        print(f"certified in {certified_at - started:.1f} s", file=sys.stderr)

        store = components.store
        for a, b in pairs:
            for runtime in (a, b):
                agent_id = runtime.agent_id
                expected = per_conversation // 2 if runtime is b else (per_conversation + 1) // 2
                # The classification pass runs on its own: wait until it has caught up.
                deadline = time.monotonic() + 600.0
                while await store.unread_count(agent_id) < (per_conversation - expected):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"classification did not catch up for {agent_id}")
                    await asyncio.sleep(0.2)
                after = 0
                while True:
                    rows = await store.unread(agent_id, after, ACK_CHUNK)
                    keep = await store.unread_count(agent_id)
                    if keep <= unread or not rows:
                        break
                    rows = rows[: keep - unread]
                    results = await runtime.acknowledge([row.token for row in rows])
                    if any(result.error is not None for result in results):
                        raise RuntimeError(f"acknowledgment failed for {agent_id}")
                    after = rows[-1].seq
        if open_intents:
            await _leave_open(components, pairs, open_intents)
    elapsed = time.monotonic() - started
    return {
        "records": float(per_conversation * conversations * 2),
        "conversations": float(conversations),
        "seconds": round(elapsed, 1),
        "cpu_seconds": round(time.process_time() - cpu_started, 1),
    }


async def _leave_open(components: Components, pairs: Sequence[Pair], intents: int) -> None:
    """Bind `intents` posts in each pair's conversation and certify none of them: the
    sequencer is stopped first, and binding several in one transaction keeps them out of
    the bind's own unit (engine.md §5.10, rule 2, takes a lone post only). The next start
    queues and certifies them."""
    if intents < 2:
        raise ValueError(f"open intents are bound two or more at a time, not {intents}")
    await components.network.local.close()
    for a, b in pairs:
        descriptor = a.posting.membership_with([b.identity.card])
        posts = [
            (descriptor, check_content((TextPart(text=f"left open {i}"),))) for i in range(intents)
        ]
        await a.posting.bind_posts(posts, within=60.0)


async def leave_open(data_dir: Path, *, intents: int) -> dict[str, float]:
    """Add `intents` open intents to each conversation of a directory `build` wrote."""
    from gateway.testing import run_gateway

    async with run_gateway(Settings(), data_dir=data_dir) as gw:
        components = gw.gateway.components
        by_name = {runtime.agent_name: runtime for runtime in components.hosted.runtimes()}
        pairs = [
            (by_name[name], by_name["history-b" + name.removeprefix("history-a")])
            for name in sorted(by_name)
            if name.startswith("history-a")
        ]
        await _leave_open(components, pairs, intents)
    return {"conversations": float(len(pairs)), "open_intents": float(len(pairs) * intents)}


def evict(data_dir: Path) -> None:
    """Drop every file of `data_dir` from the page cache (a cold start without root)."""
    os.sync()
    for path in data_dir.rglob("*"):
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _gateway_bin() -> str:
    return str(Path(sys.executable).with_name("harness-gateway"))


async def time_to_ready(data_dir: Path, *, gateway_bin: str) -> float:
    """Seconds from spawning `harness-gateway serve` on `data_dir` to its `ready` line."""
    argv = [
        gateway_bin,
        "serve",
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, limit=1 << 20
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            while True:
                line = await process.stderr.readline()
                if not line:
                    raise RuntimeError(f"the daemon exited before ready: {process.returncode}")
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    # The line `gateway.testing` waits for too.
                    if isinstance(entry, dict) and entry.get("msg") == "ready":
                        return time.monotonic() - started
    finally:
        if process.returncode is None:
            process.terminate()
        # Drain so that its stop is not blocked on a full pipe.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(60):
                while await process.stderr.readline():
                    pass
        await process.wait()


async def measure(data_dir: Path, *, rounds: int, gateway_bin: str) -> dict[str, object]:
    """Warm and cold times to `ready`, interleaved, `rounds` each."""
    warm: list[float] = []
    cold: list[float] = []
    # One start first: a store left by `build` may hold a WAL to fold in, and the first
    # start after `build` is not the steady state either measure is about.
    await time_to_ready(data_dir, gateway_bin=gateway_bin)
    for _ in range(rounds):
        evict(data_dir)
        cold.append(await time_to_ready(data_dir, gateway_bin=gateway_bin))
        warm.append(await time_to_ready(data_dir, gateway_bin=gateway_bin))
    store_file = data_dir / "gateway.sqlite3"
    return {
        "data_dir": str(data_dir),
        "store_mb": round(store_file.stat().st_size / 1e6) if store_file.exists() else None,
        "warm_s": [round(t, 2) for t in warm],
        "cold_s": [round(t, 2) for t in cold],
        "warm_median_s": round(statistics.median(warm), 2),
        "cold_median_s": round(statistics.median(cold), 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build", help="write a data directory with a long history")
    b.add_argument("--records", type=int, required=True, help="certified_records rows")
    b.add_argument("--data-dir", type=Path, required=True)
    b.add_argument("--conversations", type=int, default=DEFAULT_CONVERSATIONS)
    b.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    b.add_argument("--unread", type=int, default=DEFAULT_UNREAD, help="unread items per agent")
    b.add_argument(
        "--open", type=int, default=0, help="open intents per conversation (0, or 2 or more)"
    )
    o = commands.add_parser("open", help="add open intents to a directory `build` wrote")
    o.add_argument("--data-dir", type=Path, required=True)
    o.add_argument("--intents", type=int, default=2, help="per conversation, 2 or more")
    m = commands.add_parser("measure", help="time the daemon's start to ready")
    m.add_argument("--data-dir", type=Path, required=True)
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--gateway-bin", default=_gateway_bin())
    args = parser.parse_args(argv)
    if args.command == "build":
        if args.data_dir.exists() and any(args.data_dir.iterdir()):
            parser.error(f"{args.data_dir} is not empty")
        args.data_dir.mkdir(parents=True, exist_ok=True)
        result: dict[str, object] = dict(
            asyncio.run(
                build(
                    args.data_dir,
                    records=args.records,
                    conversations=args.conversations,
                    batch=args.batch,
                    unread=args.unread,
                    open_intents=args.open,
                )
            )
        )
        files = [f for f in args.data_dir.rglob("*") if f.is_file()]
        result["store_mb"] = round(sum(f.stat().st_size for f in files) / 1e6)
    elif args.command == "open":
        result = dict(asyncio.run(leave_open(args.data_dir, intents=args.intents)))
    else:
        result = asyncio.run(
            measure(args.data_dir, rounds=args.rounds, gateway_bin=args.gateway_bin)
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["build", "evict", "leave_open", "main", "measure", "time_to_ready"]
