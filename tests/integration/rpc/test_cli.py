"""`harness` end to end, in-process: `cli.main([...])` against a real server.

The CLI runs its own event loop (`asyncio.run`), so each command runs in a worker thread
while the server keeps serving on the test's loop.
"""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import dataclass
from typing import Final

import pytest
from harness_client import cli
from harness_contract.errors import CollectiveError, RequestNone

from tests.integration.rpc.conftest import Served, until
from tests.integration.rpc.fake_core import text_item

REFUSED_WITHIN: Final = 2.0
"""Seconds a command may take to report a refused connection (the connect bound is 5 s)."""


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def json(self):
        return json.loads(self.out)

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in (
        "HARNESS_URL",
        "HARNESS_TOKEN",
        "HARNESS_TOKEN_FILE",
        "HARNESS_ADMIN_TOKEN",
        "HARNESS_ADMIN_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def harness(served: Served, capsys):
    async def run(*argv: str, admin: bool = True, token: str | None = None) -> Run:
        capsys.readouterr()
        flags = ["--url", served.address]
        if admin:
            flags += ["--admin-token", served.admin_token]
        if token is not None:
            flags += ["--token", token]
        code = await asyncio.to_thread(cli.main, [*flags, *argv])
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


async def test_status_prints_the_gateway_status(harness, served):
    await served.register("alice")
    text = await harness("status")
    assert text.code == 0
    assert text.lines == ["version: 0.1.0", "mode: embedded", "hosted agents: 1", "router: active"]
    as_json = await harness("--json", "status")
    assert as_json.json == {
        "version": "0.1.0",
        "mode": "embedded",
        "hostedAgents": 1,
        "routerState": "active",
    }


async def test_agents_register_prints_the_address_and_the_token_once(harness, served):
    run = await harness("agents", "register", "alice", "--json")
    assert run.code == 0
    assert {"address", "token"} <= set(run.json)
    assert run.json["address"] == "agent:alice"
    assert served.core.tokens[run.json["token"]] == "alice"


async def test_agents_register_prints_the_token_alone_so_a_shell_can_keep_it(harness, served):
    run = await harness("agents", "register", "bob")
    assert run.code == 0
    [token] = run.lines
    assert served.core.tokens[token] == "bob"
    assert run.err == "registered agent:bob; its token is shown only this once\n"


async def test_agents_list_show_rotate_and_revoke(harness, served):
    for name in ("bob", "alice", "alfred"):
        await served.register(name)
    listed = await harness("agents", "list", "--prefix", "al", "-o", "json")
    assert [agent["name"] for agent in listed.json["agents"]] == ["alfred", "alice"]
    text = await harness("agents", "list")
    assert [line.split("\t")[0] for line in text.lines] == ["alfred", "alice", "bob"]
    shown = await harness("--json", "agents", "show", "bob")
    assert shown.json["address"] == "agent:bob"
    assert shown.json["backlog"] == 0
    rotated = await harness("agents", "rotate-token", "bob")
    assert rotated.code == 0
    assert served.core.tokens[rotated.out.strip()] == "bob"
    revoked = await harness("agents", "revoke-token", "bob")
    assert revoked.code == 0
    assert "bob" not in served.core.tokens.values()


async def test_a_management_failure_exits_one_with_its_reason(harness):
    run = await harness("agents", "show", "nobody")
    assert run.code == 1
    assert run.err.splitlines()[-1] == "reason=not-found"


async def test_an_agent_token_on_an_operator_command_says_which_token_it_takes(harness, served):
    token = await served.register("alice")
    run = await harness("--admin-token", token, "status", admin=False)
    assert run.code == 3
    assert run.err.splitlines() == [
        f"connect failed: the gateway at {served.address} refused this admin token: "
        "it is an agent's token",
        "reason=authentication-failed",
    ]


async def test_a_wrong_admin_token_leads_with_authentication_failed(harness, served):
    run = await harness("--admin-token", "x" * 40, "status", admin=False)
    assert run.code == 3
    assert run.err.splitlines() == [
        f"connect failed: the gateway at {served.address} does not know this admin token",
        "reason=authentication-failed",
    ]


async def test_a_wrong_agent_token_leads_with_authentication_failed(harness, served):
    run = await harness("send", "agent:bob", "hi", token="hat_" + "x" * 43, admin=False)
    assert run.code == 3
    assert run.err.splitlines() == [
        f"connect failed: the gateway at {served.address} does not know this agent token",
        "reason=authentication-failed",
    ]
    as_json = await harness(
        "--json", "send", "agent:bob", "hi", token="hat_" + "x" * 43, admin=False
    )
    error = json.loads(as_json.err)["error"]
    assert (error["type"], error["reason"], error["address"]) == (
        "ConnectError",
        "authentication-failed",
        served.address,
    )
    assert (error["cause"]["type"], error["cause"]["reason"]) == ("AuthenticationError", "unknown")


async def test_the_admin_token_is_read_from_the_embedded_data_directory(harness, served, tmp_path):
    directory = tmp_path / "state" / "harness-gateway"
    directory.mkdir(parents=True)
    (directory / "admin-token").write_text(served.admin_token + "\n")
    run = await harness("status", admin=False)
    assert run.code == 0


async def test_a_missing_token_is_a_usage_error(harness):
    run = await harness("parse", "agent:bob", "hi", admin=False)
    assert run.code == 2
    assert "no agent token" in run.err


async def test_an_unreachable_gateway_is_named_with_its_cause_at_once(capsys):
    loop = asyncio.get_running_loop()
    started = loop.time()
    # No --timeout: a refused connection must not wait out the connect bound.
    code = await asyncio.to_thread(
        cli.main, ["--url", "127.0.0.1:1", "--token", "t", "parse", "agent:b", "x"]
    )
    took = loop.time() - started
    assert code == 3
    assert capsys.readouterr().err.splitlines() == [
        "connect failed: cannot reach 127.0.0.1:1: connection refused",
        "reason=transport-failed",
    ]
    assert took < REFUSED_WITHIN, f"a refused connection took {took:.1f} s"


async def test_send_reads_the_text_as_message_text_and_prints_the_send_result(harness, served):
    alice = await served.register("alice")
    await served.register("bob")
    run = await harness("send", "agent:bob", "hello bob", token=alice, admin=False)
    assert run.code == 0
    assert run.json == {}
    [call] = served.core.endpoints["alice"].calls
    assert call.send_input.text == "hello bob"
    text = await harness("send", "agent:bob", "again", "-o", "text", token=alice, admin=False)
    assert text.lines == ["sent to agent:bob"]


async def test_send_reads_its_text_from_stdin_or_a_file(harness, served, monkeypatch, tmp_path):
    alice = await served.register("alice")
    await served.register("bob")
    monkeypatch.setattr("sys.stdin", io.StringIO("from stdin\n"))
    piped = await harness("send", "agent:bob", "-", token=alice, admin=False)
    # Past what one command-line argument may hold (128 KiB on Linux).
    long_text = "x" * 200_000
    (tmp_path / "long.txt").write_text(long_text + "\n", encoding="utf-8")
    parsed = await harness(
        "parse", "agent:bob", "--text-file", str(tmp_path / "long.txt"), token=alice, admin=False
    )
    assert (piped.code, parsed.code) == (0, 0)
    [call] = served.core.endpoints["alice"].calls
    assert call.send_input.text == "from stdin"
    assert parsed.json == {"to": "agent:bob", "text": long_text}


async def test_a_message_over_what_the_gateway_reads_is_content_invalid_naming_the_limit(
    harness, served, tmp_path
):
    alice = await served.register("alice")
    await served.register("bob")
    (tmp_path / "huge.txt").write_text("x" * 2_000_000, encoding="utf-8")
    run = await harness(
        "send", "agent:bob", "--text-file", str(tmp_path / "huge.txt"), token=alice, admin=False
    )
    assert run.code == 1
    assert run.err.splitlines() == [
        "send failed: the message is 2,000,015 bytes, more than the gateway reads in one call; "
        "the limit is 32,768 bytes as canonical JSON",
        "reason=content-invalid",
    ]
    assert served.core.endpoints["alice"].calls == []


async def test_send_with_a_key_and_inbound_failures_passes_both(harness, served):
    alice = await served.register("alice")
    await served.register("bob")
    run = await harness(
        "send",
        "agent:bob",
        "hi",
        "--idempotency-key",
        "k-1",
        "--failure-delivery",
        "inbound",
        token=alice,
        admin=False,
    )
    assert run.code == 0
    [call] = served.core.endpoints["alice"].calls
    assert call.idempotency_key == "k-1"
    assert call.failure_delivery.value == "inbound"
    state = await harness("send-state", "k-1", token=alice, admin=False)
    assert state.lines[0] == "returned"
    as_json = await harness("--json", "send-state", "k-1", token=alice, admin=False)
    assert as_json.json["outcome"] == {"kind": "success", "result": {}}
    absent = await harness("send-state", "never", token=alice, admin=False)
    assert absent.out.strip() == "absent"


async def test_a_send_failure_exits_one_with_its_message_and_reason(harness, served):
    alice = await served.register("alice")
    run = await harness("send", "agent:nobody", "hi", token=alice, admin=False)
    assert run.code == 1
    assert run.err.splitlines() == [
        "send failed: agent:nobody is not registered with the gateway",
        "reason=unknown-agent",
    ]
    as_json = await harness("--json", "send", "agent:nobody", "hi", token=alice, admin=False)
    assert as_json.code == 1
    assert json.loads(as_json.err) == {
        "error": {
            "type": "SendError",
            "reason": "unknown-agent",
            "detail": "agent:nobody is not registered with the gateway",
        }
    }


async def test_a_collective_failure_prints_every_field_with_json(harness, served):
    alice = await served.register("alice")
    served.core.scripted["agent:bob"] = CollectiveError("col_x", RequestNone())
    run = await harness(
        "--json", "send", "agent:bob", '{"action": "decline"}', token=alice, admin=False
    )
    assert run.code == 1
    assert json.loads(run.err) == {
        "error": {"type": "CollectiveError", "reason": "request-none", "id": "col_x"}
    }


async def test_a_malformed_operation_is_refused_before_sending(harness, served):
    alice = await served.register("alice")
    run = await harness("send", "agent:bob", '{"gather": 5}', token=alice, admin=False)
    assert run.code == 1
    assert run.err.splitlines()[0].startswith("gather not sent: ")
    assert run.err.splitlines()[-1] == "reason=message-text-invalid"
    assert served.core.endpoints["alice"].calls == []


async def test_parse_prints_the_send_input(harness, served):
    alice = await served.register("alice")
    run = await harness(
        "parse",
        "agent:bob",
        '{"gather": "when?", "deadline": 300, "requestedSchema": {"type": "object", "properties": {}}}',
        token=alice,
        admin=False,
    )
    assert run.code == 0
    assert run.json == {
        "to": "agent:bob",
        "text": "when?",
        "collective": {
            "op": "gather",
            "deadline": 300,
            "requestedSchema": {"type": "object", "properties": {}},
        },
    }


async def test_listen_prints_one_json_line_per_delivery_and_stops_after_max(harness, served):
    alice = await served.register("alice")
    tokens = [await served.core.deliver("alice", text_item(f"m{n}")) for n in range(3)]
    run = await harness("listen", "--max", "2", "--ack", token=alice, admin=False)
    assert run.code == 0
    lines = [json.loads(line) for line in run.lines]
    assert [line["token"] for line in lines] == tokens[:2]
    assert lines[0]["item"] == {
        "kind": "multicast",
        "message": {
            "kind": "direct",
            "postId": lines[0]["item"]["message"]["postId"],
            "address": "agent:carol",
            "sender": "agent:carol",
            "content": [{"type": "text", "text": "m0"}],
        },
    }
    assert "guidance" not in lines[0]
    # --ack retired the two it printed; the third is still there.
    status = await served.core.agent_status("alice")
    assert status.backlog == 1


async def test_listen_text_prints_each_delivery_as_a_readable_line(harness, served):
    alice = await served.register("alice")
    token = await served.core.deliver("alice", text_item("m0"))
    run = await harness("listen", "--text", "--max", "1", token=alice, admin=False)
    assert run.code == 0
    [line] = run.lines
    assert line.startswith(f"{token} message ")
    assert line.endswith(' from agent:carol: "m0"')
    # -o text is the same readable form (the delivery is still unacknowledged).
    again = await harness("listen", "-o", "text", "--max", "1", token=alice, admin=False)
    assert again.lines == run.lines


async def test_listen_stops_after_its_timeout_with_nothing_to_print(harness, served):
    alice = await served.register("alice")
    run = await harness("listen", "--timeout", "0.3", token=alice, admin=False)
    assert run.code == 0
    assert run.out == ""
    await until(lambda: not served.core.endpoints["alice"].inbox.listening)


async def test_ack_reports_each_token_and_exits_one_when_one_failed(harness, served):
    alice = await served.register("alice")
    token = await served.core.deliver("alice", text_item("m"))
    run = await harness("ack", token, "dlv_never", token=alice, admin=False)
    assert run.code == 1
    assert run.lines == [f"{token}\tok", "dlv_never\tunknown-delivery"]
    again = await harness("--json", "ack", token, token=alice, admin=False)
    assert again.code == 0
    assert again.json == {"results": [{"token": token, "ok": True}]}


async def test_ack_reads_tokens_from_stdin(harness, served, monkeypatch):
    alice = await served.register("alice")
    tokens = [await served.core.deliver("alice", text_item(f"m{n}")) for n in range(2)]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(tokens) + "\n"))
    run = await harness("ack", "-", token=alice, admin=False)
    assert run.code == 0
    assert run.lines == [f"{token}\tok" for token in tokens]


async def test_conversations_and_history(harness, served):
    from harness_contract.values import TextPart

    from gateway.endpoint.api import ConversationRecord, ConversationSummary

    await served.register("alice")
    served.core.conversation_list = [
        ConversationSummary(
            address="agent:bob",
            kind="direct",
            members=("agent:alice", "agent:bob"),
            head_record_hash="rch_1",
            depth=1,
        )
    ]
    served.core.records = [
        ConversationRecord(
            record_hash="rch_1",
            post_id="pst_1",
            author="agent:bob",
            depth=1,
            content=(TextPart(text="hello"),),
            certified_record=b"{}",
        )
    ]
    conversations = await harness("--json", "conversations", "--agent", "alice")
    assert conversations.json == {
        "conversations": [
            {
                "address": "agent:bob",
                "kind": "direct",
                "members": ["agent:alice", "agent:bob"],
                "headRecordHash": "rch_1",
                "depth": 1,
            }
        ]
    }
    history = await harness("--json", "history", "--agent", "alice", "agent:bob")
    assert history.json == {
        "records": [
            {
                "recordHash": "rch_1",
                "postId": "pst_1",
                "author": "agent:bob",
                "depth": 1,
                "content": [{"type": "text", "text": "hello"}],
            }
        ],
        "hasMore": False,
    }
    text = await harness("history", "--agent", "alice", "agent:bob")
    assert text.lines == ['rch_1 depth 1, pst_1 from agent:bob: "hello"']


async def test_gather_sends_the_question_with_its_deadline_and_form(harness, served, tmp_path):
    from harness_contract.values import AskOperation, CollectiveOp, MessageInput, SendResult

    alice = await served.register("alice")
    served.core.scripted["agent:bob"] = SendResult(operation_id="col_x")
    form = tmp_path / "form.json"
    schema = '{"type": "object", "properties": {"slot": {"type": "string"}}}'
    form.write_text(schema)
    run = await harness(
        "gather",
        "agent:bob",
        "when?",
        "--deadline",
        "120",
        "--schema",
        str(form),
        token=alice,
        admin=False,
    )
    assert run.code == 0
    assert run.json == {"operationId": "col_x"}
    inline = await harness(
        "gather",
        "agent:bob",
        "when?",
        "--deadline",
        "120",
        "--schema",
        schema,
        "-o",
        "text",
        token=alice,
        admin=False,
    )
    assert inline.code == 0
    assert inline.lines[0].startswith("gather col_x asked in agent:bob; its result arrives")
    first, second = served.core.endpoints["alice"].calls
    assert first.send_input == second.send_input
    call = first
    assert call.send_input == MessageInput(
        to="agent:bob",
        text="when?",
        collective=AskOperation(
            op=CollectiveOp.GATHER,
            deadline=120,
            requested_schema={"type": "object", "properties": {"slot": {"type": "string"}}},
        ),
    )


async def test_answer_accepts_with_form_fields_or_declines(harness, served):
    from harness_contract.values import Accept, Decline, ResponseInput, SendResult

    alice = await served.register("alice")
    served.core.scripted["agent:bob"] = SendResult(operation_id="col_x")
    accepted = await harness(
        "answer",
        "agent:bob",
        "--accept",
        '{"slot": "tue", "n": 2, "tags": ["a"]}',
        token=alice,
        admin=False,
    )
    declined = await harness("answer", "agent:bob", "--decline", token=alice, admin=False)
    assert (accepted.code, declined.code) == (0, 0)
    calls = served.core.endpoints["alice"].calls
    assert [call.send_input for call in calls] == [
        ResponseInput(
            to="agent:bob", response=Accept(content={"slot": "tue", "n": 2.0, "tags": ("a",)})
        ),
        ResponseInput(to="agent:bob", response=Decline()),
    ]
    bad = await harness("answer", "agent:bob", "--accept", '{"n": null}', token=alice, admin=False)
    assert bad.code == 2
