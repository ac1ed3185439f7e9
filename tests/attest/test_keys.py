"""Signing keys: files created 0600 from the first instant, loading errors, key ids, no leaks."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from securesystemslib.signer import SSlibKey

from gpuemu_ci.attest import keys
from gpuemu_ci.errors import ExitCode

# RFC 8032 section 7.1, test 1.
RFC8032_SECRET = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"


@pytest.fixture
def umask() -> Iterator[Callable[[int], int]]:
    """`umask(mask)` sets the process umask for one test; the previous one is restored afterwards."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield os.umask
    os.umask(previous)


@pytest.fixture
def creations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Record (path, flags, mode the new file has right after os.open) for every file created.

    The real os.open runs; the mode is read with fstat on the fresh descriptor before anything is
    written, i.e. at the moment the file first exists.
    """
    records: list[tuple[str, int, int]] = []
    real_open = os.open

    def spying_open(
        path: str | os.PathLike[str], flags: int, mode: int = 0o777, *args: Any, **kwargs: Any
    ) -> int:
        fd = real_open(path, flags, mode, *args, **kwargs)
        if flags & os.O_CREAT:
            records.append((os.fspath(path), flags, stat.S_IMODE(os.fstat(fd).st_mode)))
        return fd

    monkeypatch.setattr(os, "open", spying_open)
    return records


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class TestPrivateKeyFile:
    @pytest.mark.parametrize("mask", [0o000, 0o022, 0o002])
    def test_private_key_is_0600_from_the_moment_it_exists(
        self, tmp_path: Path, umask: Callable[[int], int], creations: list, mask: int
    ) -> None:
        umask(mask)
        key_path = tmp_path / "signing.key"
        keys.write_keypair(key_path, keys.generate())

        # The key is written to a private temporary file that is then linked into place (never replaced
        # if it exists): the file that becomes the key is 0600 from its creation on.
        private_creations = [
            c for c in creations if Path(c[0]).name.startswith(".signing.key.") and ".pub." not in c[0]
        ]
        assert len(private_creations) == 1
        _, flags, mode_at_creation = private_creations[0]
        assert flags & os.O_EXCL and flags & os.O_CREAT
        assert mode_at_creation == 0o600
        assert mode_of(key_path) == 0o600
        assert mode_of(key_path.with_name("signing.key.pub")) & 0o777 == 0o644 & ~mask

    def test_force_replaces_through_a_file_that_is_0600_from_creation(
        self, tmp_path: Path, umask: Callable[[int], int], creations: list
    ) -> None:
        umask(0)
        key_path = tmp_path / "signing.key"
        first = keys.generate()
        keys.write_keypair(key_path, first)
        creations.clear()

        second = keys.generate()
        keys.write_keypair(key_path, second, force=True)
        private_creations = [c for c in creations if not c[0].endswith(".pub") and ".pub." not in c[0]]
        assert private_creations, creations
        assert all(mode == 0o600 and flags & os.O_EXCL for _, flags, mode in private_creations)
        assert mode_of(key_path) == 0o600
        assert keys.load_private_key_file(key_path).keyid == second.keyid
        assert sorted(p.name for p in tmp_path.iterdir()) == ["signing.key", "signing.key.pub"]

    @pytest.mark.parametrize("existing", ["signing.key", "signing.key.pub"])
    def test_refuses_to_overwrite_without_force(self, tmp_path: Path, existing: str) -> None:
        (tmp_path / existing).write_text("precious")
        with pytest.raises(keys.KeyLoadError, match="--force") as info:
            keys.write_keypair(tmp_path / "signing.key", keys.generate())
        assert info.value.exit_code == ExitCode.USAGE
        assert (tmp_path / existing).read_text() == "precious"
        assert [p.name for p in tmp_path.iterdir()] == [existing]

    def test_does_not_follow_a_symlink_planted_at_the_key_path(self, tmp_path: Path) -> None:
        victim = tmp_path / "victim"
        victim.write_text("unchanged")
        (tmp_path / "signing.key").symlink_to(victim)
        with pytest.raises(keys.KeyLoadError):
            keys.write_keypair(tmp_path / "signing.key", keys.generate())
        keys.write_keypair(tmp_path / "signing.key", keys.generate(), force=True)
        assert victim.read_text() == "unchanged"
        assert not (tmp_path / "signing.key").is_symlink()

    def test_round_trip(self, tmp_path: Path) -> None:
        key = keys.generate()
        private_path, public_path = keys.write_keypair(tmp_path / "k", key)
        assert keys.load_private_key_file(private_path).keyid == key.keyid
        assert keys.load_public_key_file(public_path) == key.public
        assert public_path.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
        assert private_path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


class TestKeyId:
    def test_follows_the_securesystemslib_convention(self) -> None:
        private = ed25519.Ed25519PrivateKey.from_private_bytes(RFC8032_SECRET)
        public = private.public_key()
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        assert raw.hex() == RFC8032_PUBLIC
        assert keys.keyid_for(public) == SSlibKey.from_crypto(public).keyid

    def test_random_keys_agree_with_securesystemslib(self) -> None:
        for _ in range(5):
            key = keys.generate()
            assert key.keyid == SSlibKey.from_crypto(key.public.key).keyid

    def test_fingerprint_is_a_prefix_of_the_key_id(self) -> None:
        key = keys.generate()
        assert key.public.fingerprint == "ed25519:" + key.keyid[:16]


class TestLoading:
    def test_private_key_never_in_repr(self) -> None:
        key = keys.generate()
        body = b"".join(key.private_pem().splitlines()[1:-1]).decode()
        assert body not in repr(key)
        assert key.keyid in repr(key)

    def test_env_variable(self) -> None:
        key = keys.generate()
        loaded = keys.load_private_key_env("SIGNING", {"SIGNING": key.private_pem().decode()})
        assert loaded.keyid == key.keyid

    def test_env_variable_with_literal_newline_escapes(self) -> None:
        key = keys.generate()
        flattened = key.private_pem().decode().strip().replace("\n", "\\n")
        assert keys.load_private_key_env("K", {"K": flattened}).keyid == key.keyid

    @pytest.mark.parametrize("value", [None, "", "   \n"])
    def test_env_variable_missing_points_at_unsigned(self, value: str | None) -> None:
        env = {} if value is None else {"K": value}
        with pytest.raises(keys.KeyLoadError, match="--unsigned"):
            keys.load_private_key_env("K", env)

    def test_errors_never_quote_the_key(self) -> None:
        key = keys.generate()
        pem = key.private_pem().decode()
        body = pem.splitlines()[1]
        mangled = pem.replace(body, body[:-4] + "!!!!")
        with pytest.raises(keys.KeyLoadError) as info:
            keys.load_private_key_env("K", {"K": mangled})
        assert body[:20] not in info.value.diagnostics()
        assert "K" in info.value.diagnostics()

    def test_public_key_where_private_expected(self, tmp_path: Path) -> None:
        path = tmp_path / "k.pub"
        path.write_bytes(keys.generate().public.pem())
        with pytest.raises(keys.KeyLoadError, match="public key"):
            keys.load_private_key_file(path)

    def test_private_key_where_public_expected(self, tmp_path: Path) -> None:
        path = tmp_path / "k"
        path.write_bytes(keys.generate().private_pem())
        with pytest.raises(keys.KeyLoadError, match=r"k\.pub"):
            keys.load_public_key_file(path)

    def test_other_algorithms_are_refused(self, tmp_path: Path) -> None:
        other = ec.generate_private_key(ec.SECP256R1())
        private = tmp_path / "ec"
        private.write_bytes(
            other.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        public = tmp_path / "ec.pub"
        public.write_bytes(
            other.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        with pytest.raises(keys.KeyLoadError, match="Ed25519"):
            keys.load_private_key_file(private)
        with pytest.raises(keys.KeyLoadError, match="Ed25519"):
            keys.load_public_key_file(public)

    def test_encrypted_private_key_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "enc"
        path.write_bytes(
            keys.generate().private_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(b"passphrase"),
            )
        )
        with pytest.raises(keys.KeyLoadError, match="encrypted"):
            keys.load_private_key_file(path)

    @pytest.mark.parametrize(
        "content", [None, b"", b"hello", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"]
    )
    def test_unreadable_public_key(self, tmp_path: Path, content: bytes | None) -> None:
        path = tmp_path / "key.pub"
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(keys.KeyLoadError, match=re.escape(str(path))):
            keys.load_public_key_file(path)
