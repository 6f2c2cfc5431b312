from __future__ import annotations

import pytest
from harness_contract.ids import HashId, RandomId
from harness_contract.jsonvalue import parse_canonical_json
from hypothesis import given
from hypothesis import strategies as st

import gateway.router
from gateway.router import (
    ENVELOPE_BODY_MAX_BYTES,
    SIGNED_ENVELOPE_MAX_BYTES,
    Cursor,
    VerifiedEnvelope,
    envelope_digest,
    routing_problem,
)
from gateway.router.port import ORDER_MAX
from tests.unit.router.fakes import agent_ids, signed_envelope

INSTANCE = "rti_AAECAwQFBgcICQoLDA0ODw"


def test_the_public_face_of_the_router_package_is_pinned():
    assert sorted(gateway.router.__all__) == sorted(
        [
            "ENVELOPE_BODY_MAX_BYTES",
            "POLL_HOLD",
            "RECIPIENTS_MAX",
            "SIGNED_ENVELOPE_MAX_BYTES",
            "Accepted",
            "Batch",
            "Cursor",
            "CursorInvalid",
            "Entry",
            "EnvelopeVerifier",
            "FeedGap",
            "IdempotencyConflict",
            "InProcessRouter",
            "MessageInvalid",
            "PollOutcome",
            "RetryIdentityUnknown",
            "RingSettings",
            "RingStatus",
            "RouterClosedError",
            "RouterPort",
            "RouterRestarted",
            "RouterState",
            "RouterUnavailable",
            "RouterVersionMismatch",
            "SendMode",
            "SendOutcome",
            "VerifiedEnvelope",
            "envelope_digest",
            "routing_problem",
        ]
    )


def test_a_cursor_encodes_as_instance_and_decimal_order():
    assert Cursor(instance_id=INSTANCE, order=42).encode() == f"{INSTANCE}:42".encode()
    assert Cursor.decode(f"{INSTANCE}:0".encode()) == Cursor(instance_id=INSTANCE, order=0)


@given(order=st.integers(0, ORDER_MAX))
def test_a_cursor_survives_encode_and_decode(order):
    cursor = Cursor(instance_id=RandomId.ROUTER_INSTANCE.mint(), order=order)
    assert Cursor.decode(cursor.encode()) == cursor


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b":",
        f"{INSTANCE}".encode(),
        f"{INSTANCE}:".encode(),
        f"{INSTANCE}:01".encode(),
        f"{INSTANCE}:-1".encode(),
        f"{INSTANCE}:+1".encode(),
        f"{INSTANCE}: 1".encode(),
        f"{INSTANCE}:1\n".encode(),
        f"{INSTANCE}:1:2".encode(),
        f"{INSTANCE}:{ORDER_MAX + 1}".encode(),
        f"{INSTANCE}:١".encode(),  # a non-ASCII digit
        b"rti_AAECAwQFBgcICQoLDA0ODx:1",  # non-zero trailing bits
        b"agt_AAECAwQFBgcICQoLDA0ODw:1",  # not a RouterInstanceId
        b"\xff\xfe",
    ],
)
def test_a_malformed_cursor_decodes_to_none(data):
    assert Cursor.decode(data) is None


@given(data=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_any_bytes_decode_to_none_or_to_a_cursor_that_encodes_back_to_them(data):
    cursor = Cursor.decode(data)
    assert cursor is None or cursor.encode() == data


def test_the_envelope_digest_of_the_bytes_is_the_smd_hash_of_the_parsed_envelope():
    alice, bob = agent_ids(2)
    data = signed_envelope(sender=alice, recipients=[alice, bob])
    digest = envelope_digest(data)
    assert digest == HashId.ENVELOPE_DIGEST.of(parse_canonical_json(data))
    assert HashId.ENVELOPE_DIGEST.is_valid(digest)


def test_the_envelope_digest_is_pinned():
    assert envelope_digest(b'{"kind":"signed_envelope"}') == (
        "smd_pWSOfi7-4YfKfAIrF0lu_9DtgayzC2x13WoswG9aPug"
    )


def test_the_envelope_bound_admits_the_largest_valid_envelope():
    members = agent_ids(32)
    data = signed_envelope(
        sender=members[0],
        recipients=members,
        body=bytes(ENVELOPE_BODY_MAX_BYTES),
        signature="A" * 86,  # b64 of a 64-byte Ed25519 signature
    )
    assert len(data) <= SIGNED_ENVELOPE_MAX_BYTES
    assert SIGNED_ENVELOPE_MAX_BYTES - len(data) < 4_096


def _verified(**changes: object) -> VerifiedEnvelope:
    alice, bob = agent_ids(2)
    fields: dict[str, object] = {
        "sender_agent_id": alice,
        "message_id": RandomId.MESSAGE.mint(),
        "recipient_agent_ids": (alice, bob),
        "body_size": 5,
    }
    fields.update(changes)
    return VerifiedEnvelope(**fields)  # type: ignore[arg-type]


def test_routing_problem_accepts_a_well_formed_envelope():
    assert routing_problem(_verified()) is None
    assert routing_problem(_verified(body_size=ENVELOPE_BODY_MAX_BYTES)) is None
    assert routing_problem(_verified(recipient_agent_ids=tuple(agent_ids(32)))) is None
    assert routing_problem(_verified(recipient_agent_ids=tuple(agent_ids(1)))) is None


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"recipient_agent_ids": ()}, "1 to 32"),
        ({"recipient_agent_ids": tuple(agent_ids(33))}, "1 to 32"),
        (
            {"recipient_agent_ids": ("agt_-_v7-_v7-_v7-_v7-_v7-w", "agt_AAAAAAAAAAAAAAAAAAAAAA")},
            "byte order",
        ),
        ({"recipient_agent_ids": ("agt_AAAAAAAAAAAAAAAAAAAAAA",) * 2}, "byte order"),
        ({"recipient_agent_ids": ("bob",)}, "not an AgentId"),
        ({"sender_agent_id": "alice"}, "sender"),
        ({"message_id": "msg_"}, "messageId"),
        ({"body_size": ENVELOPE_BODY_MAX_BYTES + 1}, "body"),
        ({"body_size": -1}, "body"),
    ],
)
def test_routing_problem_names_what_the_router_refuses(changes, words):
    problem = routing_problem(_verified(**changes))
    assert problem is not None
    assert words in problem
