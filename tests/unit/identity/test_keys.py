from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from harness_contract.ids import b64, domain_bytes, unb64
from harness_contract.jsonvalue import JsonValue
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.identity.keys import (
    SigningKey,
    VerifyCache,
    is_public_key_text,
    is_signature_text,
    verify,
    verify_bytes,
)

SEED = bytes(range(32))
VALUE: dict[str, JsonValue] = {"kind": "example", "n": 1.0, "items": ["a", None, True]}


def flip(text: str, index: int) -> str:
    data = bytearray(unb64(text) or b"")
    data[index] ^= 0x01
    return b64(bytes(data))


def test_a_seed_gives_the_same_key_and_public_key_every_time():
    first, second = SigningKey(SEED), SigningKey(SEED)
    assert first.seed == SEED
    assert first.public_key_b64 == second.public_key_b64
    assert len(first.public_key_b64) == 43
    assert is_public_key_text(first.public_key_b64)


def test_a_seed_of_another_length_is_refused():
    with pytest.raises(ValueError, match="32 bytes"):
        SigningKey(b"\x00" * 31)


def test_generated_keys_are_distinct():
    assert SigningKey.generate().public_key_b64 != SigningKey.generate().public_key_b64


def test_the_repr_never_shows_the_seed():
    key = SigningKey(SEED)
    assert SEED.hex() not in repr(key)
    assert b64(SEED) not in repr(key)
    assert key.public_key_b64 in repr(key)


def test_signatures_are_deterministic_86_characters_over_the_domain_bytes():
    key = SigningKey(SEED)
    signature = key.sign("statement", VALUE)
    assert signature == key.sign("statement", VALUE)
    assert len(signature) == 86
    assert is_signature_text(signature)
    raw_public = unb64(key.public_key_b64)
    assert raw_public is not None
    # The signed bytes are exactly harness/v1/<artifact> NUL JCS(value).
    Ed25519PublicKey.from_public_bytes(raw_public).verify(
        unb64(signature) or b"", domain_bytes("statement", VALUE)
    )


def test_a_fixed_seed_and_value_give_the_published_key_and_signature():
    # Pinned bytes: a change of Ed25519 library or of canonical JSON must not move them.
    key = SigningKey(SEED)
    assert key.public_key_b64 == "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"
    assert key.sign("statement", VALUE) == (
        "mj1awN9xezmTw0EEN7OcNFmjI98e7y4Hpt4t4mpP_mYYn9gKMDj6AJ_KFSUC8WqOHJNIcRYM4KyB2nrg6vvaCw"
    )


@settings(max_examples=300)
@given(
    seed=st.binary(min_size=32, max_size=32),
    artifact=st.sampled_from(["statement", "envelope", "card"]),
    text=st.text(max_size=300),
)
def test_libsodium_signs_exactly_the_bytes_openssl_signs(seed: bytes, artifact: str, text: str):
    # Signing uses libsodium, verifying OpenSSL: RFC 8032 makes both sign identically.
    value: JsonValue = {"kind": "example", "text": text}
    reference = Ed25519PrivateKey.from_private_bytes(seed)
    public = reference.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key = SigningKey(seed)
    assert key.public_key_b64 == b64(public)
    assert key.sign(artifact, value) == b64(reference.sign(domain_bytes(artifact, value)))


def test_a_signature_verifies_and_a_flipped_byte_fails():
    key = SigningKey(SEED)
    signature = key.sign("statement", VALUE)
    assert verify(key.public_key_b64, "statement", VALUE, signature)
    assert not verify(key.public_key_b64, "statement", VALUE, flip(signature, 0))
    assert not verify(key.public_key_b64, "statement", VALUE, flip(signature, 63))
    assert not verify(flip(key.public_key_b64, 5), "statement", VALUE, signature)


def test_a_signature_is_bound_to_its_artifact_value_and_key():
    key = SigningKey(SEED)
    signature = key.sign("statement", VALUE)
    assert not verify(key.public_key_b64, "envelope", VALUE, signature)
    assert not verify(key.public_key_b64, "statement", {**VALUE, "n": 2.0}, signature)
    assert not verify(SigningKey.generate().public_key_b64, "statement", VALUE, signature)


@pytest.mark.parametrize(
    ("public_key", "signature"),
    [
        ("", "A" * 86),
        ("A" * 42, "A" * 86),
        ("A" * 44, "A" * 86),
        ("!" * 43, "A" * 86),
        ("A" * 42 + "B", "A" * 86),  # non-zero trailing bits
        ("_" * 43, "A" * 86),
        (None, "A" * 86),
        (b"A" * 43, "A" * 86),
        ("A" * 43, "A" * 85),
        ("A" * 43, "A" * 87),
        ("A" * 43, "A" * 85 + "="),
        ("A" * 43, None),
        ("A" * 43, ["not", "text"]),
    ],
)
def test_verify_returns_false_for_garbage_and_never_raises(public_key, signature):
    assert not verify(public_key, "statement", VALUE, signature)


def test_verify_returns_false_for_a_value_without_a_canonical_form():
    key = SigningKey(SEED)
    signature = key.sign("statement", VALUE)
    assert not verify(key.public_key_b64, "statement", {"x": float("nan")}, signature)
    assert not verify(key.public_key_b64, "statement", "\ud800", signature)
    assert not verify(key.public_key_b64, "statément", VALUE, signature)


def test_an_invalid_curve_point_is_not_a_valid_key():
    not_a_point = b64(b"\xff" * 32)
    assert not verify(not_a_point, "statement", VALUE, SigningKey(SEED).sign("statement", VALUE))


def test_the_cache_answers_a_repeated_verification_without_ed25519():
    key = SigningKey(SEED)
    signature = key.sign("statement", VALUE)
    cache = VerifyCache(capacity=8)
    assert verify(key.public_key_b64, "statement", VALUE, signature, cache=cache)
    assert verify(key.public_key_b64, "statement", VALUE, signature, cache=cache)
    assert (cache.misses, cache.hits, len(cache)) == (1, 1, 1)


def test_the_cache_never_vouches_for_another_signature_over_the_same_bytes():
    key = SigningKey(SEED)
    signature = key.sign("statement", VALUE)
    cache = VerifyCache(capacity=8)
    assert verify(key.public_key_b64, "statement", VALUE, signature, cache=cache)
    assert not verify(key.public_key_b64, "statement", VALUE, flip(signature, 10), cache=cache)
    assert len(cache) == 1


def test_the_cache_keeps_only_positive_verdicts():
    key = SigningKey(SEED)
    cache = VerifyCache(capacity=8)
    assert not verify(key.public_key_b64, "statement", VALUE, "A" * 86, cache=cache)
    assert len(cache) == 0


def test_the_cache_is_a_bounded_lru():
    key = SigningKey(SEED)
    cache = VerifyCache(capacity=2)
    messages = [b"one", b"two", b"three"]
    signatures = [key.sign("m", message.decode()) for message in messages]
    signed = [domain_bytes("m", message.decode()) for message in messages]
    assert verify_bytes(key.public_key_b64, signed[0], signatures[0], cache=cache)
    assert verify_bytes(key.public_key_b64, signed[1], signatures[1], cache=cache)
    assert verify_bytes(key.public_key_b64, signed[0], signatures[0], cache=cache)  # refresh
    assert verify_bytes(key.public_key_b64, signed[2], signatures[2], cache=cache)  # evicts two
    assert len(cache) == 2
    hits = cache.hits
    assert verify_bytes(key.public_key_b64, signed[0], signatures[0], cache=cache)
    assert cache.hits == hits + 1
    assert verify_bytes(key.public_key_b64, signed[1], signatures[1], cache=cache)
    assert cache.hits == hits + 1


def test_a_cache_needs_room_for_one_entry():
    with pytest.raises(ValueError, match="at least one"):
        VerifyCache(capacity=0)
