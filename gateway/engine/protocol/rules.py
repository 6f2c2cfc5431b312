"""Thresholds and certificate checks (engine.md §5.1, §5.2, §5.4.1, §5.7).

`quorum(n)` and `faults_tolerated(n)`, `action_quorum_met`, and the checks that raise
`ProtocolError` naming the first failure: `check_action`, `check_action_certificate`,
`check_durability_certificate`, `check_reanchor_certificate`, `check_completed_reanchor`,
`check_action_certified_record`, `check_certified_record` and `check_catch_up_answer`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TypeVar, assert_never

from harness_contract.ids import RandomId, agent_id_order_key

from gateway.engine.protocol.certificates import (
    ActionCertifiedRecord,
    Certificate,
    CertificateKind,
    CertifiedRecord,
    CompletedReanchor,
)
from gateway.engine.protocol.conversation import (
    Action,
    GenesisAction,
    GenesisAnchor,
    MembershipDescriptor,
    PostAction,
    ReanchorBody,
)
from gateway.engine.protocol.evidence import (
    ActionSignature,
    CatchUpAttestation,
    CatchUpItemKind,
    DurabilityVote,
    ReanchorVote,
    SignedStatement,
)
from gateway.engine.protocol.hashes import (
    action_hash,
    anchor_hash,
    membership_hash,
    post_intent_hash,
    record_hash,
)
from gateway.engine.protocol.packets import CatchUpIncomplete, CatchUpPage
from gateway.engine.protocol.signatures import verify_member_statement
from gateway.identity.keys import VerifyCache
from gateway.identity.objects import ProtocolError

# --- Thresholds and certificates (§5.1) --------------------------------------------------


def quorum(n: int) -> int:
    """The quorum for n members: n when n < 4, else n - (n - 1) // 3."""
    if n < 1:
        raise ValueError("a conversation has at least one member")
    return n if n < 4 else n - (n - 1) // 3


def faults_tolerated(n: int) -> int:
    """The faults tolerated among n members: (n - 1) // 3."""
    if n < 1:
        raise ValueError("a conversation has at least one member")
    return (n - 1) // 3


def action_quorum_met(action: Action, signers: Collection[str], n: int) -> bool:
    """True when distinct member `signers` certify `action` (callers pass members only):
    GENESIS needs all n, POST at least quorum(n) with the author among them."""
    match action:
        case GenesisAction():
            return len(signers) == n
        case PostAction(post_intent=intent):
            return len(signers) >= quorum(n) and intent.author_agent_id in signers
        case _:
            assert_never(action)


_S = TypeVar("_S", ActionSignature, DurabilityVote, ReanchorVote)


def _check_entries(
    entries: Sequence[SignedStatement],
    *,
    statement_type: type[_S],
    names_subject: Callable[[_S], bool],
    membership: MembershipDescriptor,
    cache: VerifyCache | None,
    at: str,
) -> frozenset[str]:
    # Cheap checks on every entry first; signatures (the cost) only once the shape holds.
    previous: bytes | None = None
    for index, entry in enumerate(entries):
        statement = entry.statement
        where = f"{at}[{index}]"
        if not isinstance(statement, statement_type):
            raise ProtocolError(
                f"{where}: {statement.KIND} where {statement_type.KIND} is required"
            )
        if not RandomId.AGENT.is_valid(statement.signer_agent_id):
            raise ProtocolError(f"{where}: not a valid signer")
        key = agent_id_order_key(statement.signer_agent_id)
        if previous is not None and key <= previous:
            raise ProtocolError(f"{at}: not one entry per signer in AgentId byte order")
        previous = key
        if membership.card_of(statement.signer_agent_id) is None:
            raise ProtocolError(f"{where}: the signer is not a member")
        if not names_subject(statement):
            raise ProtocolError(f"{where}: the statement names another subject")
    for index, entry in enumerate(entries):
        if not verify_member_statement(entry, membership, cache=cache):
            raise ProtocolError(f"{at}[{index}]: the signature is invalid")
    return frozenset(entry.signer_agent_id for entry in entries)


def _check_kind(certificate: Certificate, required: CertificateKind) -> None:
    # Decoding fixes the kind by position; this catches a certificate built locally in the
    # wrong place, which the entries' statement type would otherwise report less plainly.
    if certificate.kind is not required:
        raise ProtocolError(f"{certificate.kind.value} where {required.value} is required")


def check_action(action: Action, membership: MembershipDescriptor) -> None:
    """Check an action against its (trusted, verified) membership, as §5.4 step 1 asks:
    conversation and membership hash, the intent's hash and fields, the author being a
    member, and for GENESIS the embedded descriptor and an anchor naming this conversation.

    Raises `ProtocolError` naming the first failure.
    """
    expected_hash = membership_hash(membership)
    intent = action.post_intent
    if action.conversation_id != membership.conversation_id:
        raise ProtocolError("action.conversationId is not the membership's conversation")
    match action:
        case GenesisAction(membership=embedded, anchor=anchor):
            if embedded != membership:
                raise ProtocolError("GENESIS.membership is not the conversation's descriptor")
            if anchor.conversation_id != membership.conversation_id:
                raise ProtocolError("GENESIS.anchor names another conversation")
            if anchor.membership_hash != expected_hash:
                raise ProtocolError("GENESIS.anchor names another membership")
        case PostAction(membership_hash=named):
            if named != expected_hash:
                raise ProtocolError("POST.membershipHash is not the membership's hash")
        case _:
            assert_never(action)
    if intent.conversation_id != membership.conversation_id:
        raise ProtocolError("postIntent.conversationId is not the membership's conversation")
    if intent.membership_hash != expected_hash:
        raise ProtocolError("postIntent.membershipHash is not the membership's hash")
    if membership.card_of(intent.author_agent_id) is None:
        raise ProtocolError("postIntent.authorAgentId is not a member")
    if action.post_intent_hash != post_intent_hash(intent):
        raise ProtocolError("action.postIntentHash is not the intent's hash")


def check_action_certificate(
    certificate: Certificate,
    *,
    action: Action,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check an action certificate (§5.1): it names `action`'s hash; its entries are
    `action_signature`s naming that hash, one per member in AgentId byte order, each
    verifying; GENESIS has all n members, POST at least quorum(n) with the author among them.

    Raises `ProtocolError` naming the first failure.
    """
    _check_kind(certificate, CertificateKind.ACTION)
    if certificate.subject != action_hash(action):
        raise ProtocolError("action_certificate.actionHash is not the action's hash")
    signers = _check_entries(
        certificate.entries,
        statement_type=ActionSignature,
        names_subject=lambda statement: statement.action_hash == certificate.subject,
        membership=membership,
        cache=cache,
        at="action_certificate.signatures",
    )
    if not action_quorum_met(action, signers, membership.size):
        match action:
            case GenesisAction():
                raise ProtocolError(
                    f"action_certificate: GENESIS needs all {membership.size} members, "
                    f"got {len(signers)}"
                )
            case PostAction():
                raise ProtocolError(
                    f"action_certificate: POST needs {quorum(membership.size)} members with the "
                    f"author, got {len(signers)}"
                    + ("" if action.author_agent_id in signers else " without the author")
                )
            case _:
                assert_never(action)


def check_durability_certificate(
    certificate: Certificate,
    *,
    record_hash: str,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a durability certificate (§5.1): it names `record_hash`; at least quorum(n)
    `durability_vote`s naming it, this conversation and membership, one per member in
    AgentId byte order, each verifying. Raises `ProtocolError`."""
    _check_kind(certificate, CertificateKind.DURABILITY)
    if certificate.subject != record_hash:
        raise ProtocolError("durability_certificate.recordHash is not the record's hash")
    expected_membership = membership_hash(membership)
    signers = _check_entries(
        certificate.entries,
        statement_type=DurabilityVote,
        names_subject=lambda vote: (
            vote.record_hash == record_hash
            and vote.conversation_id == membership.conversation_id
            and vote.membership_hash == expected_membership
        ),
        membership=membership,
        cache=cache,
        at="durability_certificate.votes",
    )
    if len(signers) < quorum(membership.size):
        raise ProtocolError(
            f"durability_certificate: needs {quorum(membership.size)} members, got {len(signers)}"
        )


def check_reanchor_certificate(
    certificate: Certificate,
    *,
    reanchor: ReanchorBody,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a re-anchor certificate (§5.1): it names `reanchor`'s hash; at least quorum(n)
    `reanchor_vote`s naming that hash and carrying that body, one per member in AgentId
    byte order, each verifying. Raises `ProtocolError`."""
    _check_kind(certificate, CertificateKind.REANCHOR)
    expected = anchor_hash(reanchor)
    if certificate.subject != expected:
        raise ProtocolError("reanchor_certificate.anchorHash is not the re-anchor's hash")
    signers = _check_entries(
        certificate.entries,
        statement_type=ReanchorVote,
        names_subject=lambda vote: vote.anchor_hash == expected and vote.reanchor == reanchor,
        membership=membership,
        cache=cache,
        at="reanchor_certificate.votes",
    )
    if len(signers) < quorum(membership.size):
        raise ProtocolError(
            f"reanchor_certificate: needs {quorum(membership.size)} members, got {len(signers)}"
        )


def check_completed_reanchor(
    completed: CompletedReanchor,
    *,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a completed re-anchor: its body names this conversation and membership, its
    anchorHash is the body's hash, and its certificate holds. Raises `ProtocolError`."""
    body = completed.reanchor
    if body.conversation_id != membership.conversation_id:
        raise ProtocolError("completed_reanchor.reanchor names another conversation")
    if body.membership_hash != membership_hash(membership):
        raise ProtocolError("completed_reanchor.reanchor names another membership")
    if completed.anchor_hash != anchor_hash(body):
        raise ProtocolError("completed_reanchor.anchorHash is not the re-anchor's hash")
    check_reanchor_certificate(
        completed.certificate, reanchor=body, membership=membership, cache=cache
    )


def check_action_certified_record(
    record: ActionCertifiedRecord,
    *,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a staged record against its (trusted, verified) membership: the core's
    membership is it, the hashes re-derive, the action holds (`check_action`), the
    anchor rules of §5.2 hold, and the action certificate is valid.

    GENESIS: `recordCore.anchorHash` is the hash of `action.anchor`, which is the
    `routerAnchor`. POST: `recordCore.anchorHash` is `action.anchorHash`, to which the
    `routerAnchor` (a GenesisAnchor, or a CompletedReanchor that must itself hold) hashes.
    Raises `ProtocolError`.
    """
    core = record.record_core
    if core.membership != membership:
        raise ProtocolError("recordCore.membership is not the conversation's descriptor")
    if record.record_hash != record_hash(core):
        raise ProtocolError("action_certified_record.recordHash is not the core's hash")
    if core.action_hash != action_hash(core.action):
        raise ProtocolError("recordCore.actionHash is not the action's hash")
    check_action(core.action, membership)
    match core.action:
        case GenesisAction(anchor=genesis_anchor):
            if core.anchor_hash != anchor_hash(genesis_anchor):
                raise ProtocolError("recordCore.anchorHash is not the GENESIS anchor's hash")
            if record.router_anchor != genesis_anchor:
                raise ProtocolError("routerAnchor is not the GENESIS anchor")
        case PostAction(anchor_hash=named_anchor):
            if core.anchor_hash != named_anchor:
                raise ProtocolError("recordCore.anchorHash is not the action's anchorHash")
            match record.router_anchor:
                case GenesisAnchor() as genesis:
                    if anchor_hash(genesis) != named_anchor:
                        raise ProtocolError("routerAnchor does not hash to the anchorHash")
                    if (
                        genesis.conversation_id != membership.conversation_id
                        or genesis.membership_hash != membership_hash(membership)
                    ):
                        raise ProtocolError("routerAnchor names another conversation")
                case CompletedReanchor() as completed:
                    if completed.anchor_hash != named_anchor:
                        raise ProtocolError("routerAnchor does not hash to the anchorHash")
                    check_completed_reanchor(completed, membership=membership, cache=cache)
                case _:
                    assert_never(record.router_anchor)
        case _:
            assert_never(core.action)
    check_action_certificate(
        record.action_certificate, action=core.action, membership=membership, cache=cache
    )


def check_certified_record(
    record: CertifiedRecord,
    *,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a whole certified record: `check_action_certified_record` and a durability
    certificate for its RecordHash. For a GENESIS of a conversation not known yet, verify
    `recordCore.membership` with `verify_membership` first and pass it. Raises `ProtocolError`."""
    staged = record.action_certified_record
    check_action_certified_record(staged, membership=membership, cache=cache)
    check_durability_certificate(
        record.durability_certificate,
        record_hash=staged.record_hash,
        membership=membership,
        cache=cache,
    )


def check_catch_up_answer(
    answer: CatchUpPage | CatchUpIncomplete,
    *,
    sender_agent_id: str,
    membership: MembershipDescriptor,
    cache: VerifyCache | None = None,
) -> None:
    """Check a catch-up answer as the requester must before storing anything (§5.7): the
    request names this conversation; the attestation is a `catch_up_attestation` by the
    envelope sender, a member, over the byte-identical request, the item's kind and hash
    and `hasMore`, and verifies; a page's item holds (`check_certified_record` or
    `check_completed_reanchor`). Raises `ProtocolError`."""
    request = answer.request
    if request.conversation_id != membership.conversation_id:
        raise ProtocolError("catch-up request names another conversation")
    if request.membership_hash != membership_hash(membership):
        raise ProtocolError("catch-up request names another membership")
    statement = answer.attestation.statement
    if not isinstance(statement, CatchUpAttestation):
        raise ProtocolError(f"attestation: {statement.KIND} where catch_up_attestation is required")
    if statement.signer_agent_id != sender_agent_id:
        raise ProtocolError("attestation: the signer is not the envelope sender")
    if statement.request != request:
        raise ProtocolError("attestation: names another request")
    expected = _attested_item(answer)
    if (statement.item_kind, statement.item_hash, statement.has_more) != expected:
        raise ProtocolError("attestation: names another item")
    if not verify_member_statement(answer.attestation, membership, cache=cache):
        raise ProtocolError("attestation: the signature is invalid")
    match answer:
        case CatchUpPage(item=item):
            match item:
                case CertifiedRecord():
                    check_certified_record(item, membership=membership, cache=cache)
                case CompletedReanchor():
                    check_completed_reanchor(item, membership=membership, cache=cache)
                case _:
                    assert_never(item)
        case CatchUpIncomplete():
            pass
        case _:
            assert_never(answer)


def _attested_item(
    answer: CatchUpPage | CatchUpIncomplete,
) -> tuple[CatchUpItemKind, str | None, bool]:
    match answer:
        case CatchUpPage(item=item, has_more=has_more):
            match item:
                case CertifiedRecord():
                    return CatchUpItemKind.CERTIFIED_RECORD, item.record_hash, has_more
                case CompletedReanchor():
                    return CatchUpItemKind.COMPLETED_REANCHOR, item.anchor_hash, has_more
                case _:
                    assert_never(item)
        case CatchUpIncomplete():
            return CatchUpItemKind.INCOMPLETE, None, False
        case _:
            assert_never(answer)
