"""Ed25519 signing keys: generation, loading from a file or an environment variable, key ids.

Key material never reaches a `repr`, a log line or an error message: errors name the file or the
variable, never its content.

The key id follows the securesystemslib / in-toto convention, so that envelopes interoperate with
their tooling: the sha256 hex digest of the canonical JSON
`{"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": <raw public key hex>}}`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NewType

import rfc8785
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gpuemu_ci.errors import UsageError
from gpuemu_ci.files import atomic_write, cannot_write, is_callers_fault, read_bounded

KEY_FILE_LIMIT = 1 << 20  # a PEM key is a few hundred bytes

KeyId = NewType("KeyId", str)
"""A securesystemslib-compatible key id: 64 lowercase hex characters."""

PRIVATE_KEY_MODE = 0o600
PUBLIC_KEY_SUFFIX = ".pub"


class KeyLoadError(UsageError):
    """A key file or variable is missing, unreadable, or not the kind of key expected (exit 2)."""


def keyid_for(public_key: Ed25519PublicKey) -> KeyId:
    """The securesystemslib default key id of an Ed25519 public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    # For these ASCII-only keys RFC 8785 and securesystemslib's canonical JSON give the same bytes.
    document: dict[str, Any] = {"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": raw.hex()}}
    return KeyId(hashlib.sha256(rfc8785.dumps(document)).hexdigest())


def fingerprint_for(keyid: str) -> str:
    """A short form for people: `ed25519:` and the first 16 hex characters of the key id."""
    return f"ed25519:{keyid[:16]}"


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key with its key id."""

    key: Ed25519PublicKey = field(compare=False)
    keyid: KeyId

    @classmethod
    def from_key(cls, key: Ed25519PublicKey) -> PublicKey:
        """The public key with its key id computed from the key itself."""
        return cls(key=key, keyid=keyid_for(key))

    @property
    def fingerprint(self) -> str:
        """Short human-readable fingerprint, e.g. `ed25519:0123456789abcdef`."""
        return fingerprint_for(self.keyid)

    def pem(self) -> bytes:
        """PEM SubjectPublicKeyInfo, the form distributed to verifiers."""
        return self.key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key. Its repr shows only the key id."""

    private_key: Ed25519PrivateKey = field(repr=False, compare=False)
    public: PublicKey

    def __repr__(self) -> str:
        return f"SigningKey(keyid={self.public.keyid!r})"

    @classmethod
    def from_key(cls, key: Ed25519PrivateKey) -> SigningKey:
        """The signing key for an Ed25519 private key, with its public half and key id."""
        return cls(private_key=key, public=PublicKey.from_key(key.public_key()))

    @property
    def keyid(self) -> KeyId:
        """The key id signatures made with this key carry (its public key's)."""
        return self.public.keyid

    def private_pem(self) -> bytes:
        """Unencrypted PEM PKCS#8; write it only through `write_keypair`."""
        return self.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def generate() -> SigningKey:
    """A fresh random Ed25519 key."""
    return SigningKey.from_key(Ed25519PrivateKey.generate())


def public_key_path(private_path: Path) -> Path:
    """Where `keygen` puts the public half: KEY -> KEY.pub."""
    return private_path.with_name(private_path.name + PUBLIC_KEY_SUFFIX)


def load_private_key_pem(data: bytes, source: str) -> SigningKey:
    """Parse a PEM PKCS#8 Ed25519 private key; `source` names where it came from in errors."""
    if b"PRIVATE KEY" not in data:
        if b"PUBLIC KEY" in data:
            raise KeyLoadError(f"{source} holds a public key; signing needs the private key")
        raise KeyLoadError(f"{source} is not a PEM private key (expected '-----BEGIN PRIVATE KEY-----')")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise KeyLoadError(f"{source} holds an encrypted private key; give it unencrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        # The exception text could quote the input; say what was expected instead.
        raise KeyLoadError(f"{source} is not a readable PEM PKCS#8 private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyLoadError(f"{source} holds a {type(key).__name__}; gpuemu-ci signs with Ed25519 keys")
    return SigningKey.from_key(key)


def load_private_key_file(path: Path) -> SigningKey:
    """Load the private key from a file."""
    return load_private_key_pem(_read(path, "private key"), f"key file {path}")


def load_private_key_env(name: str, env: Mapping[str, str]) -> SigningKey:
    """Load the private key from the PEM text in environment variable `name`."""
    text = env.get(name, "")
    if not text.strip():
        raise KeyLoadError(
            f"environment variable {name} is unset or empty (secrets are not passed to workflows"
            " started from forks: sign with --unsigned there)"
        )
    text = text.strip()
    if "\n" not in text and "\\n" in text:
        # A PEM pasted into a single-line secret store with literal "\n" escapes.
        text = text.replace("\\n", "\n")
    return load_private_key_pem(text.encode("utf-8", "replace") + b"\n", f"environment variable {name}")


def load_public_key_file(path: Path) -> PublicKey:
    """Load an Ed25519 public key (PEM SubjectPublicKeyInfo)."""
    data = _read(path, "public key")
    if b"PRIVATE KEY" in data:
        raise KeyLoadError(f"{path} holds a private key; verify needs the public key ({path.name}.pub)")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise KeyLoadError(
            f"{path} is not a PEM public key (expected '-----BEGIN PUBLIC KEY-----')"
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyLoadError(f"{path} holds a {type(key).__name__}; gpuemu-ci verifies Ed25519 keys")
    return PublicKey.from_key(key)


def write_keypair(path: Path, key: SigningKey, *, force: bool = False) -> tuple[Path, Path]:
    """Write KEY (private, mode 0600 from the moment it exists) and KEY.pub; return both paths.

    Without `force`, refuses (KeyLoadError) when either file exists, before writing anything.
    """
    pub_path = public_key_path(path)
    if not force:
        existing = [str(p) for p in (path, pub_path) if os.path.lexists(p)]
        if existing:
            verb = "exists" if len(existing) == 1 else "exist"
            raise KeyLoadError(f"{' and '.join(existing)} already {verb}; pass --force to replace them")
    _write_new_file(path, key.private_pem(), PRIVATE_KEY_MODE, replace=force)
    try:
        _write_new_file(pub_path, key.public.pem(), 0o644, replace=force)
    except BaseException:
        if not force:
            # Don't leave half a key pair behind when this call created the private key.
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    return path, pub_path


def _write_new_file(path: Path, data: bytes, mode: int, *, replace: bool) -> None:
    """Create (or with `replace`, replace) a file whose permissions are `mode` from the first byte on."""
    try:
        atomic_write(path, data, mode=mode, exclusive=not replace)
    except FileExistsError:
        raise KeyLoadError(f"{path} already exists; pass --force to replace") from None
    except OSError as e:
        if not is_callers_fault(e):  # a full disk is the machine's (exit 3), as in every command
            raise cannot_write(path, e) from None
        raise KeyLoadError(f"cannot write {path}: {e.strerror}") from None


def _read(path: Path, what: str) -> bytes:
    if not path.exists():
        raise KeyLoadError(f"{what} file {path} does not exist")
    if path.is_dir():
        raise KeyLoadError(f"{what} file {path} is a directory")
    try:
        return read_bounded(path, f"{what} file", KEY_FILE_LIMIT)
    except UsageError as e:
        raise KeyLoadError(e.message) from None
