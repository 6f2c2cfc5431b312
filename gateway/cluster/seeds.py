"""Agents' signing seeds sealed at rest for a cluster (issue 25, item 2).

Every replica of a cluster loads every cluster agent's Ed25519 seed from PostgreSQL, so the
`identities.seed` column holds each seed sealed with one cluster-wide key that every replica
reads from `--seed-key-file` (a Kubernetes Secret mounted on every pod). Callers may rely on:

- **The key file** is one line: unpadded base64url (`harness_contract.ids.b64`, 43 characters)
  of exactly 32 random bytes, the same text form as the Registry's signing key file.
  `SeedKey.load` checks its permissions by the token files' rule
  (`gateway.secret_file.too_open_bits`: owner-only, or root-owned and group-readable as a
  Secret volume with `fsGroup` makes it) and refuses a missing, unreadable, too open,
  malformed or wrong-length file with a `SeedKeyFileError` whose `reason` says which and whose
  text names the file and the fix. `SeedKey.write` creates a new key file exclusively with
  mode 0600 (for `KEY_COMMAND`).
- **Two subkeys** are derived from the file's key with HKDF-SHA-256 under distinct labels:
  one seals, one makes the key check value. Neither is the file's key, so the stored check
  value says nothing about the sealing key.
- **A sealed seed** is `SEALED_VERSION` (one byte), a random 12-byte nonce, then the
  ChaCha20-Poly1305 ciphertext of the 32-byte seed with its 16-byte tag: `SEALED_SEED_SIZE`
  (61) bytes. The associated data is the version byte and the agent's 16 AgentId bytes, so a
  sealed seed copied onto another agent's row does not open. A plaintext seed (32 bytes,
  what a network-mode database holds) is never mistaken for a sealed one.
- **`open`** raises `SealedSeedCorrupt` for a value that is not a sealed seed, was altered,
  belongs to another agent, or was sealed with another key: an AEAD cannot tell those apart.
  The key itself is checked once at start instead: `key_check()` is stored once in the
  cluster's meta table, and `verify_check(stored)` refuses a replica given a different key
  (`SeedKeyMismatch`, naming the file) before it opens any seed. The meta table's key is
  `KEY_CHECK_META_KEY`.
- **Migration** from network mode seals each plaintext seed in place: `seal_stored` returns
  the sealed value for a plaintext row and None for a row already sealed with this key, so
  an interrupted migration runs again safely.
- No error text and no log line holds a key, a seed or the file's content; `repr` of a
  `SeedKey` shows only where it came from.
"""

from __future__ import annotations

import enum
import hmac
import logging
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from harness_contract.ids import RandomId, b64, unb64

from gateway import secret_file
from gateway.identity.keys import SEED_SIZE
from gateway.secret_file import SECRET_FILE_MODE, SecretFileError, too_open_bits

logger = logging.getLogger(__name__)

SEED_KEY_SIZE: Final = 32
"""Bytes of a cluster's seed key (ChaCha20-Poly1305 takes a 256-bit key)."""

SEED_KEY_TEXT_LENGTH: Final = 43
"""Characters of the key file's one line: unpadded base64url of `SEED_KEY_SIZE` bytes."""

SEALED_VERSION: Final = b"\x01"
"""First byte of a sealed seed: the format below. A later format takes another value, so
replicas of two releases can tell them apart during a rolling upgrade."""

NONCE_SIZE: Final = 12
"""Bytes of a seal's nonce, random per seal: ChaCha20-Poly1305's 96-bit nonce. A cluster seals
one seed per registered agent, far below the 2^32 random nonces one key safely takes."""

TAG_SIZE: Final = 16
"""Bytes of the Poly1305 tag that ends a sealed seed."""

SEALED_SEED_SIZE: Final = len(SEALED_VERSION) + NONCE_SIZE + SEED_SIZE + TAG_SIZE
"""Bytes of a sealed seed (61): version, nonce, ciphertext and tag."""

SEAL_KEY_LABEL: Final = b"harness/v1/seed-seal"
"""HKDF info of the subkey that seals seeds."""

CHECK_KEY_LABEL: Final = b"harness/v1/seed-key-check"
"""HKDF info of the key check value."""

CHECK_PREFIX: Final = "v1:"
"""Start of a key check value: its format (the hex of 32 HKDF bytes follows)."""

KEY_CHECK_META_KEY: Final = "seed_key_check"
"""The `harness_meta` key under which a cluster's database keeps `SeedKey.key_check()`."""

KEY_COMMAND: Final = "harness-gateway cluster seed-key --out"
"""The command that makes a new key file (followed by the file's path), named in the fixes
this module's errors give."""

_HEX_KEY: Final = re.compile(r"[0-9a-fA-F]{64}")
"""A 32-byte key written in hex: not the file's format, but worth a precise error."""


class SeedKeyError(ValueError):
    """A seed key or a sealed seed cannot be used. `str()` names the file or the agent and
    the problem, never a key or a seed."""


class SeedKeyFileProblem(enum.StrEnum):
    """Why `SeedKey.load` or `SeedKey.write` refused a key file."""

    MISSING = "missing"
    """No file at the path: the Secret is not mounted there, or the key was never made."""
    UNREADABLE = "unreadable"
    """The file exists but cannot be read (permissions of the process, a directory, I/O)."""
    TOO_OPEN = "too-open"
    """Others may read or replace the file (`gateway.secret_file.too_open_bits`)."""
    MALFORMED = "malformed"
    """The content is not one line of unpadded base64url."""
    WRONG_LENGTH = "wrong-length"
    """The content decodes, but not to `SEED_KEY_SIZE` bytes."""
    EXISTS = "exists"
    """`write` found a file already there: a key is made once and never overwritten."""
    UNWRITABLE = "unwritable"
    """`write` could not create or fill the file (the directory's permissions, I/O)."""


class SeedKeyFileError(SeedKeyError, SecretFileError):
    """A seed key file that cannot be used; `reason` says why and `path` which file."""

    def __init__(self, message: str, *, reason: SeedKeyFileProblem, path: Path) -> None:
        super().__init__(message)
        self.reason = reason
        self.path = path


class SeedKeyMismatch(SeedKeyError):
    """The seed key is not the one the cluster's seeds are sealed with (`verify_check`)."""


class SealedSeedProblem(enum.StrEnum):
    """Why `SeedKey.open` refused a stored value."""

    UNSEALED = "unsealed"
    """A plaintext 32-byte seed, as a network-mode database stores it: migrate seals it."""
    MALFORMED = "malformed"
    """Neither a plaintext seed nor a sealed one of a known version and length."""
    UNAUTHENTIC = "unauthentic"
    """The tag does not verify: altered, moved from another agent's row, or sealed with
    another key."""


class SealedSeedCorrupt(SeedKeyError):
    """A stored seed that does not open; `reason` says why and `agent_id` whose it is."""

    def __init__(self, message: str, *, reason: SealedSeedProblem, agent_id: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.agent_id = agent_id


def _subkey(key: bytes, label: bytes) -> bytes:
    """HKDF-SHA-256 of the file's key under `label`, 32 bytes."""
    return HKDF(algorithm=hashes.SHA256(), length=SEED_KEY_SIZE, salt=None, info=label).derive(key)


def _agent_bytes(agent_id: str) -> bytes:
    """The 16 bytes of an AgentId; a caller passing anything else has a bug."""
    data = RandomId.AGENT.decode(agent_id)
    if data is None:
        raise ValueError("not an AgentId")
    return data


class SeedKey:
    """A cluster's seed key: seals and opens agents' seeds, and proves itself at start.

    Immutable; `repr` shows only its source (the file it was read from or written to)."""

    __slots__ = ("_aead", "_check", "_key", "_source")

    def __init__(self, key: bytes, *, source: str = "a generated seed key") -> None:
        """Wrap 32 key bytes; `source` names them in errors (`SeedKey.load` passes the file).

        Raises `ValueError` for any other length."""
        if not isinstance(key, bytes | bytearray) or len(key) != SEED_KEY_SIZE:
            raise ValueError(f"a seed key is exactly {SEED_KEY_SIZE} bytes")
        self._key = bytes(key)
        self._source = source
        self._aead = ChaCha20Poly1305(_subkey(self._key, SEAL_KEY_LABEL))
        self._check = CHECK_PREFIX + _subkey(self._key, CHECK_KEY_LABEL).hex()

    @classmethod
    def generate(cls) -> SeedKey:
        """A fresh key from `secrets.token_bytes`."""
        return cls(secrets.token_bytes(SEED_KEY_SIZE))

    @classmethod
    def load(cls, path: Path) -> SeedKey:
        """The key in `path`, after the checks in the module docstring.

        Raises `SeedKeyFileError` (a `SecretFileError`, so a `ValueError`)."""
        try:
            status = path.stat()
        except FileNotFoundError:
            raise SeedKeyFileError(
                f"the seed key file {path} does not exist: mount the cluster's seed key "
                f"Secret there (every replica reads the same key), or make the cluster's "
                f"first key once with `{KEY_COMMAND} {path}`",
                reason=SeedKeyFileProblem.MISSING,
                path=path,
            ) from None
        except OSError as error:
            raise _unreadable(path, error) from None
        euid = os.geteuid()
        if too_open_bits(status.st_mode, file_uid=status.st_uid, euid=euid):
            # The same rule as `too_open_bits`: only a root-owned file read by a process
            # that is not root may be group-readable, so only then is 0440 the fix.
            group_may_read = status.st_uid == secret_file.ROOT_UID != euid
            raise SeedKeyFileError(
                _too_open_message(path, status.st_mode, group_may_read=group_may_read),
                reason=SeedKeyFileProblem.TOO_OPEN,
                path=path,
            )
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise _unreadable(path, error) from None
        except UnicodeDecodeError:
            raise _malformed(path, "is not UTF-8 text") from None
        if not text:
            raise _malformed(path, "is empty")
        # 64 hex digits also spell valid base64url (of 48 bytes): name the mix-up instead.
        if _HEX_KEY.fullmatch(text):
            raise _malformed(path, "holds hex; write the key as unpadded base64url instead")
        key = unb64(text)
        if key is None:
            raise _malformed(path, "does not hold one line of unpadded base64url")
        if len(key) != SEED_KEY_SIZE:
            raise SeedKeyFileError(
                f"the seed key file {path} holds {len(key)} bytes; a seed key is exactly "
                f"{SEED_KEY_SIZE} bytes as unpadded base64url ({SEED_KEY_TEXT_LENGTH} "
                f"characters), as `{KEY_COMMAND} FILE` writes it",
                reason=SeedKeyFileProblem.WRONG_LENGTH,
                path=path,
            )
        return cls(key, source=str(path))

    def write(self, path: Path) -> None:
        """Write this key to a new file at `path`: one line, mode 0600, created with
        `O_EXCL` so an existing key (another process's, or the cluster's) is never
        overwritten. Raises `SeedKeyFileError` (`EXISTS`, or `UNWRITABLE` for any other
        failure, the partial file removed)."""
        try:
            descriptor = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, SECRET_FILE_MODE
            )
        except FileExistsError:
            raise SeedKeyFileError(
                f"the seed key file {path} already exists; a cluster's key is made once and "
                "never overwritten (seeds sealed with it would no longer open): choose "
                "another path",
                reason=SeedKeyFileProblem.EXISTS,
                path=path,
            ) from None
        except OSError as error:
            raise _unwritable(path, error) from None
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(b64(self._key) + "\n")
                file.flush()
                # The key is the only way to open the cluster's seeds: it must be on disk
                # before anyone is told it exists.
                os.fsync(file.fileno())
        except OSError as error:
            path.unlink(missing_ok=True)
            raise _unwritable(path, error) from None
        logger.info("seed key file created path=%s", path)

    @property
    def source(self) -> str:
        """The file the key was read from, or what made it."""
        return self._source

    def seal(self, agent_id: str, seed: bytes) -> bytes:
        """`agent_id`'s 32-byte seed sealed for its `identities` row (`SEALED_SEED_SIZE`
        bytes, a fresh nonce each call). Raises `ValueError` for a bad AgentId or seed."""
        if not isinstance(seed, bytes | bytearray) or len(seed) != SEED_SIZE:
            raise ValueError(f"an Ed25519 seed is exactly {SEED_SIZE} bytes")
        nonce = secrets.token_bytes(NONCE_SIZE)
        associated = SEALED_VERSION + _agent_bytes(agent_id)
        return SEALED_VERSION + nonce + self._aead.encrypt(nonce, bytes(seed), associated)

    def open(self, agent_id: str, sealed: bytes) -> bytes:
        """The seed `seal(agent_id, seed)` sealed. Raises `SealedSeedCorrupt` when `sealed`
        is not such a value under this key (see the module docstring), `ValueError` for a
        bad AgentId."""
        associated = SEALED_VERSION + _agent_bytes(agent_id)
        if len(sealed) == SEED_SIZE:
            raise SealedSeedCorrupt(
                f"the stored seed of {agent_id} is not sealed (a network-mode database); "
                "`harness-gateway migrate` to cluster mode seals every seed",
                reason=SealedSeedProblem.UNSEALED,
                agent_id=agent_id,
            )
        if len(sealed) != SEALED_SEED_SIZE or sealed[:1] != SEALED_VERSION:
            raise SealedSeedCorrupt(
                f"the stored seed of {agent_id} is not a sealed seed this version reads "
                f"({len(sealed)} bytes)",
                reason=SealedSeedProblem.MALFORMED,
                agent_id=agent_id,
            )
        start = len(SEALED_VERSION)
        nonce = bytes(sealed[start : start + NONCE_SIZE])
        try:
            return self._aead.decrypt(nonce, bytes(sealed[start + NONCE_SIZE :]), associated)
        except InvalidTag:
            raise SealedSeedCorrupt(
                f"the stored seed of {agent_id} does not open with the seed key from "
                f"{self._source}: it was altered, copied from another agent's row, or sealed "
                "with another key",
                reason=SealedSeedProblem.UNAUTHENTIC,
                agent_id=agent_id,
            ) from None

    def seal_stored(self, agent_id: str, stored: bytes) -> bytes | None:
        """For the one-way migration to cluster mode: the sealed value an `identities` row
        holding `stored` should hold instead, or None when it already holds a seed sealed
        with this key, so an interrupted migration can simply run again. Raises
        `SealedSeedCorrupt` for anything else (a seed sealed with another key included)."""
        if len(stored) == SEED_SIZE:
            return self.seal(agent_id, stored)
        self.open(agent_id, stored)
        return None

    def key_check(self) -> str:
        """The value the cluster's meta table stores once, when the first replica sets up
        the database: `CHECK_PREFIX` and the hex of an HKDF output of the key under its own
        label. Stable for one key, different for another; reveals nothing of the key."""
        return self._check

    def verify_check(self, stored: str) -> None:
        """Refuse to start with a key that is not the cluster's: raises `SeedKeyMismatch`
        naming the key's file when `stored` (from the meta table) is not `key_check()`."""
        if not stored.startswith(CHECK_PREFIX):
            raise SeedKeyMismatch(
                f"the database's seed key check value is not one this version reads; the "
                f"seed key from {self._source} cannot be verified (is a newer release "
                "running against this database?)"
            )
        if not hmac.compare_digest(stored.encode("utf-8"), self._check.encode("utf-8")):
            raise SeedKeyMismatch(
                f"the seed key from {self._source} is not the key this cluster's seeds are "
                "sealed with (its check value differs from the database's): give every "
                "replica the cluster's seed key Secret"
            )

    def __repr__(self) -> str:
        return f"SeedKey(source={self._source!r})"


def _unreadable(path: Path, error: OSError) -> SeedKeyFileError:
    return SeedKeyFileError(
        f"cannot read the seed key file {path}: {error.strerror}",
        reason=SeedKeyFileProblem.UNREADABLE,
        path=path,
    )


def _unwritable(path: Path, error: OSError) -> SeedKeyFileError:
    return SeedKeyFileError(
        f"cannot write the seed key file {path}: {error.strerror}",
        reason=SeedKeyFileProblem.UNWRITABLE,
        path=path,
    )


def _malformed(path: Path, detail: str) -> SeedKeyFileError:
    return SeedKeyFileError(
        f"the seed key file {path} {detail}: it holds one line, the {SEED_KEY_SIZE}-byte key "
        f"as unpadded base64url ({SEED_KEY_TEXT_LENGTH} characters), as `{KEY_COMMAND} FILE` "
        "writes it",
        reason=SeedKeyFileProblem.MALFORMED,
        path=path,
    )


def _too_open_message(path: Path, mode: int, *, group_may_read: bool) -> str:
    """What `load` says about a file `too_open_bits` refused: its mode and the fix."""
    fix = (
        f"a root-owned key file may be readable by its group and no more: `chmod 440 {path}` "
        "(on Kubernetes, the Secret volume's defaultMode 0440)"
        if group_may_read
        else f"make it owner-only with `chmod 600 {path}`"
    )
    return (
        f"the seed key file {path} is readable or writable by others "
        f"(mode {stat.S_IMODE(mode):04o}); {fix}, and treat the key as disclosed if others "
        "may have read it"
    )
