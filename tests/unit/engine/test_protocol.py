from __future__ import annotations

import contextlib
import copy
import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from harness_contract.content import multicast_content
from harness_contract.ids import HashId, RandomId, b64
from harness_contract.jsonvalue import canonical_json
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.engine.protocol import (
    MAX_ENVELOPE_BODY_BYTES,
    VERSION,
    ActionCertifiedRecord,
    ActionProposal,
    ActionSignature,
    AgentCard,
    CatchUpAttestation,
    CatchUpIncomplete,
    CatchUpItemKind,
    CatchUpPage,
    CatchUpRequest,
    Certificate,
    CertificateKind,
    CertifiedRecord,
    CompletedReanchor,
    ConversationIdentity,
    DurabilityVote,
    Envelope,
    GenesisAction,
    GenesisAnchor,
    MembershipDescriptor,
    Packet,
    PostAction,
    PostIntent,
    ProtocolError,
    ReanchorBody,
    ReanchorVote,
    SignedAgentCard,
    SignedEnvelope,
    SignedStatement,
    Statement,
    action_hash,
    action_quorum_met,
    anchor_hash,
    build_genesis_action,
    build_membership,
    build_post_action,
    build_record_core,
    check_action,
    check_action_certificate,
    check_action_certified_record,
    check_catch_up_answer,
    check_certified_record,
    check_completed_reanchor,
    check_durability_certificate,
    check_envelope,
    check_reanchor_certificate,
    conversation_id,
    decode,
    decode_packet,
    decode_signed_envelope,
    encode,
    envelope_digest,
    envelope_packet,
    envelope_recipients,
    evidence_id,
    faults_tolerated,
    membership_hash,
    post_intent_hash,
    quorum,
    record_hash,
    seal_envelope,
    sign_envelope,
    sign_statement,
    verify_member_statement,
    verify_membership,
    verify_statement_signature,
)
from gateway.identity.cards import sign_card, verify_card
from gateway.identity.keys import SigningKey, VerifyCache
from gateway.identity.objects import format_timestamp, is_timestamp

ZERO = "agt_AAAAAAAAAAAAAAAAAAAAAA"
SEVEN_F = "agt_f39_f39_f39_f39_f39_fw"
F_B = "agt_-_v7-_v7-_v7-_v7-_v7-w"
REGISTRY = SigningKey(hashlib.sha256(b"registry").digest())
INSTANCE = "rti_" + b64(b"\x01" * 16)
NEW_INSTANCE = "rti_" + b64(b"\x02" * 16)
ISSUED_AT = "2026-01-02T03:04:05Z"


# --- Fixtures ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    key: SigningKey
    card: SignedAgentCard

    @property
    def agent_id(self) -> str:
        return self.card.card.agent_id


def make_member(index: int) -> Member:
    key = SigningKey(hashlib.sha256(b"member %d" % index).digest())
    agent_id = "agt_" + b64(hashlib.sha256(b"id %d" % index).digest()[:16])
    card = AgentCard(
        agent_id=agent_id,
        agent_name=f"agent-{index:02d}",
        public_key=key.public_key_b64,
        issued_at=ISSUED_AT,
    )
    return Member(key=key, card=sign_card(REGISTRY, card))


@dataclass(frozen=True)
class Conversation:
    members: list[Member]  # in AgentId byte order
    membership: MembershipDescriptor
    anchor: GenesisAnchor
    genesis: GenesisAction

    @property
    def n(self) -> int:
        return len(self.members)

    def member(self, agent_id: str) -> Member:
        return next(m for m in self.members if m.agent_id == agent_id)

    def intent(self, author: Member, text: str = "hi") -> PostIntent:
        return PostIntent(
            conversation_id=self.membership.conversation_id,
            membership_hash=membership_hash(self.membership),
            author_agent_id=author.agent_id,
            post_id=RandomId.POST.mint(),
            content=multicast_content(text),
        )


def make_conversation(n: int, *, first: int = 0) -> Conversation:
    members = [make_member(index) for index in range(first, first + n)]
    membership = build_membership(member.card for member in members)
    by_id = {member.agent_id: member for member in members}
    ordered = [by_id[agent_id] for agent_id in membership.member_agent_ids]
    anchor = GenesisAnchor(
        conversation_id=membership.conversation_id,
        membership_hash=membership_hash(membership),
        router_instance_id=INSTANCE,
    )
    intent = PostIntent(
        conversation_id=membership.conversation_id,
        membership_hash=membership_hash(membership),
        author_agent_id=ordered[0].agent_id,
        post_id=RandomId.POST.mint(),
        content=multicast_content("first"),
    )
    genesis = build_genesis_action(membership=membership, anchor=anchor, intent=intent)
    return Conversation(ordered, membership, anchor, genesis)


def signed(members: list[Member], statement_for) -> tuple[SignedStatement, ...]:
    return tuple(sign_statement(m.key, statement_for(m)) for m in members)


def action_certificate(action, signers: list[Member]) -> Certificate:
    hashed = action_hash(action)
    return Certificate(
        kind=CertificateKind.ACTION,
        subject=hashed,
        entries=signed(
            signers, lambda m: ActionSignature(signer_agent_id=m.agent_id, action_hash=hashed)
        ),
    )


def durability_certificate(conv: Conversation, record: str, signers) -> Certificate:
    return Certificate(
        kind=CertificateKind.DURABILITY,
        subject=record,
        entries=signed(
            signers,
            lambda m: DurabilityVote(
                signer_agent_id=m.agent_id,
                conversation_id=conv.membership.conversation_id,
                membership_hash=membership_hash(conv.membership),
                record_hash=record,
            ),
        ),
    )


def certified(conv: Conversation, action, router_anchor, signers=None, voters=None):
    signers = conv.members if signers is None else signers
    voters = conv.members if voters is None else voters
    core = build_record_core(membership=conv.membership, action=action)
    staged = ActionCertifiedRecord(
        record_hash=record_hash(core),
        record_core=core,
        router_anchor=router_anchor,
        action_certificate=action_certificate(action, signers),
    )
    return CertifiedRecord(
        action_certified_record=staged,
        durability_certificate=durability_certificate(conv, staged.record_hash, voters),
    )


def completed_reanchor(conv: Conversation, selected: str, voters=None) -> CompletedReanchor:
    body = ReanchorBody(
        conversation_id=conv.membership.conversation_id,
        membership_hash=membership_hash(conv.membership),
        previous_anchor_hash=anchor_hash(conv.anchor),
        selected_record_hash=selected,
        router_instance_id=NEW_INSTANCE,
    )
    hashed = anchor_hash(body)
    voters = conv.members if voters is None else voters
    votes = signed(
        voters,
        lambda m: ReanchorVote(signer_agent_id=m.agent_id, anchor_hash=hashed, reanchor=body),
    )
    return CompletedReanchor(
        anchor_hash=hashed,
        reanchor=body,
        certificate=Certificate(kind=CertificateKind.REANCHOR, subject=hashed, entries=votes),
    )


def catch_up_request(conv: Conversation, requester: Member, known=None) -> CatchUpRequest:
    return CatchUpRequest(
        conversation_id=conv.membership.conversation_id,
        membership_hash=membership_hash(conv.membership),
        requester_agent_id=requester.agent_id,
        known_record_hash=known[0] if known else None,
        known_anchor_hash=known[1] if known else None,
    )


def attestation(responder: Member, request, kind, item_hash, has_more) -> SignedStatement:
    return sign_statement(
        responder.key,
        CatchUpAttestation(
            signer_agent_id=responder.agent_id,
            request=request,
            item_kind=kind,
            item_hash=item_hash,
            has_more=has_more,
        ),
    )


CONV = make_conversation(4)
GENESIS_RECORD = certified(CONV, CONV.genesis, CONV.anchor)
REANCHOR = completed_reanchor(CONV, GENESIS_RECORD.record_hash)
POST = build_post_action(
    anchor_hash=REANCHOR.anchor_hash,
    previous_record_hash=GENESIS_RECORD.record_hash,
    intent=CONV.intent(CONV.members[2], "second"),
)
POST_RECORD = certified(CONV, POST, REANCHOR, signers=CONV.members[1:])
REQUEST = catch_up_request(CONV, CONV.members[3])
PAGE = CatchUpPage(
    request=REQUEST,
    item=GENESIS_RECORD,
    has_more=True,
    attestation=attestation(
        CONV.members[1],
        REQUEST,
        CatchUpItemKind.CERTIFIED_RECORD,
        GENESIS_RECORD.record_hash,
        True,
    ),
)
INCOMPLETE = CatchUpIncomplete(
    request=REQUEST,
    attestation=attestation(CONV.members[0], REQUEST, CatchUpItemKind.INCOMPLETE, None, False),
)
SAMPLE_PACKETS: dict[str, Packet] = {
    "genesis proposal": ActionProposal(action=CONV.genesis),
    "post proposal": ActionProposal(action=POST),
    "action signature": POST_RECORD.action_certified_record.action_certificate.entries[0],
    "durability vote": POST_RECORD.durability_certificate.entries[0],
    "reanchor vote": REANCHOR.certificate.entries[0],
    "attestation": PAGE.attestation,
    "catch-up request": REQUEST,
    "catch-up request with a position": catch_up_request(
        CONV, CONV.members[0], (GENESIS_RECORD.record_hash, REANCHOR.anchor_hash)
    ),
    "catch-up page of a record": PAGE,
    "catch-up page of a re-anchor": CatchUpPage(
        request=REQUEST,
        item=REANCHOR,
        has_more=False,
        attestation=attestation(
            CONV.members[1],
            REQUEST,
            CatchUpItemKind.COMPLETED_REANCHOR,
            REANCHOR.anchor_hash,
            False,
        ),
    ),
    "catch-up incomplete": INCOMPLETE,
    "completed reanchor": REANCHOR,
}


def as_json(obj) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(encode(obj))
    return value


def jcs(value) -> bytes:
    return canonical_json(value)


# --- engine.md §10 vector 2: byte order --------------------------------------------------


def test_the_conversation_identity_lists_agent_ids_in_byte_order_and_derives_the_vector():
    identity = ConversationIdentity.of([F_B, SEVEN_F, ZERO])
    assert identity.member_agent_ids == (ZERO, SEVEN_F, F_B)
    assert sorted([ZERO, SEVEN_F, F_B]) != [ZERO, SEVEN_F, F_B]
    expected = (
        b'{"kind":"conversation_identity","memberAgentIds":["agt_AAAAAAAAAAAAAAAAAAAAAA",'
        b'"agt_f39_f39_f39_f39_f39_fw","agt_-_v7-_v7-_v7-_v7-_v7-w"],"version":"harness/1"}'
    )
    assert encode(identity) == expected
    assert (
        conversation_id([F_B, ZERO, SEVEN_F]) == "cnv_qF0CzgWIvDEnr30lD2k820Oo1Hx_7hHXB5jv02vC5bQ"
    )
    assert decode(expected, ConversationIdentity) == identity


def test_a_conversation_identity_in_text_order_is_rejected():
    value = {
        "kind": "conversation_identity",
        "memberAgentIds": sorted([ZERO, SEVEN_F, F_B]),
        "version": VERSION,
    }
    with pytest.raises(ProtocolError, match="byte order"):
        decode(jcs(value), ConversationIdentity)


@pytest.mark.parametrize(
    "ids",
    [[ZERO], [ZERO, ZERO], [ZERO, "agt_AAAAAAAAAAAAAAAAAAAAAB"], [ZERO, "pst_" + "A" * 43]],
)
def test_a_conversation_id_needs_two_to_thirty_two_distinct_valid_agent_ids(ids):
    with pytest.raises(ProtocolError):
        conversation_id(ids)


def test_the_membership_descriptor_orders_cards_by_agent_id_bytes():
    conv = make_conversation(10)
    ids = list(conv.membership.member_agent_ids)
    keys = [RandomId.AGENT.decode(agent_id) or b"" for agent_id in ids]
    assert keys == sorted(keys)
    assert ids != sorted(ids)  # these ids sort differently as text
    assert conv.membership.conversation_id == conversation_id(
        reversed(conv.membership.member_agent_ids)
    )


# --- engine.md §10 vector 5: thresholds --------------------------------------------------


def test_the_quorum_and_fault_bound_match_the_published_thresholds():
    assert [quorum(n) for n in range(2, 11)] == [2, 3, 3, 4, 5, 5, 6, 7, 7]
    assert quorum(32) == 22
    assert [faults_tolerated(n) for n in (2, 3, 4, 7, 10, 32)] == [0, 0, 1, 2, 3, 10]


@pytest.mark.parametrize("n", [2, 3, 4, 10])
def test_a_post_certificate_passes_at_the_quorum_and_fails_one_below(n):
    conv = make_conversation(n)
    author = conv.members[-1]
    action = build_post_action(
        anchor_hash=anchor_hash(conv.anchor),
        previous_record_hash="rch_" + b64(b"\x00" * 32),
        intent=conv.intent(author),
    )
    others = [m for m in conv.members if m is not author]
    at_quorum = sorted([author, *others[: quorum(n) - 1]], key=lambda m: conv.members.index(m))
    check_action_certificate(
        action_certificate(action, at_quorum), action=action, membership=conv.membership
    )
    below = [m for m in at_quorum if m is not others[0]] if quorum(n) > 1 else []
    assert len(below) == quorum(n) - 1
    with pytest.raises(ProtocolError, match=f"needs {quorum(n)}"):
        check_action_certificate(
            action_certificate(action, below), action=action, membership=conv.membership
        )


@pytest.mark.parametrize("n", [2, 3, 4, 10])
def test_a_genesis_certificate_needs_every_member_and_fails_with_one_missing(n):
    conv = make_conversation(n)
    check_action_certificate(
        action_certificate(conv.genesis, conv.members),
        action=conv.genesis,
        membership=conv.membership,
    )
    for missing in range(n):
        partial = conv.members[:missing] + conv.members[missing + 1 :]
        with pytest.raises(ProtocolError, match="GENESIS needs all"):
            check_action_certificate(
                action_certificate(conv.genesis, partial),
                action=conv.genesis,
                membership=conv.membership,
            )


@pytest.mark.parametrize("n", [4, 10])
def test_a_post_certificate_of_a_quorum_without_the_author_fails(n):
    conv = make_conversation(n)
    author = conv.members[0]
    action = build_post_action(
        anchor_hash=anchor_hash(conv.anchor),
        previous_record_hash="rch_" + b64(b"\x01" * 32),
        intent=conv.intent(author),
    )
    without_author = conv.members[1 : quorum(n) + 1]
    assert len(without_author) == quorum(n)
    with pytest.raises(ProtocolError, match="without the author"):
        check_action_certificate(
            action_certificate(action, without_author), action=action, membership=conv.membership
        )
    assert not action_quorum_met(action, {m.agent_id for m in without_author}, n)


@pytest.mark.parametrize("n", [2, 3, 4, 10])
def test_a_post_certificate_may_grow_to_every_member(n):
    conv = make_conversation(n)
    action = build_post_action(
        anchor_hash=anchor_hash(conv.anchor),
        previous_record_hash="rch_" + b64(b"\x02" * 32),
        intent=conv.intent(conv.members[0]),
    )
    check_action_certificate(
        action_certificate(action, conv.members), action=action, membership=conv.membership
    )


def test_a_durability_vote_never_counts_as_an_action_signature():
    certificate = POST_RECORD.action_certified_record.action_certificate
    # The same signers, one entry replaced by that member's durability vote.
    vote = next(
        v
        for v in POST_RECORD.durability_certificate.entries
        if v.signer_agent_id == certificate.entries[0].signer_agent_id
    )
    mixed = replace(certificate, entries=(vote, *certificate.entries[1:]))
    with pytest.raises(ProtocolError, match="durability_vote where action_signature is required"):
        check_action_certificate(mixed, action=POST, membership=CONV.membership)
    only_votes = replace(certificate, entries=POST_RECORD.durability_certificate.entries)
    with pytest.raises(ProtocolError):
        check_action_certificate(only_votes, action=POST, membership=CONV.membership)


def test_an_action_signature_never_counts_as_a_durability_vote():
    durability = POST_RECORD.durability_certificate
    signatures = POST_RECORD.action_certified_record.action_certificate.entries
    with pytest.raises(ProtocolError, match="where durability_vote is required"):
        check_durability_certificate(
            replace(durability, entries=signatures),
            record_hash=durability.subject,
            membership=CONV.membership,
        )


def test_a_reanchor_vote_never_counts_as_a_durability_vote_and_back():
    with pytest.raises(ProtocolError, match="where durability_vote is required"):
        check_durability_certificate(
            replace(POST_RECORD.durability_certificate, entries=REANCHOR.certificate.entries),
            record_hash=POST_RECORD.record_hash,
            membership=CONV.membership,
        )
    with pytest.raises(ProtocolError, match="where reanchor_vote is required"):
        check_reanchor_certificate(
            replace(REANCHOR.certificate, entries=POST_RECORD.durability_certificate.entries),
            reanchor=REANCHOR.reanchor,
            membership=CONV.membership,
        )


@pytest.mark.parametrize("n", [2, 3, 4, 10])
def test_durability_and_reanchor_certificates_pass_at_the_quorum_and_fail_one_below(n):
    conv = make_conversation(n)
    record = "rch_" + b64(b"\x03" * 32)
    at_quorum = conv.members[: quorum(n)]
    check_durability_certificate(
        durability_certificate(conv, record, at_quorum),
        record_hash=record,
        membership=conv.membership,
    )
    with pytest.raises(ProtocolError, match=f"needs {quorum(n)}"):
        check_durability_certificate(
            durability_certificate(conv, record, at_quorum[:-1]),
            record_hash=record,
            membership=conv.membership,
        )
    check_completed_reanchor(
        completed_reanchor(conv, record, at_quorum), membership=conv.membership
    )
    with pytest.raises(ProtocolError, match=f"needs {quorum(n)}"):
        check_completed_reanchor(
            completed_reanchor(conv, record, at_quorum[:-1]), membership=conv.membership
        )


def test_different_valid_signer_subsets_give_one_record_hash():
    m0, m1, m2, m3 = CONV.members
    assert POST.author_agent_id == m2.agent_id
    first = certified(CONV, POST, REANCHOR, signers=[m1, m2, m3], voters=[m0, m1, m2])
    second = certified(CONV, POST, REANCHOR, signers=[m0, m2, m3], voters=[m1, m2, m3])
    third = certified(CONV, POST, REANCHOR)
    for record in (first, second, third):
        check_certified_record(record, membership=CONV.membership)
    assert len({encode(first), encode(second), encode(third)}) == 3
    assert first.record_hash == second.record_hash == third.record_hash
    core = build_record_core(membership=CONV.membership, action=POST)
    assert first.record_hash == record_hash(core)


# --- Certificate entries -----------------------------------------------------------------


def test_certificate_entries_out_of_byte_order_or_repeated_fail():
    certificate = POST_RECORD.action_certified_record.action_certificate
    swapped = (certificate.entries[1], certificate.entries[0], *certificate.entries[2:])
    with pytest.raises(ProtocolError, match="byte order"):
        check_action_certificate(
            replace(certificate, entries=swapped), action=POST, membership=CONV.membership
        )
    repeated = (certificate.entries[0], *certificate.entries)
    with pytest.raises(ProtocolError, match="one entry per signer"):
        check_action_certificate(
            replace(certificate, entries=repeated), action=POST, membership=CONV.membership
        )


def test_a_certificate_entry_from_a_non_member_fails():
    outsider = make_member(99)
    certificate = POST_RECORD.action_certified_record.action_certificate
    entry = sign_statement(
        outsider.key,
        ActionSignature(signer_agent_id=outsider.agent_id, action_hash=certificate.subject),
    )
    entries = sorted(
        (*certificate.entries, entry),
        key=lambda e: RandomId.AGENT.decode(e.signer_agent_id) or b"",
    )
    with pytest.raises(ProtocolError, match="not a member"):
        check_action_certificate(
            replace(certificate, entries=tuple(entries)), action=POST, membership=CONV.membership
        )


def test_a_certificate_entry_naming_another_hash_or_badly_signed_fails():
    certificate = POST_RECORD.action_certified_record.action_certificate
    signer = CONV.member(certificate.entries[0].signer_agent_id)
    other = sign_statement(
        signer.key,
        ActionSignature(signer_agent_id=signer.agent_id, action_hash=action_hash(CONV.genesis)),
    )
    with pytest.raises(ProtocolError, match="another subject"):
        check_action_certificate(
            replace(certificate, entries=(other, *certificate.entries[1:])),
            action=POST,
            membership=CONV.membership,
        )
    forged = replace(certificate.entries[0], signature=certificate.entries[1].signature)
    with pytest.raises(ProtocolError, match="signature is invalid"):
        check_action_certificate(
            replace(certificate, entries=(forged, *certificate.entries[1:])),
            action=POST,
            membership=CONV.membership,
        )


def test_a_certificate_for_another_action_fails():
    certificate = POST_RECORD.action_certified_record.action_certificate
    with pytest.raises(ProtocolError, match="not the action's hash"):
        check_action_certificate(certificate, action=CONV.genesis, membership=CONV.membership)


def test_certificate_checks_share_a_verification_cache():
    cache = VerifyCache()
    check_certified_record(POST_RECORD, membership=CONV.membership, cache=cache)
    misses = cache.misses
    check_certified_record(POST_RECORD, membership=CONV.membership, cache=cache)
    assert cache.misses == misses
    assert cache.hits >= misses


# --- Records, actions and anchors ----------------------------------------------------------


def test_a_genesis_and_a_post_record_under_a_completed_reanchor_check():
    check_certified_record(GENESIS_RECORD, membership=CONV.membership)
    check_certified_record(POST_RECORD, membership=CONV.membership)
    assert GENESIS_RECORD.action_certified_record.record_core.anchor_hash == anchor_hash(
        CONV.anchor
    )


def test_a_genesis_record_whose_router_anchor_is_another_anchor_fails():
    other = replace(CONV.anchor, router_instance_id=NEW_INSTANCE)
    staged = replace(GENESIS_RECORD.action_certified_record, router_anchor=other)
    with pytest.raises(ProtocolError, match="routerAnchor"):
        check_action_certified_record(staged, membership=CONV.membership)


def test_a_post_record_whose_router_anchor_does_not_hash_to_its_anchor_fails():
    staged = replace(POST_RECORD.action_certified_record, router_anchor=CONV.anchor)
    with pytest.raises(ProtocolError, match="does not hash"):
        check_action_certified_record(staged, membership=CONV.membership)


def test_a_record_with_a_wrong_record_hash_fails():
    staged = replace(POST_RECORD.action_certified_record, record_hash=GENESIS_RECORD.record_hash)
    with pytest.raises(ProtocolError, match="recordHash"):
        check_action_certified_record(staged, membership=CONV.membership)


def test_check_action_refuses_a_wrong_intent_hash_a_foreign_author_or_membership():
    check_action(POST, CONV.membership)
    check_action(CONV.genesis, CONV.membership)
    with pytest.raises(ProtocolError, match="postIntentHash"):
        check_action(replace(POST, post_intent_hash="pit_" + b64(b"\x00" * 32)), CONV.membership)
    outsider = make_member(77)
    foreign = replace(POST.post_intent, author_agent_id=outsider.agent_id)
    with pytest.raises(ProtocolError, match="not a member"):
        check_action(
            replace(POST, post_intent=foreign, post_intent_hash=post_intent_hash(foreign)),
            CONV.membership,
        )
    other = make_conversation(4, first=10)
    with pytest.raises(ProtocolError, match="conversation"):
        check_action(POST, other.membership)


def test_post_intent_hash_excludes_predecessor_and_anchor():
    rebased = build_post_action(
        anchor_hash=anchor_hash(CONV.anchor),
        previous_record_hash=POST_RECORD.record_hash,
        intent=POST.post_intent,
    )
    assert rebased.post_intent_hash == POST.post_intent_hash
    assert action_hash(rebased) != action_hash(POST)


def test_every_hash_has_its_prefix():
    statement = POST_RECORD.durability_certificate.entries[0].statement
    signed_envelope = seal_envelope(
        CONV.members[0].key,
        sender_agent_id=CONV.members[0].agent_id,
        packet=REQUEST,
        member_agent_ids=CONV.membership.member_agent_ids,
    )
    pairs = [
        (HashId.CONVERSATION, CONV.membership.conversation_id),
        (HashId.MEMBERSHIP, membership_hash(CONV.membership)),
        (HashId.POST_INTENT, post_intent_hash(POST.post_intent)),
        (HashId.ANCHOR, anchor_hash(CONV.anchor)),
        (HashId.ANCHOR, anchor_hash(REANCHOR.reanchor)),
        (HashId.ACTION, action_hash(POST)),
        (HashId.RECORD, POST_RECORD.record_hash),
        (HashId.EVIDENCE, evidence_id(statement)),
        (HashId.ENVELOPE_DIGEST, envelope_digest(signed_envelope)),
    ]
    for kind, value in pairs:
        assert kind.is_valid(value), (kind, value)


# --- Signatures and cards ----------------------------------------------------------------


def test_a_signed_statement_verifies_under_its_signer_and_a_flipped_byte_fails():
    member = CONV.members[1]
    statement = ActionSignature(signer_agent_id=member.agent_id, action_hash=action_hash(POST))
    entry = sign_statement(member.key, statement)
    assert entry == sign_statement(member.key, statement)
    assert verify_statement_signature(entry, member.key.public_key_b64)
    assert verify_member_statement(entry, CONV.membership)
    flipped = replace(entry, signature=_flip_b64(entry.signature))
    assert not verify_statement_signature(flipped, member.key.public_key_b64)
    assert not verify_member_statement(flipped, CONV.membership)


def test_a_statement_signed_with_another_members_key_does_not_verify():
    member, other = CONV.members[1], CONV.members[2]
    statement = ActionSignature(signer_agent_id=member.agent_id, action_hash=action_hash(POST))
    assert not verify_member_statement(sign_statement(other.key, statement), CONV.membership)


def test_a_card_verifies_only_under_the_registry_key_and_unchanged():
    card = CONV.members[0].card
    assert verify_card(card, REGISTRY.public_key_b64)
    assert not verify_card(card, SigningKey.generate().public_key_b64)
    renamed = replace(card, card=replace(card.card, agent_name="mallory"))
    assert not verify_card(renamed, REGISTRY.public_key_b64)


def test_a_verified_membership_passes_and_each_rule_is_enforced():
    verify_membership(CONV.membership, REGISTRY.public_key_b64)
    reversed_members = replace(CONV.membership, members=CONV.membership.members[::-1])
    with pytest.raises(ProtocolError, match="byte order"):
        verify_membership(reversed_members, REGISTRY.public_key_b64)
    other = make_conversation(4, first=20)
    with pytest.raises(ProtocolError, match="conversationId"):
        verify_membership(
            replace(CONV.membership, conversation_id=other.membership.conversation_id),
            REGISTRY.public_key_b64,
        )
    with pytest.raises(ProtocolError, match="Registry signature"):
        verify_membership(CONV.membership, SigningKey.generate().public_key_b64)
    first, second = CONV.members[0].card, CONV.members[1].card
    twin = sign_card(REGISTRY, replace(second.card, agent_name=first.card.agent_name))
    with pytest.raises(ProtocolError, match="name is listed twice"):
        verify_membership(
            replace(CONV.membership, members=(first, twin, *CONV.membership.members[2:])),
            REGISTRY.public_key_b64,
        )


def test_build_membership_refuses_a_repeated_name():
    first = make_member(1)
    twin = make_member(2)
    twin = Member(twin.key, sign_card(REGISTRY, replace(twin.card.card, agent_name="agent-01")))
    with pytest.raises(ProtocolError, match="name is listed twice"):
        build_membership([first.card, twin.card])


def test_timestamps_are_utc_seconds_with_a_z():
    import datetime as dt

    moment = dt.datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert format_timestamp(moment) == "2026-03-04T03:06:07Z"
    assert is_timestamp("2026-03-04T03:06:07Z")
    for bad in (
        "2026-02-30T00:00:00Z",
        "2026-03-04T03:06:07",
        "2026-03-04 03:06:07Z",
        "٢٠٢٦-03-04T03:06:07Z",
    ):
        assert not is_timestamp(bad)
    with pytest.raises(ValueError, match="timezone"):
        format_timestamp(dt.datetime(2026, 1, 1))


# --- Decoders ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SAMPLE_PACKETS))
def test_every_packet_round_trips_through_its_canonical_bytes(name):
    packet = SAMPLE_PACKETS[name]
    data = encode(packet)
    decoded = decode_packet(data)
    assert decoded == packet
    assert encode(decoded) == data


@pytest.mark.parametrize("name", list(SAMPLE_PACKETS))
def test_a_packet_missing_any_field_is_rejected(name):
    value = as_json(SAMPLE_PACKETS[name])
    for field in value:
        broken = {key: item for key, item in value.items() if key != field}
        with pytest.raises(ProtocolError, match=r"missing field|expected"):
            decode_packet(jcs(broken))


@pytest.mark.parametrize("name", list(SAMPLE_PACKETS))
def test_a_packet_with_an_extra_field_is_rejected(name):
    value = as_json(SAMPLE_PACKETS[name])
    with pytest.raises(ProtocolError, match="unexpected field 'zzz'"):
        decode_packet(jcs({**value, "zzz": None}))


@pytest.mark.parametrize("name", list(SAMPLE_PACKETS))
def test_a_packet_of_another_version_is_rejected(name):
    value = as_json(SAMPLE_PACKETS[name])
    for version in ("harness/2", "harness/1 ", "HARNESS/1", None, 1):
        with pytest.raises(ProtocolError, match="version"):
            decode_packet(jcs({**value, "version": version}))


@pytest.mark.parametrize(
    "kind", ["action_proposals", "envelope", "GENESIS", "", "certified_record"]
)
def test_a_packet_of_an_unknown_kind_is_rejected(kind):
    value = as_json(SAMPLE_PACKETS["post proposal"])
    with pytest.raises(ProtocolError, match="unknown packet kind"):
        decode_packet(jcs({**value, "kind": kind}))


def test_a_nested_object_of_another_version_or_with_an_extra_field_is_rejected():
    value = as_json(SAMPLE_PACKETS["post proposal"])
    versioned = copy.deepcopy(value)
    versioned["action"]["postIntent"]["version"] = "harness/0"
    with pytest.raises(ProtocolError, match=r"action\.postIntent: version"):
        decode_packet(jcs(versioned))
    extra = copy.deepcopy(value)
    extra["action"]["extra"] = 1
    with pytest.raises(ProtocolError, match=r"action: unexpected field"):
        decode_packet(jcs(extra))
    unknown = copy.deepcopy(value)
    unknown["action"]["kind"] = "PATCH"
    with pytest.raises(ProtocolError, match="unknown action kind"):
        decode_packet(jcs(unknown))
    statement = as_json(SAMPLE_PACKETS["durability vote"])
    statement["statement"]["kind"] = "action_signature"
    with pytest.raises(ProtocolError, match=r"missing field .actionHash."):
        decode_packet(jcs(statement))


@pytest.mark.parametrize(
    "data",
    [
        b' {"kind":"catch_up_request"}',
        b"\xef\xbb\xbf" + encode(REQUEST),
        encode(REQUEST) + b"\n",
        encode(REQUEST).replace(b'","', b'", "', 1),
        json.dumps(as_json(REQUEST), sort_keys=False).encode(),
        json.dumps(dict(reversed(list(as_json(REQUEST).items()))), separators=(",", ":")).encode(),
        encode(REQUEST).replace(b"catch_up_request", b"catch\\u005fup_request"),
    ],
)
def test_non_canonical_bytes_are_rejected(data):
    assert data != encode(REQUEST)
    with pytest.raises(ProtocolError, match="not canonical JSON"):
        decode_packet(data)


def test_duplicate_keys_are_rejected():
    data = encode(REQUEST)
    duplicated = data[:-1] + b',"version":"harness/1"}'
    with pytest.raises(ProtocolError, match="duplicate key"):
        decode_packet(duplicated)


def _flip_b64(text: str) -> str:
    from harness_contract.ids import unb64

    data = bytearray(unb64(text) or b"")
    data[0] ^= 0x01
    return b64(bytes(data))


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (("requesterAgentId",), "pst_" + "A" * 22),
        (("requesterAgentId",), "agt_AAAAAAAAAAAAAAAAAAAAAB"),  # non-zero trailing bits
        (("requesterAgentId",), "agt_AAAAAAAAAAAAAAAAAAAAA"),
        (("requesterAgentId",), 7),
        (("conversationId",), "mbr_" + "A" * 43),
        (("conversationId",), "cnv_" + "A" * 42 + "B"),
        (("membershipHash",), None),
        (("knownRecordHash",), "rch_" + "A" * 43),  # only one of the pair set
    ],
)
def test_invalid_identifiers_and_wrong_types_are_rejected(path, bad):
    value = as_json(REQUEST)
    value[path[0]] = bad
    with pytest.raises(ProtocolError):
        decode_packet(jcs(value))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda v: v["action"].__setitem__("previousRecordHash", "rch_" + "A" * 43),
            "must be null",
        ),
        (lambda v: v["action"]["postIntent"].__setitem__("content", []), "content"),
        (lambda v: v["action"]["postIntent"].__setitem__("content", [{"type": "text"}]), "content"),
        (lambda v: v["action"]["postIntent"].__setitem__("postId", "pst_short"), "postId"),
        (lambda v: v["action"]["membership"]["members"].reverse(), "byte order"),
        (
            lambda v: v["action"]["membership"].__setitem__(
                "members", v["action"]["membership"]["members"][:1]
            ),
            "2 to 32",
        ),
        (
            lambda v: v["action"]["membership"]["members"][0]["card"].__setitem__(
                "agentName", "Bad"
            ),
            "agentName",
        ),
        (
            lambda v: v["action"]["membership"]["members"][0]["card"].__setitem__(
                "publicKey", "A" * 44
            ),
            "publicKey",
        ),
        (
            lambda v: v["action"]["membership"]["members"][0]["card"].__setitem__(
                "issuedAt", "2026-01-02T03:04:05.000Z"
            ),
            "issuedAt",
        ),
        (
            lambda v: v["action"]["membership"]["members"][0].__setitem__("signature", "A" * 85),
            "signature",
        ),
        (
            lambda v: v["action"]["anchor"].__setitem__("routerInstanceId", "agt_" + "A" * 22),
            "routerInstanceId",
        ),
    ],
)
def test_a_genesis_proposal_with_an_invalid_part_is_rejected(mutate, message):
    value = as_json(SAMPLE_PACKETS["genesis proposal"])
    mutate(value)
    with pytest.raises(ProtocolError, match=message):
        decode_packet(jcs(value))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda v: v.__setitem__("hasMore", "true"), "hasMore"),
        (lambda v: v["attestation"]["statement"].__setitem__("itemKind", "record"), "itemKind"),
        (lambda v: v["attestation"]["statement"].__setitem__("itemHash", None), "itemHash"),
        (
            lambda v: v["attestation"]["statement"].__setitem__("itemHash", "anc_" + "A" * 43),
            "itemHash",
        ),
        (lambda v: v["item"].__setitem__("kind", "completed_reanchor"), "item"),
        (lambda v: v["item"]["durabilityCertificate"]["votes"].reverse(), "byte order"),
        (
            lambda v: v["item"]["actionCertifiedRecord"]["routerAnchor"].__setitem__(
                "kind", "reanchor"
            ),
            "unknown anchor kind",
        ),
    ],
)
def test_a_catch_up_page_with_an_invalid_part_is_rejected(mutate, message):
    value = as_json(PAGE)
    mutate(value)
    with pytest.raises(ProtocolError, match=message):
        decode_packet(jcs(value))


def test_an_incomplete_attestation_must_have_no_item_and_no_more():
    value = as_json(INCOMPLETE)
    value["attestation"]["statement"]["hasMore"] = True
    with pytest.raises(ProtocolError, match="hasMore"):
        decode_packet(jcs(value))
    value = as_json(INCOMPLETE)
    value["attestation"]["statement"]["itemHash"] = "rch_" + "A" * 43
    with pytest.raises(ProtocolError, match="must be null"):
        decode_packet(jcs(value))


def test_decode_reads_stored_objects_of_one_type():
    assert decode(encode(POST_RECORD), CertifiedRecord) == POST_RECORD
    assert decode(encode(CONV.membership), MembershipDescriptor) == CONV.membership
    with pytest.raises(ProtocolError, match="is not 'certified_record'"):
        decode(encode(REANCHOR), CertifiedRecord)


class TestArbitraryInput:
    packet_kinds = st.sampled_from(
        [
            "action_proposal",
            "signed_statement",
            "catch_up_request",
            "catch_up_page",
            "catch_up_incomplete",
            "completed_reanchor",
        ]
    )
    scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=8)
    json_values = st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=6), children, max_size=3)
        ),
        max_leaves=12,
    )

    @settings(max_examples=300)
    @given(data=st.binary(max_size=200))
    def test_decode_packet_on_arbitrary_bytes_returns_or_raises_protocol_error(self, data):
        with contextlib.suppress(ProtocolError):
            decode_packet(data)

    @settings(max_examples=300)
    @given(kind=packet_kinds, fields=st.dictionaries(st.text(max_size=12), json_values, max_size=6))
    def test_decode_packet_on_arbitrary_objects_returns_or_raises_protocol_error(
        self, kind, fields
    ):
        data = jcs({**fields, "kind": kind, "version": VERSION})
        with contextlib.suppress(ProtocolError):
            decode_packet(data)

    @settings(max_examples=200)
    @given(
        name=st.sampled_from(list(SAMPLE_PACKETS)),
        replacement=json_values,
        pick=st.integers(min_value=0),
    )
    def test_a_sample_packet_with_one_field_replaced_decodes_or_raises_protocol_error(
        self, name, replacement, pick
    ):
        value = as_json(SAMPLE_PACKETS[name])
        paths = list(_paths(value))
        target, key = paths[pick % len(paths)]
        target[key] = replacement
        try:
            packet = decode_packet(jcs(value))
        except ProtocolError:
            return
        assert decode_packet(encode(packet)) == packet


def _paths(value):
    if isinstance(value, dict):
        for key, item in value.items():
            yield value, key
            yield from _paths(item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield value, index
            yield from _paths(item)


# --- Envelopes -----------------------------------------------------------------------------


def test_an_envelope_goes_to_every_member_in_byte_order_sender_included():
    sender = CONV.members[2]
    signed_envelope = seal_envelope(
        sender.key,
        sender_agent_id=sender.agent_id,
        packet=ActionProposal(action=POST),
        member_agent_ids=reversed(CONV.membership.member_agent_ids),
    )
    envelope = signed_envelope.envelope
    assert envelope.recipient_agent_ids == CONV.membership.member_agent_ids
    assert RandomId.MESSAGE.is_valid(envelope.message_id)
    assert envelope_packet(envelope) == ActionProposal(action=POST)
    assert decode_signed_envelope(encode(signed_envelope)) == signed_envelope
    check_envelope(signed_envelope, ActionProposal(action=POST), membership=CONV.membership)


@pytest.mark.parametrize("packet", [PAGE, INCOMPLETE])
def test_a_catch_up_answer_goes_only_to_responder_and_requester_in_byte_order(packet):
    responder = CONV.member(packet.attestation.signer_agent_id)
    recipients = envelope_recipients(
        packet,
        sender_agent_id=responder.agent_id,
        member_agent_ids=CONV.membership.member_agent_ids,
    )
    expected = [
        a
        for a in CONV.membership.member_agent_ids
        if a in {responder.agent_id, REQUEST.requester_agent_id}
    ]
    assert recipients == tuple(expected)
    assert len(recipients) == 2
    signed_envelope = seal_envelope(
        responder.key,
        sender_agent_id=responder.agent_id,
        packet=packet,
        member_agent_ids=CONV.membership.member_agent_ids,
    )
    check_envelope(signed_envelope, packet, membership=CONV.membership)


def test_an_envelope_with_other_recipients_a_foreign_sender_or_a_bad_signature_is_dropped():
    sender = CONV.members[1]
    packet = POST_RECORD.durability_certificate.entries[1]
    assert packet.signer_agent_id == sender.agent_id
    good = seal_envelope(
        sender.key,
        sender_agent_id=sender.agent_id,
        packet=packet,
        member_agent_ids=CONV.membership.member_agent_ids,
    )
    check_envelope(good, packet, membership=CONV.membership)
    fewer = sign_envelope(
        sender.key,
        replace(good.envelope, recipient_agent_ids=good.envelope.recipient_agent_ids[:-1]),
    )
    with pytest.raises(ProtocolError, match="recipients"):
        check_envelope(fewer, packet, membership=CONV.membership)
    outsider = make_member(50)
    foreign = sign_envelope(outsider.key, replace(good.envelope, sender_agent_id=outsider.agent_id))
    with pytest.raises(ProtocolError, match="not a member"):
        check_envelope(foreign, packet, membership=CONV.membership)
    forged = replace(good, signature=_flip_b64(good.signature))
    with pytest.raises(ProtocolError, match="signature is invalid"):
        check_envelope(forged, packet, membership=CONV.membership)
    other = CONV.members[0]
    relayed = seal_envelope(
        other.key,
        sender_agent_id=other.agent_id,
        packet=packet,
        member_agent_ids=CONV.membership.member_agent_ids,
    )
    with pytest.raises(ProtocolError, match="signer must be the sender"):
        check_envelope(relayed, packet, membership=CONV.membership)


def test_a_proposal_must_come_from_its_author():
    sender = CONV.members[0]
    assert POST.author_agent_id != sender.agent_id
    packet = ActionProposal(action=POST)
    signed_envelope = seal_envelope(
        sender.key,
        sender_agent_id=sender.agent_id,
        packet=packet,
        member_agent_ids=CONV.membership.member_agent_ids,
    )
    with pytest.raises(ProtocolError, match="author"):
        check_envelope(signed_envelope, packet, membership=CONV.membership)


def test_an_envelope_body_larger_than_the_bound_is_refused():
    sender = CONV.members[0]
    intent = replace(CONV.genesis.post_intent, content=multicast_content("x" * 30_000))
    big = replace(CONV.genesis, post_intent=intent, post_intent_hash=post_intent_hash(intent))
    packet = ActionProposal(action=big)
    assert len(encode(packet)) < MAX_ENVELOPE_BODY_BYTES
    envelope = Envelope(
        sender_agent_id=sender.agent_id,
        recipient_agent_ids=CONV.membership.member_agent_ids,
        message_id=RandomId.MESSAGE.mint(),
        body=b64(b"{" * (MAX_ENVELOPE_BODY_BYTES + 1)),
    )
    signed_envelope = sign_envelope(sender.key, envelope)
    with pytest.raises(ProtocolError, match="larger than"):
        decode_signed_envelope(encode(signed_envelope))
    with pytest.raises(ProtocolError, match="larger than"):
        envelope_packet(envelope)


def test_an_envelope_with_recipients_out_of_byte_order_or_a_padded_body_is_rejected():
    sender = CONV.members[0]
    good = seal_envelope(
        sender.key,
        sender_agent_id=sender.agent_id,
        packet=REQUEST,
        member_agent_ids=CONV.membership.member_agent_ids,
    )
    value = as_json(good)
    value["envelope"]["recipientAgentIds"].reverse()
    with pytest.raises(ProtocolError, match="byte order"):
        decode_signed_envelope(jcs(value))
    value = as_json(good)
    value["envelope"]["body"] += "="
    with pytest.raises(ProtocolError, match="base64url"):
        decode_signed_envelope(jcs(value))
    value = as_json(good)
    value["envelope"]["recipientAgentIds"] = []
    with pytest.raises(ProtocolError, match="1 to 32"):
        decode_signed_envelope(jcs(value))


def test_an_envelope_digest_changes_with_the_outer_signature_only_through_its_bytes():
    sender = CONV.members[0]
    first = seal_envelope(
        sender.key,
        sender_agent_id=sender.agent_id,
        packet=REQUEST,
        member_agent_ids=CONV.membership.member_agent_ids,
        message_id="msg_" + b64(b"\x05" * 16),
    )
    again = seal_envelope(
        sender.key,
        sender_agent_id=sender.agent_id,
        packet=REQUEST,
        member_agent_ids=CONV.membership.member_agent_ids,
        message_id="msg_" + b64(b"\x05" * 16),
    )
    assert first == again
    assert envelope_digest(first) == envelope_digest(again)
    rewrapped = seal_envelope(
        sender.key,
        sender_agent_id=sender.agent_id,
        packet=REQUEST,
        member_agent_ids=CONV.membership.member_agent_ids,
    )
    assert envelope_digest(rewrapped) != envelope_digest(first)


# --- Catch-up answers ----------------------------------------------------------------------


def test_a_catch_up_page_and_an_incomplete_check_against_their_sender():
    check_catch_up_answer(
        PAGE, sender_agent_id=PAGE.attestation.signer_agent_id, membership=CONV.membership
    )
    page = SAMPLE_PACKETS["catch-up page of a re-anchor"]
    assert isinstance(page, CatchUpPage)
    check_catch_up_answer(
        page, sender_agent_id=page.attestation.signer_agent_id, membership=CONV.membership
    )
    check_catch_up_answer(
        INCOMPLETE,
        sender_agent_id=INCOMPLETE.attestation.signer_agent_id,
        membership=CONV.membership,
    )


def test_a_catch_up_page_attested_by_someone_else_or_for_another_item_fails():
    with pytest.raises(ProtocolError, match="not the envelope sender"):
        check_catch_up_answer(
            PAGE, sender_agent_id=CONV.members[0].agent_id, membership=CONV.membership
        )
    swapped = replace(PAGE, item=POST_RECORD)
    with pytest.raises(ProtocolError, match="another item"):
        check_catch_up_answer(
            swapped, sender_agent_id=PAGE.attestation.signer_agent_id, membership=CONV.membership
        )
    hint = replace(PAGE, has_more=False)
    with pytest.raises(ProtocolError, match="another item"):
        check_catch_up_answer(
            hint, sender_agent_id=PAGE.attestation.signer_agent_id, membership=CONV.membership
        )
    other_request = replace(PAGE, request=catch_up_request(CONV, CONV.members[2]))
    with pytest.raises(ProtocolError, match="another request"):
        check_catch_up_answer(
            other_request,
            sender_agent_id=PAGE.attestation.signer_agent_id,
            membership=CONV.membership,
        )
    not_attestation = replace(PAGE, attestation=POST_RECORD.durability_certificate.entries[0])
    with pytest.raises(ProtocolError, match="where catch_up_attestation is required"):
        check_catch_up_answer(
            not_attestation,
            sender_agent_id=PAGE.attestation.signer_agent_id,
            membership=CONV.membership,
        )


def test_a_catch_up_page_with_an_invalid_record_fails():
    durability = replace(
        GENESIS_RECORD.durability_certificate,
        entries=GENESIS_RECORD.durability_certificate.entries[: quorum(CONV.n) - 1],
    )
    record = replace(GENESIS_RECORD, durability_certificate=durability)
    page = replace(PAGE, item=record)
    with pytest.raises(ProtocolError, match="durability_certificate"):
        check_catch_up_answer(
            page, sender_agent_id=PAGE.attestation.signer_agent_id, membership=CONV.membership
        )


def test_statement_kinds_cover_the_closed_union():
    statements: list[Statement] = [
        sample.statement
        for sample in SAMPLE_PACKETS.values()
        if isinstance(sample, SignedStatement)
    ]
    assert {type(s) for s in statements} == {
        ActionSignature,
        DurabilityVote,
        ReanchorVote,
        CatchUpAttestation,
    }
    assert isinstance(SAMPLE_PACKETS["post proposal"], ActionProposal)
    assert isinstance(POST, PostAction)
    assert isinstance(CONV.genesis, GenesisAction)
    assert isinstance(PAGE.item, CertifiedRecord)
    assert SignedEnvelope.KIND == "signed_envelope"


def test_each_certificate_kind_keeps_the_specs_field_names_on_the_wire():
    action = POST_RECORD.action_certified_record.action_certificate.to_json()
    durability = POST_RECORD.durability_certificate.to_json()
    reanchor = REANCHOR.certificate.to_json()
    assert set(action) == {"kind", "version", "actionHash", "signatures"}
    assert action["kind"] == "action_certificate"
    assert set(durability) == {"kind", "version", "recordHash", "votes"}
    assert durability["kind"] == "durability_certificate"
    assert set(reanchor) == {"kind", "version", "anchorHash", "votes"}
    assert reanchor["kind"] == "reanchor_certificate"


def test_a_certificate_decoded_where_another_kind_belongs_is_refused():
    durability = POST_RECORD.durability_certificate.to_json()
    assert Certificate.from_json(durability, kind=CertificateKind.DURABILITY) == (
        POST_RECORD.durability_certificate
    )
    with pytest.raises(ProtocolError, match="reanchor_certificate"):
        Certificate.from_json(durability, kind=CertificateKind.REANCHOR)


def test_a_certificate_checked_as_another_kind_is_refused():
    with pytest.raises(ProtocolError, match="durability_certificate where action_certificate"):
        check_action_certificate(
            POST_RECORD.durability_certificate, action=POST, membership=CONV.membership
        )
