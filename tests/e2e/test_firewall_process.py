"""The firewall as an operator runs it: a `harness-gateway serve` process with
`--firewall-config`, reloaded by SIGHUP under an open stream, validated by `check-config`,
refusing to start on a bad file, and the `harness` CLI showing guidance and refusals."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import textwrap
from pathlib import Path
from typing import Final

import harness_client
import pytest
from harness_client import (
    CheckedGuidance,
    ExpectationInstruction,
    FirewallSendError,
    InboundDelivery,
    MessageInput,
    MulticastItem,
)

from gateway.testing import (
    DaemonFailed,
    RunningDaemon,
    gateway_command,
    hermetic_environment,
    run_daemon,
)
from tests.e2e import support
from tests.support import eventually

pytestmark = pytest.mark.e2e

BOUND: Final = 20.0
"""Seconds any one wait of these tests may take."""

TENANTS: Final = """
version: 1
middlewares:
  - id: tenants
    kind: recipient-policy
    rules:
      - id: no-carol
        to: ["carol"]
        action: deny
        instruction: "carol is off limits"
"""

TURNS: Final = """
version: 1
middlewares:
  - id: turns
    kind: turn-guidance
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def rules_of(delivery: InboundDelivery) -> list[str]:
    guidance = delivery.guidance
    assert isinstance(guidance, CheckedGuidance), guidance
    return [
        instruction.rule_id
        for instruction in guidance.instructions
        if isinstance(instruction, ExpectationInstruction)
    ]


async def hang_up(daemon: RunningDaemon) -> None:
    daemon.process.send_signal(signal.SIGHUP)


async def run(*argv: str) -> tuple[int, str, str]:
    """A command of this environment, bounded; (exit code, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=hermetic_environment(),
    )
    out, err = await asyncio.wait_for(process.communicate(), BOUND)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def harness_command() -> list[str]:
    script = Path(sys.executable).with_name("harness")
    return [str(script)] if script.exists() else [sys.executable, "-m", "harness_cli"]


@pytest.mark.timeout(120)
async def test_sighup_reloads_the_policy_under_an_open_stream_and_a_bad_file_keeps_it(tmp_path):
    config = write(tmp_path / "firewall.yaml", TENANTS)
    async with run_daemon(extra_args=["--firewall-config", str(config)]) as daemon:
        agents = await support.register(daemon, "alice", "bob", "carol")
        async with (
            await harness_client.connect(daemon.address, token=agents["alice"].token) as alice,
            await harness_client.connect(daemon.address, token=agents["bob"].token) as bob,
        ):
            stream = bob.messages()
            await alice.send(MessageInput(to="agent:bob", text="before"))
            before = await asyncio.wait_for(anext(stream), BOUND)
            assert rules_of(before) == []
            with pytest.raises(FirewallSendError):
                await alice.send(MessageInput(to="agent:carol", text="no"))

            write(config, TURNS)
            await hang_up(daemon)

            async def carol_reachable() -> bool:
                try:
                    await alice.send(MessageInput(to="agent:carol", text="now?"))
                except FirewallSendError:
                    return False
                return True

            await eventually(carol_reachable, within=BOUND, interval=0.05)
            # The same stream, never dropped, shows the new policy's guidance.
            await alice.send(MessageInput(to="agent:bob", text="after"))
            after = await asyncio.wait_for(anext(stream), BOUND)
            assert isinstance(after.item, MulticastItem)
            assert rules_of(after) == ["direct-message"]

            write(config, "version: 1\nmiddlewares:\n  - id: [broken\n")
            await hang_up(daemon)
            await eventually(
                lambda: asyncio.sleep(0, "firewall file invalid" in daemon.stderr),
                within=BOUND,
                interval=0.05,
            )
            assert "firewall.yaml:4:1: while parsing a flow sequence" in daemon.stderr
            await alice.send(MessageInput(to="agent:bob", text="still"))
            still = await asyncio.wait_for(anext(stream), BOUND)
            assert rules_of(still) == ["direct-message"]
            await stream.aclose()


@pytest.mark.timeout(120)
async def test_the_cli_prints_guidance_and_refusals_of_a_firewalled_daemon(tmp_path):
    config = write(
        tmp_path / "firewall.yaml",
        TENANTS
        + """
  - id: turns
    kind: turn-guidance
""",
    )
    async with run_daemon(extra_args=["--firewall-config", str(config)]) as daemon:
        agents = await support.register(daemon, "alice", "bob", "carol")
        url = ["--url", daemon.address]
        alice = [*url, "--token", agents["alice"].token]
        code, out, err = await run(*harness_command(), *alice, "--json", "send", "agent:bob", "hi")
        assert code == 0, err
        sent = json.loads(out)
        assert sent["guidance"]["checkId"].startswith("chk_")

        code, out, err = await run(*harness_command(), *alice, "send", "agent:carol", "hello")
        assert code != 0
        assert (
            "send refused by the local firewall (forbidden-recipient): carol is off limits" in err
        )
        assert "reason=forbidden-recipient" in err

        bob = [*url, "--token", agents["bob"].token]
        code, out, err = await run(*harness_command(), *bob, "listen", "--max", "1", "--ack")
        assert code == 0, err
        [line] = out.splitlines()
        delivery = json.loads(line)
        instructions = delivery["guidance"]["instructions"]
        assert [i["ruleId"] for i in instructions] == ["direct-message"]

        await run(*harness_command(), *alice, "send", "agent:bob", "again")
        code, out, err = await run(
            *harness_command(), *bob, "listen", "--text", "--max", "1", "--ack"
        )
        assert code == 0, err
        assert "[turns/direct-message] permitted" in out


@pytest.mark.timeout(60)
async def test_check_config_validates_the_firewall_file_and_serve_refuses_a_bad_one(tmp_path):
    good = write(tmp_path / "good.yaml", TENANTS)
    code, out, err = await run(*gateway_command(), "check-config", "--firewall-config", str(good))
    assert code == 0, err
    assert json.loads(out)["firewall_middlewares"] == ["tenants (recipient-policy)"]

    bad = write(
        tmp_path / "bad.yaml",
        """
        version: 1
        middlewares:
          - id: secrets
            kind: content-pattern
            rules:
              - id: lookbehind
                pattern: "(?<=x)a"
                action: refuse
                instruction: "x"
          - id: flood
            kind: rate-limit
            rate_per_minute: -1
            burst: 1
          - id: mystery
            kind: mystery
        """,
    )
    code, out, err = await run(*gateway_command(), "check-config", "--firewall-config", str(bad))
    assert code == 2
    problems = [line for line in err.splitlines() if "bad.yaml:" in line]
    assert len(problems) == 3, err
    assert any("bad.yaml:8:" in line for line in problems), err  # the pattern RE2 rejects
    assert any("bad.yaml:13:" in line for line in problems), err  # the negative rate
    assert any("bad.yaml:16:" in line for line in problems), err  # the unknown kind

    with pytest.raises(DaemonFailed) as refused:
        async with run_daemon(extra_args=["--firewall-config", str(bad)]):
            pytest.fail("a daemon started on a bad firewall file")
    assert refused.value.returncode == 1
    assert "bad.yaml:8:" in refused.value.stderr
