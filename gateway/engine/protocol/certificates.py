"""Certificates (engine.md §5.1-§5.2) and the certified objects that carry them.

The one `Certificate` shape in its three kinds (`CertificateKind`: action, durability,
re-anchor), a `CompletedReanchor` (a re-anchor with its
certificate), the `RouterAnchor` a record was certified under, and the two stages of a record:
`ActionCertifiedRecord` (staged before the durability vote) and `CertifiedRecord`. Whether a
certificate meets its threshold is checked in `rules.py`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final, Self, TypeAlias

from harness_contract.ids import HashId
from harness_contract.jsonvalue import JsonValue

from gateway.engine.protocol.conversation import GenesisAnchor, ReanchorBody, RecordCore
from gateway.engine.protocol.evidence import SignedStatement, statement_entries
from gateway.identity.objects import (
    VERSION,
    ProtocolError,
    hash_id_field,
    kind_of,
    object_fields,
    show,
)

# --- Certificates (§5.1-§5.2) ------------------------------------------------------------


class CertificateKind(enum.StrEnum):
    """The three certificates of §5.1, each its own `kind` on the wire.

    They share one shape, a subject hash and one entry per signer, and differ in the names of
    those two fields and in what the entries must be (checked in `rules.py`).
    """

    ACTION = "action_certificate"
    """`{actionHash, signatures}`: `action_signature`s over one action (GENESIS all n,
    POST a quorum with the author)."""
    DURABILITY = "durability_certificate"
    """`{recordHash, votes}`: a quorum of `durability_vote`s, each cast after storing the
    record."""
    REANCHOR = "reanchor_certificate"
    """`{anchorHash, votes}`: a quorum of `reanchor_vote`s carrying one re-anchor body."""


@dataclass(frozen=True, slots=True)
class _Layout:
    subject_field: str
    subject_id: HashId
    entries_field: str


_LAYOUTS: Final[Mapping[CertificateKind, _Layout]] = {
    CertificateKind.ACTION: _Layout("actionHash", HashId.ACTION, "signatures"),
    CertificateKind.DURABILITY: _Layout("recordHash", HashId.RECORD, "votes"),
    CertificateKind.REANCHOR: _Layout("anchorHash", HashId.ANCHOR, "votes"),
}
"""Each kind's JSON field names and the hash its subject is; the wire forms are the spec's."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Certificate:
    """A certificate of one `kind`: `{kind:"action_certificate", actionHash,
    signatures:[SignedStatement...]}`, `{kind:"durability_certificate", recordHash,
    votes:[...]}` or `{kind:"reanchor_certificate", anchorHash, votes:[...]}`.

    `subject` is the hash the certificate names (ActionHash, RecordHash or AnchorHash) and
    `entries` its signed statements, one per signer in AgentId byte order.
    """

    kind: CertificateKind
    subject: str
    entries: tuple[SignedStatement, ...]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object for this kind."""
        layout = _LAYOUTS[self.kind]
        return {
            "kind": self.kind.value,
            "version": VERSION,
            layout.subject_field: self.subject,
            layout.entries_field: [entry.to_json() for entry in self.entries],
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, kind: CertificateKind, at: str | None = None) -> Self:
        """Decode strictly a certificate that must be of `kind` (entries one per signer, in
        byte order); raises `ProtocolError`."""
        layout = _LAYOUTS[kind]
        where = kind.value if at is None else at
        obj = object_fields(value, kind.value, (layout.subject_field, layout.entries_field), where)
        return cls(
            kind=kind,
            subject=hash_id_field(obj, layout.subject_field, layout.subject_id, where),
            entries=statement_entries(obj, layout.entries_field, where),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedReanchor:
    """`{kind:"completed_reanchor", anchorHash, reanchor, certificate}`; also a packet (relay)."""

    KIND: ClassVar[str] = "completed_reanchor"
    anchor_hash: str
    reanchor: ReanchorBody
    certificate: Certificate
    """Of kind REANCHOR."""

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "anchorHash": self.anchor_hash,
            "reanchor": self.reanchor.to_json(),
            "certificate": self.certificate.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "completed_reanchor") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("anchorHash", "reanchor", "certificate"), at)
        return cls(
            anchor_hash=hash_id_field(obj, "anchorHash", HashId.ANCHOR, at),
            reanchor=ReanchorBody.from_json(obj["reanchor"], at=f"{at}.reanchor"),
            certificate=Certificate.from_json(
                obj["certificate"], kind=CertificateKind.REANCHOR, at=f"{at}.certificate"
            ),
        )


RouterAnchor: TypeAlias = GenesisAnchor | CompletedReanchor
"""The anchor a record was certified under: the GENESIS anchor, or a completed re-anchor."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionCertifiedRecord:
    """`{kind:"action_certified_record", recordHash, recordCore, routerAnchor,
    actionCertificate}`: what a member stages before voting durability."""

    KIND: ClassVar[str] = "action_certified_record"
    record_hash: str
    record_core: RecordCore
    router_anchor: RouterAnchor
    action_certificate: Certificate
    """Of kind ACTION."""

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "recordHash": self.record_hash,
            "recordCore": self.record_core.to_json(),
            "routerAnchor": self.router_anchor.to_json(),
            "actionCertificate": self.action_certificate.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "action_certified_record") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(
            value, cls.KIND, ("recordHash", "recordCore", "routerAnchor", "actionCertificate"), at
        )
        router_anchor: RouterAnchor
        anchor_at = f"{at}.routerAnchor"
        match kind_of(obj["routerAnchor"], anchor_at):
            case GenesisAnchor.KIND:
                router_anchor = GenesisAnchor.from_json(obj["routerAnchor"], at=anchor_at)
            case CompletedReanchor.KIND:
                router_anchor = CompletedReanchor.from_json(obj["routerAnchor"], at=anchor_at)
            case other:
                raise ProtocolError(f"{anchor_at}: unknown anchor kind {show(other)}")
        return cls(
            record_hash=hash_id_field(obj, "recordHash", HashId.RECORD, at),
            record_core=RecordCore.from_json(obj["recordCore"], at=f"{at}.recordCore"),
            router_anchor=router_anchor,
            action_certificate=Certificate.from_json(
                obj["actionCertificate"],
                kind=CertificateKind.ACTION,
                at=f"{at}.actionCertificate",
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CertifiedRecord:
    """`{kind:"certified_record", actionCertifiedRecord, durabilityCertificate}`."""

    KIND: ClassVar[str] = "certified_record"
    action_certified_record: ActionCertifiedRecord
    durability_certificate: Certificate
    """Of kind DURABILITY."""

    @property
    def record_hash(self) -> str:
        """The record's RecordHash (as the record states it; `check_certified_record` proves it)."""
        return self.action_certified_record.record_hash

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "actionCertifiedRecord": self.action_certified_record.to_json(),
            "durabilityCertificate": self.durability_certificate.to_json(),
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "certified_record") -> Self:
        """Decode strictly; raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("actionCertifiedRecord", "durabilityCertificate"), at)
        return cls(
            action_certified_record=ActionCertifiedRecord.from_json(
                obj["actionCertifiedRecord"], at=f"{at}.actionCertifiedRecord"
            ),
            durability_certificate=Certificate.from_json(
                obj["durabilityCertificate"],
                kind=CertificateKind.DURABILITY,
                at=f"{at}.durabilityCertificate",
            ),
        )
