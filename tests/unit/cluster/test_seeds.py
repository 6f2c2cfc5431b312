"""Agents' seeds sealed with the cluster's key: they open only for their own agent under the
same key, a different key is refused at start by the stored check value, and every key-file
problem is a typed error that names the file and the fix and never shows a key or a seed."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from harness_contract.ids import b64

from gateway import secret_file
from gateway.cluster.seeds import (
    CHECK_PREFIX,
    KEY_COMMAND,
    SEALED_SEED_SIZE,
    SEALED_VERSION,
    SEED_KEY_SIZE,
    SealedSeedCorrupt,
    SealedSeedProblem,
    SeedKey,
    SeedKeyError,
    SeedKeyFileError,
    SeedKeyFileProblem,
    SeedKeyMismatch,
)
from gateway.identity.keys import SEED_SIZE, SigningKey
from gateway.secret_file import SecretFileError

KEY = bytes(range(SEED_KEY_SIZE))
"""A fixed key, so a test can look for it in texts."""

SEED = bytes(range(100, 100 + SEED_SIZE))
"""A fixed seed, likewise."""

# Fixed, not minted: test ids built from them are parameters, and every xdist worker must
# collect the same ones.
ALICE = "agt_AAECAwQFBgcICQoLDA0ODw"
BOB = "agt_EBESExQVFhcYGRobHB0eHw"


def _secrets_in(text: str, key: bytes = KEY) -> list[str]:
    """Every spelling of the key or the seed that occurs in `text`."""
    spellings = [b64(key), key.hex(), b64(SEED), SEED.hex(), repr(key), repr(SEED)]
    return [spelling for spelling in spellings if spelling in text]


def _key_file(tmp_path: Path, text: str | bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "seed-key"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)
    return path


# --- sealing -----------------------------------------------------------------------------------


def test_a_sealed_seed_opens_to_the_same_seed_for_its_agent() -> None:
    key = SeedKey(KEY)
    sealed = key.seal(ALICE, SEED)
    assert key.open(ALICE, sealed) == SEED


def test_a_real_signing_seed_round_trips_and_still_signs_as_the_same_key() -> None:
    signing = SigningKey.generate()
    key = SeedKey.generate()
    opened = SigningKey(key.open(ALICE, key.seal(ALICE, signing.seed)))
    assert opened.public_key_b64 == signing.public_key_b64


def test_a_sealed_seed_is_the_version_byte_a_nonce_and_the_ciphertext_and_hides_the_seed() -> None:
    sealed = SeedKey(KEY).seal(ALICE, SEED)
    assert len(sealed) == SEALED_SEED_SIZE == 61
    assert sealed[:1] == SEALED_VERSION
    assert SEED not in sealed
    assert KEY not in sealed


def test_sealing_one_seed_twice_gives_two_values_that_both_open() -> None:
    key = SeedKey(KEY)
    first, second = key.seal(ALICE, SEED), key.seal(ALICE, SEED)
    assert first != second  # a fresh nonce each time
    assert first[1:13] != second[1:13]
    assert key.open(ALICE, first) == key.open(ALICE, second) == SEED


@pytest.mark.parametrize("position", range(SEALED_SEED_SIZE))
def test_a_sealed_seed_with_any_byte_flipped_is_refused_as_corrupt(position: int) -> None:
    key = SeedKey(KEY)
    sealed = bytearray(key.seal(ALICE, SEED))
    sealed[position] ^= 0x01
    with pytest.raises(SealedSeedCorrupt) as refused:
        key.open(ALICE, bytes(sealed))
    expected = SealedSeedProblem.MALFORMED if position == 0 else SealedSeedProblem.UNAUTHENTIC
    assert refused.value.reason is expected
    assert refused.value.agent_id == ALICE
    assert ALICE in str(refused.value)
    assert _secrets_in(str(refused.value)) == []


@pytest.mark.parametrize("change", ["truncated", "extended", "empty"])
def test_a_sealed_seed_of_another_length_is_refused_as_malformed(change: str) -> None:
    key = SeedKey(KEY)
    sealed = key.seal(ALICE, SEED)
    changed = {"truncated": sealed[:-1], "extended": sealed + b"\x00", "empty": b""}[change]
    with pytest.raises(SealedSeedCorrupt) as refused:
        key.open(ALICE, changed)
    assert refused.value.reason is SealedSeedProblem.MALFORMED


def test_a_seed_sealed_for_one_agent_does_not_open_for_another() -> None:
    key = SeedKey(KEY)
    with pytest.raises(SealedSeedCorrupt) as refused:
        key.open(BOB, key.seal(ALICE, SEED))
    assert refused.value.reason is SealedSeedProblem.UNAUTHENTIC
    assert refused.value.agent_id == BOB


def test_a_seed_sealed_with_another_key_does_not_open_and_the_error_names_the_key_file(
    tmp_path: Path,
) -> None:
    path = _key_file(tmp_path, b64(KEY))
    other = SeedKey.generate()
    with pytest.raises(SealedSeedCorrupt) as refused:
        SeedKey.load(path).open(ALICE, other.seal(ALICE, SEED))
    assert refused.value.reason is SealedSeedProblem.UNAUTHENTIC
    assert str(path) in str(refused.value)
    assert _secrets_in(str(refused.value)) == []


def test_a_plaintext_seed_of_a_network_mode_database_is_refused_as_unsealed_naming_migrate() -> (
    None
):
    with pytest.raises(SealedSeedCorrupt) as refused:
        SeedKey(KEY).open(ALICE, SEED)
    assert refused.value.reason is SealedSeedProblem.UNSEALED
    assert "migrate" in str(refused.value)
    assert _secrets_in(str(refused.value)) == []


def test_migration_seals_a_plaintext_seed_and_leaves_a_sealed_one_alone() -> None:
    key = SeedKey(KEY)
    sealed = key.seal_stored(ALICE, SEED)
    assert sealed is not None
    assert key.open(ALICE, sealed) == SEED
    assert key.seal_stored(ALICE, sealed) is None  # a second run changes nothing


def test_migration_refuses_a_seed_sealed_with_another_key_or_malformed() -> None:
    key = SeedKey(KEY)
    with pytest.raises(SealedSeedCorrupt) as refused:
        key.seal_stored(ALICE, SeedKey.generate().seal(ALICE, SEED))
    assert refused.value.reason is SealedSeedProblem.UNAUTHENTIC
    with pytest.raises(SealedSeedCorrupt) as refused:
        key.seal_stored(ALICE, SEED + b"\x00")
    assert refused.value.reason is SealedSeedProblem.MALFORMED


@pytest.mark.parametrize("seed", [b"", b"\x00" * 31, b"\x00" * 33])
def test_sealing_a_seed_that_is_not_32_bytes_is_a_value_error(seed: bytes) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        SeedKey(KEY).seal(ALICE, seed)


@pytest.mark.parametrize("agent_id", ["", "alice", "pst_" + "A" * 43, ALICE + "A"])
def test_sealing_or_opening_for_something_that_is_not_an_agent_id_is_a_value_error(
    agent_id: str,
) -> None:
    key = SeedKey(KEY)
    with pytest.raises(ValueError, match="not an AgentId"):
        key.seal(agent_id, SEED)
    with pytest.raises(ValueError, match="not an AgentId"):
        key.open(agent_id, key.seal(ALICE, SEED))


@pytest.mark.parametrize("size", [0, 16, 31, 33, 64])
def test_a_key_that_is_not_32_bytes_is_a_value_error(size: int) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        SeedKey(b"\x00" * size)


# --- the key check value -----------------------------------------------------------------------


def test_the_check_value_is_stable_for_one_key_and_verifies() -> None:
    first, second = SeedKey(KEY), SeedKey(bytes(KEY))
    assert first.key_check() == second.key_check()
    assert first.key_check().startswith(CHECK_PREFIX)
    second.verify_check(first.key_check())


def test_the_check_value_reveals_nothing_of_the_key() -> None:
    check = SeedKey(KEY).key_check()
    assert _secrets_in(check) == []
    assert len(check) == len(CHECK_PREFIX) + 64


def test_a_different_key_is_refused_by_the_stored_check_value_naming_its_file(
    tmp_path: Path,
) -> None:
    stored = SeedKey.generate().key_check()
    path = _key_file(tmp_path, b64(KEY))
    with pytest.raises(SeedKeyMismatch) as refused:
        SeedKey.load(path).verify_check(stored)
    assert str(path) in str(refused.value)
    assert _secrets_in(str(refused.value)) == []


@pytest.mark.parametrize("stored", ["", "v2:" + "0" * 64, "0" * 64])
def test_a_check_value_of_an_unknown_format_is_a_mismatch_not_a_pass(stored: str) -> None:
    with pytest.raises(SeedKeyMismatch, match="not one this version reads"):
        SeedKey(KEY).verify_check(stored)


def test_a_check_value_one_character_off_is_refused() -> None:
    check = SeedKey(KEY).key_check()
    last = "0" if check[-1] != "0" else "1"
    with pytest.raises(SeedKeyMismatch):
        SeedKey(KEY).verify_check(check[:-1] + last)


# --- the key file ------------------------------------------------------------------------------


def test_a_key_file_of_one_base64url_line_loads_the_key_it_holds(tmp_path: Path) -> None:
    path = _key_file(tmp_path, f"  {b64(KEY)}\n")
    key = SeedKey.load(path)
    assert key.key_check() == SeedKey(KEY).key_check()
    assert key.source == str(path)


def test_a_missing_key_file_is_refused_naming_the_file_and_how_to_make_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "absent"
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(path)
    assert refused.value.reason is SeedKeyFileProblem.MISSING
    assert refused.value.path == path
    assert str(path) in str(refused.value)
    assert f"{KEY_COMMAND} {path}" in str(refused.value)


def test_a_key_file_that_cannot_be_read_is_refused_as_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "a-directory"
    path.mkdir(mode=0o700)
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(path)
    assert refused.value.reason is SeedKeyFileProblem.UNREADABLE
    assert str(path) in str(refused.value)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o666])
def test_a_key_file_others_can_read_or_write_is_refused_naming_its_mode_and_the_fix(
    tmp_path: Path, mode: int
) -> None:
    path = _key_file(tmp_path, b64(KEY), mode)
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(path)
    text = str(refused.value)
    assert refused.value.reason is SeedKeyFileProblem.TOO_OPEN
    assert f"{mode:04o}" in text
    assert f"chmod 600 {path}" in text
    assert _secrets_in(text) == []


def test_a_root_owned_group_readable_key_file_loads_for_a_process_that_is_not_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _key_file(tmp_path, b64(KEY), 0o440)
    # As tests/unit/test_secret_file_owners.py does: the file's owner plays root and this
    # process another user, so the Secret volume's rule applies without a real chown.
    owner = path.stat().st_uid
    monkeypatch.setattr(secret_file, "ROOT_UID", owner)
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    assert SeedKey.load(path).key_check() == SeedKey(KEY).key_check()
    os.chmod(path, 0o460)
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(path)
    assert refused.value.reason is SeedKeyFileProblem.TOO_OPEN
    assert f"chmod 440 {path}" in str(refused.value)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("not a key at all, clearly", id="words"),
        pytest.param(b64(KEY) + "=", id="padded"),
        pytest.param(b64(KEY).replace("-", "+").replace("_", "/") + "+/", id="standard-alphabet"),
        pytest.param(f"{b64(KEY)}\n{b64(KEY)}\n", id="two-lines"),
        pytest.param("", id="empty"),
    ],
)
def test_a_key_file_that_is_not_one_base64url_line_is_refused_as_malformed_without_its_content(
    tmp_path: Path, content: str
) -> None:
    path = _key_file(tmp_path, content)
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(path)
    text = str(refused.value)
    assert refused.value.reason is SeedKeyFileProblem.MALFORMED
    assert str(path) in text
    assert "base64url" in text
    assert _secrets_in(text) == []
    if content.strip():
        assert content.strip() not in text


def test_a_key_file_in_hex_is_refused_saying_so(tmp_path: Path) -> None:
    path = _key_file(tmp_path, KEY.hex())
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(path)
    assert refused.value.reason is SeedKeyFileProblem.MALFORMED
    assert "hex" in str(refused.value)
    assert _secrets_in(str(refused.value)) == []


def test_a_key_file_that_is_not_utf8_is_refused_as_malformed(tmp_path: Path) -> None:
    path = _key_file(tmp_path, b"\xff\xfe" + KEY)
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(path)
    assert refused.value.reason is SeedKeyFileProblem.MALFORMED


@pytest.mark.parametrize("size", [16, 31, 33, 48])
def test_a_key_file_of_another_length_is_refused_naming_the_expected_size(
    tmp_path: Path, size: int
) -> None:
    key = bytes(range(size))
    path = _key_file(tmp_path, b64(key))
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(path)
    text = str(refused.value)
    assert refused.value.reason is SeedKeyFileProblem.WRONG_LENGTH
    assert f"holds {size} bytes" in text
    assert "exactly 32 bytes" in text
    assert b64(key) not in text


def test_a_key_file_error_is_a_secret_file_error_so_start_up_reports_it_like_token_files(
    tmp_path: Path,
) -> None:
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.load(tmp_path / "absent")
    assert isinstance(refused.value, SecretFileError)
    assert isinstance(refused.value, SeedKeyError)
    assert isinstance(refused.value, ValueError)


# --- writing a new key file --------------------------------------------------------------------


def test_a_written_key_file_is_owner_only_one_line_and_loads_to_the_same_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "seed-key"
    key = SeedKey(KEY)
    with caplog.at_level(logging.DEBUG):
        key.write(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text(encoding="utf-8") == b64(KEY) + "\n"
    assert SeedKey.load(path).key_check() == key.key_check()
    assert str(path) in caplog.text
    assert _secrets_in(caplog.text) == []


def test_writing_over_an_existing_key_file_is_refused_and_leaves_it_unchanged(
    tmp_path: Path,
) -> None:
    path = _key_file(tmp_path, b64(KEY))
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey.generate().write(path)
    assert refused.value.reason is SeedKeyFileProblem.EXISTS
    assert str(path) in str(refused.value)
    assert path.read_text(encoding="utf-8") == b64(KEY)


def test_writing_over_a_symlink_is_refused_and_leaves_its_target_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    link = tmp_path / "seed-key"
    link.symlink_to(target)
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey(KEY).write(link)
    assert refused.value.reason is SeedKeyFileProblem.EXISTS
    assert not target.exists()


def test_writing_where_no_directory_exists_is_refused_as_unwritable(tmp_path: Path) -> None:
    path = tmp_path / "no-such-directory" / "seed-key"
    with pytest.raises(SeedKeyFileError) as refused:
        SeedKey(KEY).write(path)
    assert refused.value.reason is SeedKeyFileProblem.UNWRITABLE
    assert str(path) in str(refused.value)


def test_two_generated_keys_differ() -> None:
    assert SeedKey.generate().key_check() != SeedKey.generate().key_check()


def test_the_repr_of_a_key_shows_its_source_and_never_the_key(tmp_path: Path) -> None:
    path = _key_file(tmp_path, b64(KEY))
    text = repr(SeedKey.load(path))
    assert str(path) in text
    assert _secrets_in(text) == []
    assert _secrets_in(repr(SeedKey(KEY))) == []
