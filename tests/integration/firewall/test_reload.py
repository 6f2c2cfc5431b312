"""A reload (SIGHUP) of the firewall file on a real gateway (firewall.md §4.1): a file an
interrupted write left empty or cut short is kept out like a broken one, the policy in
force stays and the operator is told at ERROR; `middlewares: []` removes it on purpose.
"""

from __future__ import annotations

import logging

import pytest
from harness_client import FirewallSendError, MessageInput

from gateway.firewall.config import EMPTY_FILE, FirewallConfigError
from gateway.settings import Settings
from gateway.testing import run_gateway
from tests.integration.firewall.conftest import firewalled, write_config

pytestmark = pytest.mark.timeout(120)

POLICY = """
version: 1
middlewares:
  - id: tenants
    kind: recipient-policy
    rules:
      - id: no-carol
        to: ["carol"]
        action: deny
        instruction: "carol is off limits"
  - id: turns
    kind: turn-guidance
"""

CUT_SHORT = {
    "empty": "",
    "whitespace": "\n\n",
    "comments only": "# the policy\n",
    "version only": "version: 1\n",
    "cut after middlewares:": "version: 1\nmiddlewares:\n",
    "cut inside the first middleware": POLICY[: POLICY.index("    rules:")],
    "cut at a list item": "version: 1\nmiddlewares:\n  - ",
}
"""What an interrupted write of POLICY (or of any policy) can leave."""


@pytest.mark.parametrize("text", CUT_SHORT.values(), ids=CUT_SHORT.keys())
async def test_a_file_left_empty_or_cut_short_keeps_the_policy_in_force_logged_at_error(
    tmp_path, caplog, text
):
    config = write_config(tmp_path / "firewall.yaml", POLICY)
    async with firewalled(config, "alice", "carol") as (gw, agents):
        alice = agents["alice"].endpoint
        config.write_text(text, encoding="utf-8")
        with caplog.at_level(logging.INFO, logger="gateway"):
            assert await gw.gateway.reload_firewall() is False
        [record] = [r for r in caplog.records if "firewall file invalid" in r.getMessage()]
        assert record.levelno == logging.ERROR
        assert not [r for r in caplog.records if "firewall reloaded" in r.getMessage()]
        # The old policy still refuses, and still guides.
        with pytest.raises(FirewallSendError) as refused:
            await alice.send(MessageInput(to="agent:carol", text="hello"))
        assert refused.value.rule_id == "no-carol"
        assert gw.gateway.components.firewall is not None
        assert [m.id for m in gw.gateway.components.firewall.spec.middlewares] == [
            "tenants",
            "turns",
        ]


async def test_an_explicit_empty_list_removes_the_policy_and_a_full_file_restores_it(
    tmp_path, caplog
):
    config = write_config(tmp_path / "firewall.yaml", POLICY)
    async with firewalled(config, "alice", "carol") as (gw, agents):
        alice = agents["alice"].endpoint
        write_config(config, "version: 1\nmiddlewares: []\n")
        with caplog.at_level(logging.INFO, logger="gateway"):
            assert await gw.gateway.reload_firewall() is True
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        sent = await alice.send(MessageInput(to="agent:carol", text="hello"))
        assert sent.guidance is None  # no pipeline: no guidance fields at all

        write_config(config, POLICY)
        assert await gw.gateway.reload_firewall() is True
        with pytest.raises(FirewallSendError):
            await alice.send(MessageInput(to="agent:carol", text="hello again"))


async def test_a_gateway_does_not_start_on_an_empty_firewall_file(tmp_path):
    config = write_config(tmp_path / "firewall.yaml", "")
    with pytest.raises(FirewallConfigError) as refused:
        async with run_gateway(Settings(firewall_config=config)):
            pass
    assert refused.value.problems == (f"{config}:1:1: {EMPTY_FILE}",)
