"""Identifiers and hashes (engine.md §1.3-§1.4, collectives.md §2.3).

Random identifiers are a prefix plus unpadded base64url of a fixed number of random bytes;
derived identifiers are a prefix plus the base64url SHA-256 of a domain-separated
canonical object. Decoders check prefix, length, alphabet and that decoding then encoding
gives the text back, which rejects non-zero trailing bits.
"""

from __future__ import annotations

import base64
import binascii
import enum
import functools
import hashlib
import re
import secrets
from typing import Final

from harness_contract.jsonvalue import JsonValue, canonical_json

DOMAIN_PREFIX: Final = b"harness/v1/"
"""Every hashed or signed object is prefixed with this, its artifact name and a NUL."""

_B64_ALPHABET: Final = re.compile(r"[A-Za-z0-9_-]*")


def b64(data: bytes) -> str:
    """RFC 4648 §5 base64url without `=` padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes | None:
    """Strictly decode unpadded base64url: None for padding, a wrong alphabet or trailing bits."""
    if not _B64_ALPHABET.fullmatch(text) or len(text) % 4 == 1:
        return None
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    # Re-encoding rejects non-canonical spellings (non-zero trailing bits).
    return data if b64(data) == text else None


class RandomId(enum.Enum):
    """Random identifiers: (prefix, byte length)."""

    AGENT = ("agt_", 16)
    """AgentId, minted by the Registry at registration."""
    POST = ("pst_", 32)
    """PostId, minted by the endpoint once per send invocation."""
    MESSAGE = ("msg_", 16)
    """MessageId of an outer envelope, minted per envelope."""
    DELIVERY = ("dlv_", 32)
    """DeliveryToken, minted per delivery or emitted item."""
    ROUTER_INSTANCE = ("rti_", 16)
    """RouterInstanceId, minted by the Router per instance."""
    NONCE = ("", 32)
    """A collective nonce (no prefix), minted per gather or all_gather."""
    API_TOKEN = ("hat_", 32)
    """An agent's API token (operations.md §4); stored only as its SHA-256."""
    CHECK = ("chk_", 16)
    """A firewall checkId (firewall.md §1)."""

    @property
    def prefix(self) -> str:
        """The text prefix."""
        return self.value[0]

    @property
    def size(self) -> int:
        """Random bytes behind the text."""
        return self.value[1]

    @property
    def text_length(self) -> int:
        """Characters in a valid text: the prefix and the unpadded base64url."""
        return len(self.prefix) + (self.size * 8 + 5) // 6

    def mint(self) -> str:
        """A fresh identifier from `secrets.token_bytes`."""
        return self.prefix + b64(secrets.token_bytes(self.size))

    def decode(self, text: object) -> bytes | None:
        """The identifier's bytes, or None when `text` is not a valid identifier of this kind."""
        if not isinstance(text, str):
            return None
        prefix, size = self.value
        return _decode_id(prefix, size, text)

    def is_valid(self, text: object) -> bool:
        """True when `text` is a valid identifier of this kind."""
        return self.decode(text) is not None


@functools.lru_cache(maxsize=1 << 16)
def _decode_id(prefix: str, size: int, text: str) -> bytes | None:
    """Decode one identifier text (cached: the same AgentIds and hashes are checked in
    every protocol object that names them)."""
    if len(text) != len(prefix) + (size * 8 + 5) // 6 or not text.startswith(prefix):
        return None
    data = unb64(text[len(prefix) :])
    return data if data is not None and len(data) == size else None


def agent_id_order_key(agent_id: str) -> bytes:
    """Sort key for AgentIds: their decoded 16 bytes, unsigned (never their text)."""
    data = RandomId.AGENT.decode(agent_id)
    if data is None:
        raise ValueError("not an AgentId")
    return data


class HashId(enum.Enum):
    """Derived identifiers: (prefix, artifact name in the hash domain)."""

    CONVERSATION = ("cnv_", "conversation")
    MEMBERSHIP = ("mbr_", "membership")
    POST_INTENT = ("pit_", "post-intent")
    ANCHOR = ("anc_", "anchor")
    ACTION = ("ach_", "action")
    RECORD = ("rch_", "record")
    EVIDENCE = ("evd_", "evidence")
    ENVELOPE_DIGEST = ("smd_", "signed-envelope")

    @property
    def prefix(self) -> str:
        """The text prefix."""
        return self.value[0]

    @property
    def artifact(self) -> str:
        """The artifact name hashed into the domain."""
        return self.value[1]

    def of(self, value: JsonValue) -> str:
        """The identifier of a canonical object: prefix + b64(H(artifact, value))."""
        return self.prefix + b64(domain_hash(self.artifact, value))

    def is_valid(self, text: object) -> bool:
        """True when `text` has this prefix and a canonical 32-byte digest."""
        return isinstance(text, str) and _decode_id(self.value[0], 32, text) is not None


def domain_bytes(artifact: str, value: JsonValue) -> bytes:
    """`harness/v1/<artifact>` NUL JCS(value): what is hashed or signed."""
    return DOMAIN_PREFIX + artifact.encode("ascii") + b"\x00" + canonical_json(value)


def domain_hash(artifact: str, value: JsonValue) -> bytes:
    """H(a, v) of engine.md §0."""
    return hashlib.sha256(domain_bytes(artifact, value)).digest()


COLLECTIVE_ID_PREFIX: Final = "col_"
_COLLECTIVE_ID_DOMAIN: Final = b"harness/v1/collective-id"


def collective_id(requester_address: str, nonce: str) -> str:
    """The CollectiveId of a requester's `agent:` address and 43-character nonce (§2.3)."""
    digest = hashlib.sha256(
        _COLLECTIVE_ID_DOMAIN
        + b"\x00"
        + requester_address.encode("utf-8")
        + b"\x00"
        + nonce.encode("utf-8")
    ).digest()
    return COLLECTIVE_ID_PREFIX + b64(digest)


def is_collective_id(text: object) -> bool:
    """True when `text` is `col_` + canonical unpadded base64url of 32 bytes."""
    if not isinstance(text, str) or len(text) != 47 or not text.startswith(COLLECTIVE_ID_PREFIX):
        return False
    data = unb64(text[4:])
    return data is not None and len(data) == 32


def is_nonce(text: object) -> bool:
    """True when `text` is 43 characters of `[A-Za-z0-9_-]` (collectives.md §2.2)."""
    return isinstance(text, str) and len(text) == 43 and bool(_B64_ALPHABET.fullmatch(text))


def mint_collective(requester_address: str) -> tuple[str, str]:
    """A fresh (nonce, CollectiveId) pair for a gather or all_gather."""
    nonce = RandomId.NONCE.mint()
    return nonce, collective_id(requester_address, nonce)


def token_digest(token: str) -> str:
    """How an API token is stored: hex SHA-256 of its text (never the token itself)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
