"""Ed25519 signing and verification over domain-separated canonical objects (engine.md §0).

`SIG(key, a, v)` signs `harness/v1/<a>` NUL `JCS(v)` (`harness_contract.ids.domain_bytes`);
signatures travel as unpadded base64url of their 64 bytes (86 characters) and public keys as
unpadded base64url of their 32 raw bytes (43 characters). Ed25519 is deterministic: signing an
unchanged object twice gives identical text.

Signing uses libsodium (PyNaCl), verifying `cryptography` (OpenSSL). Ed25519 signing is fully
specified by RFC 8032, so both give the same 64 bytes for a seed and a message (a test pins
them together), and libsodium signs in about two thirds of the time (four signatures a direct
post). Verifying stays where it was: the libraries differ in what they refuse beyond RFC 8032
(small-order points), and which signatures are valid is the protocol's, not a speed choice.

`verify` is total: garbage of any kind (wrong lengths, bad base64, a point that is not on the
curve, a value JCS cannot encode) is a `False`, never an exception. A `VerifyCache` remembers
positive verdicts so each statement or envelope is verified once per daemon (engine.md §8).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections import OrderedDict
from typing import Final, TypeAlias

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from harness_contract.ids import b64, domain_bytes, unb64
from harness_contract.jsonvalue import JsonValue, JsonValueError
from nacl.bindings import crypto_sign, crypto_sign_seed_keypair

SEED_SIZE: Final = 32
"""Bytes in an Ed25519 private seed."""

PUBLIC_KEY_SIZE: Final = 32
"""Bytes in a raw Ed25519 public key."""

SIGNATURE_SIZE: Final = 64
"""Bytes in an Ed25519 signature."""

PUBLIC_KEY_TEXT_LENGTH: Final = 43
"""Characters of `b64` of a public key."""

SIGNATURE_TEXT_LENGTH: Final = 86
"""Characters of `b64` of a signature."""

VERIFY_CACHE_SIZE: Final = 65_536
"""Positive verdicts a `VerifyCache` keeps by default (entries, about 200 bytes each).

Large enough to hold every statement of the conversations a daemon is actively certifying;
an eviction only costs one more verification (about 150 µs)."""

PUBLIC_KEY_CACHE_SIZE: Final = 4_096
"""Decoded public keys kept by `verify` (entries), so a member's key is parsed once."""


def is_public_key_text(text: object) -> bool:
    """True when `text` is canonical unpadded base64url of exactly 32 bytes."""
    return _decode_fixed(text, PUBLIC_KEY_TEXT_LENGTH, PUBLIC_KEY_SIZE) is not None


def is_signature_text(text: object) -> bool:
    """True when `text` is canonical unpadded base64url of exactly 64 bytes."""
    return _decode_fixed(text, SIGNATURE_TEXT_LENGTH, SIGNATURE_SIZE) is not None


def _decode_fixed(text: object, length: int, size: int) -> bytes | None:
    if not isinstance(text, str) or len(text) != length:
        return None
    data = unb64(text)
    return data if data is not None and len(data) == size else None


class SigningKey:
    """An Ed25519 private key held as its 32-byte seed.

    The seed is what the store keeps; `repr` never shows it.
    """

    __slots__ = ("_public_key_b64", "_remember", "_secret_key", "_seed")

    def __init__(self, seed: bytes) -> None:
        """Wrap a 32-byte seed. Raises `ValueError` for any other length."""
        if not isinstance(seed, bytes | bytearray) or len(seed) != SEED_SIZE:
            raise ValueError("an Ed25519 seed is exactly 32 bytes")
        self._seed = bytes(seed)
        # libsodium's 64-byte secret key is the seed followed by the public key.
        public_key, self._secret_key = crypto_sign_seed_keypair(self._seed)
        self._public_key_b64 = b64(public_key)
        self._remember: VerifyCache | None = None

    def remember_in(self, cache: VerifyCache) -> None:
        """Record every signature this key makes as valid in `cache`: the daemon's own keys
        are its trust boundary, so what it signed is never verified again (engine.md §8)."""
        self._remember = cache

    @classmethod
    def generate(cls) -> SigningKey:
        """A fresh key from `secrets.token_bytes`."""
        return cls(secrets.token_bytes(SEED_SIZE))

    @property
    def seed(self) -> bytes:
        """The 32-byte private seed (store it; never log it)."""
        return self._seed

    @property
    def public_key_b64(self) -> str:
        """`b64` of the 32-byte raw public key, as an AgentCard's `publicKey` holds it."""
        return self._public_key_b64

    def sign(self, artifact: str, value: JsonValue) -> str:
        """`b64(SIG(self, artifact, value))`: 86 characters, identical for identical input.

        Raises `JsonValueError` when `value` has no canonical form.
        """
        message = domain_bytes(artifact, value)
        # crypto_sign returns the signature followed by the message (NaCl's signed form).
        signature = b64(crypto_sign(message, self._secret_key)[:SIGNATURE_SIZE])
        if self._remember is not None:
            self._remember._add((self._public_key_b64, hashlib.sha256(message).digest(), signature))
        return signature

    def __repr__(self) -> str:
        return f"SigningKey(public_key_b64={self._public_key_b64!r})"


_CacheKey: TypeAlias = tuple[str, bytes, str]


class VerifyCache:
    """A bounded LRU of signatures already found valid.

    Keyed by (public key, SHA-256 of the signed bytes, signature): a verdict about one
    signature says nothing about another over the same bytes, so the signature is part of
    the key. Only positive verdicts are kept, so a flood of garbage cannot evict them.
    Not thread-safe: one event loop owns it.
    """

    __slots__ = ("_capacity", "_entries", "hits", "misses")

    def __init__(self, capacity: int = VERIFY_CACHE_SIZE) -> None:
        if capacity < 1:
            raise ValueError("a VerifyCache holds at least one entry")
        self._capacity = capacity
        self._entries: OrderedDict[_CacheKey, None] = OrderedDict()
        self.hits = 0
        """Verifications answered from the cache."""
        self.misses = 0
        """Verifications that ran Ed25519."""

    def __len__(self) -> int:
        return len(self._entries)

    def _contains(self, key: _CacheKey) -> bool:
        if key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            return True
        self.misses += 1
        return False

    def _add(self, key: _CacheKey) -> None:
        self._entries[key] = None
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)


@functools.lru_cache(maxsize=PUBLIC_KEY_CACHE_SIZE)
def _load_public_key(public_key_b64: str) -> Ed25519PublicKey | None:
    raw = _decode_fixed(public_key_b64, PUBLIC_KEY_TEXT_LENGTH, PUBLIC_KEY_SIZE)
    if raw is None:
        return None
    try:
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        return None


def verify(
    public_key_b64: str,
    artifact: str,
    value: JsonValue,
    signature_b64: str,
    *,
    cache: VerifyCache | None = None,
) -> bool:
    """True when `signature_b64` is `b64(SIG(key, artifact, value))` for that public key.

    Never raises: malformed keys, signatures or values are simply not valid.
    """
    try:
        message = domain_bytes(artifact, value)
    except (JsonValueError, UnicodeEncodeError, AttributeError):
        return False
    return verify_bytes(public_key_b64, message, signature_b64, cache=cache)


def verify_bytes(
    public_key_b64: str, message: bytes, signature_b64: str, *, cache: VerifyCache | None = None
) -> bool:
    """True when `signature_b64` is a valid Ed25519 signature of `message`. Never raises."""
    # Typed as text, but received values reach here: anything else is simply invalid.
    key_text: object = public_key_b64
    signature_text: object = signature_b64
    if not isinstance(key_text, str) or not isinstance(signature_text, str):
        return False
    key: _CacheKey | None = None
    if cache is not None:
        key = (key_text, hashlib.sha256(message).digest(), signature_text)
        if cache._contains(key):
            return True
    public_key = _load_public_key(key_text)
    signature = _decode_fixed(signature_text, SIGNATURE_TEXT_LENGTH, SIGNATURE_SIZE)
    if public_key is None or signature is None:
        return False
    try:
        public_key.verify(signature, message)
    except InvalidSignature:
        return False
    if cache is not None and key is not None:
        cache._add(key)
    return True
