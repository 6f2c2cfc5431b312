"""Certificates (engine.md §5.1-§5.2) and the certified objects that carry them.

Action, durability and re-anchor certificates, a `CompletedReanchor` (a re-anchor with its
certificate), the `RouterAnchor` a record was certified under, and the two stages of a record:
`ActionCertifiedRecord` (staged before the durability vote) and `CertifiedRecord`. Whether a
certificate meets its threshold is checked in `rules.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self, TypeAlias

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


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionCertificate:
    """`{kind:"action_certificate", actionHash, signatures:[SignedStatement...]}`."""

    KIND: ClassVar[str] = "action_certificate"
    action_hash: str
    signatures: tuple[SignedStatement, ...]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "actionHash": self.action_hash,
            "signatures": [entry.to_json() for entry in self.signatures],
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "action_certificate") -> Self:
        """Decode strictly (entries one per signer, in byte order); raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("actionHash", "signatures"), at)
        return cls(
            action_hash=hash_id_field(obj, "actionHash", HashId.ACTION, at),
            signatures=statement_entries(obj, "signatures", at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DurabilityCertificate:
    """`{kind:"durability_certificate", recordHash, votes:[SignedStatement...]}`."""

    KIND: ClassVar[str] = "durability_certificate"
    record_hash: str
    votes: tuple[SignedStatement, ...]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "recordHash": self.record_hash,
            "votes": [entry.to_json() for entry in self.votes],
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "durability_certificate") -> Self:
        """Decode strictly (entries one per signer, in byte order); raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("recordHash", "votes"), at)
        return cls(
            record_hash=hash_id_field(obj, "recordHash", HashId.RECORD, at),
            votes=statement_entries(obj, "votes", at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReanchorCertificate:
    """`{kind:"reanchor_certificate", anchorHash, votes:[SignedStatement...]}`."""

    KIND: ClassVar[str] = "reanchor_certificate"
    anchor_hash: str
    votes: tuple[SignedStatement, ...]

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        return {
            "kind": self.KIND,
            "version": VERSION,
            "anchorHash": self.anchor_hash,
            "votes": [entry.to_json() for entry in self.votes],
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = "reanchor_certificate") -> Self:
        """Decode strictly (entries one per signer, in byte order); raises `ProtocolError`."""
        obj = object_fields(value, cls.KIND, ("anchorHash", "votes"), at)
        return cls(
            anchor_hash=hash_id_field(obj, "anchorHash", HashId.ANCHOR, at),
            votes=statement_entries(obj, "votes", at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedReanchor:
    """`{kind:"completed_reanchor", anchorHash, reanchor, certificate}`; also a packet (relay)."""

    KIND: ClassVar[str] = "completed_reanchor"
    anchor_hash: str
    reanchor: ReanchorBody
    certificate: ReanchorCertificate

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
            certificate=ReanchorCertificate.from_json(obj["certificate"], at=f"{at}.certificate"),
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
    action_certificate: ActionCertificate

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
            action_certificate=ActionCertificate.from_json(
                obj["actionCertificate"], at=f"{at}.actionCertificate"
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CertifiedRecord:
    """`{kind:"certified_record", actionCertifiedRecord, durabilityCertificate}`."""

    KIND: ClassVar[str] = "certified_record"
    action_certified_record: ActionCertifiedRecord
    durability_certificate: DurabilityCertificate

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
            durability_certificate=DurabilityCertificate.from_json(
                obj["durabilityCertificate"], at=f"{at}.durabilityCertificate"
            ),
        )
