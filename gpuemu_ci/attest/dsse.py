"""DSSE envelopes (https://github.com/secure-systems-lab/dsse): bytes in, bytes out.

This module signs and verifies *exact bytes*. It never parses or re-serialises the payload, and
knows nothing about what the payload claims; that is `statement` and `verify_policy`'s job, and
it runs only after `verify` has returned.

Decoding is strict on purpose, so that any change to an envelope is noticed instead of being
normalised away: duplicate JSON keys, unknown fields, mixed or non-canonical base64 (non-zero
padding bits) and a payloadType other than the expected one are all rejected as malformed.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PAYLOAD_TYPE_IN_TOTO = "application/vnd.in-toto+json"
"""The payloadType of an in-toto attestation (in-toto attestation spec, envelope layer)."""

_ENVELOPE_FIELDS = frozenset({"payload", "payloadType", "signatures"})
_SIGNATURE_FIELDS = frozenset({"keyid", "sig"})
_STANDARD_B64 = re.compile(r"[A-Za-z0-9+/]*")
_URLSAFE_B64 = re.compile(r"[A-Za-z0-9_-]*")


class DsseError(Exception):
    """Base class of envelope failures; the message is meant for a person."""


class MalformedEnvelopeError(DsseError):
    """The bytes are not a well-formed DSSE envelope of the expected payload type."""


class SignatureError(DsseError):
    """No signature in the envelope verifies with the given keys."""


class UnsignedEnvelopeError(SignatureError):
    """The envelope carries no signature at all (a report produced without a key)."""


@dataclass(frozen=True)
class Signature:
    """One DSSE signature: `keyid` is an unauthenticated hint, `sig` the raw signature bytes."""

    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    """A DSSE envelope holding the exact payload bytes that were (or will be) signed."""

    payload: bytes
    payload_type: str
    signatures: tuple[Signature, ...]

    def to_json(self) -> bytes:
        """Serialise as the DSSE JSON envelope (standard base64, UTF-8, trailing newline)."""
        document = {
            "payload": _b64encode(self.payload),
            "payloadType": self.payload_type,
            "signatures": [{"keyid": s.keyid, "sig": _b64encode(s.sig)} for s in self.signatures],
        }
        return (json.dumps(document, indent=2, ensure_ascii=True) + "\n").encode("ascii")

    @classmethod
    def from_json(cls, data: bytes, *, payload_type: str | None = PAYLOAD_TYPE_IN_TOTO) -> Envelope:
        """Parse an envelope strictly; `payload_type` (unless None) must match exactly.

        Raises MalformedEnvelopeError naming what is wrong.
        """
        try:
            document = strict_json_loads(data)
        except ValueError as e:
            raise MalformedEnvelopeError(str(e)) from None
        if not isinstance(document, dict):
            raise MalformedEnvelopeError("the envelope must be a JSON object")
        _check_fields(document, _ENVELOPE_FIELDS, required=_ENVELOPE_FIELDS, where="envelope")

        found_type = document["payloadType"]
        if not isinstance(found_type, str):
            raise MalformedEnvelopeError("payloadType must be a string")
        if payload_type is not None and found_type != payload_type:
            raise MalformedEnvelopeError(f"payloadType is {found_type!r}, expected {payload_type!r}")
        payload = b64decode_strict(document["payload"], "payload")

        raw_signatures = document["signatures"]
        if not isinstance(raw_signatures, list):
            raise MalformedEnvelopeError("signatures must be a list")
        signatures = []
        for index, raw in enumerate(raw_signatures):
            where = f"signatures[{index}]"
            if not isinstance(raw, dict):
                raise MalformedEnvelopeError(f"{where} must be an object")
            _check_fields(raw, _SIGNATURE_FIELDS, required=frozenset({"sig"}), where=where)
            keyid = raw.get("keyid", "")
            if not isinstance(keyid, str):
                raise MalformedEnvelopeError(f"{where}.keyid must be a string")
            signatures.append(Signature(keyid=keyid, sig=b64decode_strict(raw["sig"], f"{where}.sig")))
        return cls(payload=payload, payload_type=found_type, signatures=tuple(signatures))


@dataclass(frozen=True)
class Verified:
    """What a successful `verify` vouches for: these payload bytes, signed by these key ids."""

    payload: bytes
    payload_type: str
    keyids: tuple[str, ...]


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSEv1 Pre-Authentication Encoding; lengths are byte lengths, not character counts."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def sign(payload: bytes, payload_type: str, key: Ed25519PrivateKey, keyid: str) -> Envelope:
    """Sign `payload` exactly as given and wrap it in an envelope with one signature."""
    signature = key.sign(pae(payload_type, payload))
    return Envelope(payload=payload, payload_type=payload_type, signatures=(Signature(keyid, signature),))


def unsigned(payload: bytes, payload_type: str) -> Envelope:
    """An envelope with no signatures (used when no signing key is available)."""
    return Envelope(payload=payload, payload_type=payload_type, signatures=())


def verify(envelope: Envelope, keys: Mapping[str, Ed25519PublicKey], threshold: int = 1) -> Verified:
    """Verify the envelope's signatures over PAE(payloadType, payload) with `keys` (keyid -> key).

    A signature with a non-empty keyid is only tried against the key with that id (a changed keyid
    therefore fails rather than being ignored); one with an empty keyid is tried against every key.
    At least `threshold` distinct keys must verify. Raises UnsignedEnvelopeError when there is no
    signature at all and SignatureError otherwise.
    """
    if threshold < 1:
        raise ValueError("threshold must be at least 1")
    if not keys:
        raise ValueError("no verification keys given")
    if not envelope.signatures:
        raise UnsignedEnvelopeError("the report is unsigned: the envelope carries no signature")

    message = pae(envelope.payload_type, envelope.payload)
    accepted: list[str] = []
    unknown: list[str] = []
    for signature in envelope.signatures:
        candidates = [signature.keyid] if signature.keyid else list(keys)
        for keyid in candidates:
            key = keys.get(keyid)
            if key is None:
                unknown.append(signature.keyid)
                continue
            if keyid in accepted:
                continue
            try:
                key.verify(signature.sig, message)
            except InvalidSignature:
                continue
            accepted.append(keyid)
            break
    if len(accepted) >= threshold:
        return Verified(envelope.payload, envelope.payload_type, tuple(accepted))
    if unknown and len(unknown) == len(envelope.signatures):
        raise SignatureError(
            f"signed by key id {', '.join(sorted(set(unknown)))}, which is not the given key"
            f" ({', '.join(sorted(keys))}): wrong key, or the keyid was altered"
        )
    raise SignatureError(
        f"{len(accepted)} of the required {threshold} signature(s) verified:"
        " the payload, payloadType or signature was altered, or it was signed with another key"
    )


def b64decode_strict(value: Any, what: str) -> bytes:
    """Decode standard or URL-safe base64 (padding optional) and insist on the canonical form."""
    if not isinstance(value, str):
        raise MalformedEnvelopeError(f"{what} must be a base64 string")
    body = value.rstrip("=")
    padding = len(value) - len(body)
    if _STANDARD_B64.fullmatch(body):
        standard = body
    elif _URLSAFE_B64.fullmatch(body):
        standard = body.replace("-", "+").replace("_", "/")
    else:
        raise MalformedEnvelopeError(f"{what} is not base64 (unexpected character)")
    if len(body) % 4 == 1 or padding > 2 or (padding and len(value) % 4):
        raise MalformedEnvelopeError(f"{what} is not base64 (bad length or padding)")
    try:
        decoded = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except binascii.Error:
        raise MalformedEnvelopeError(f"{what} is not base64") from None
    # Bits past the last byte must be zero; otherwise two different strings decode alike and
    # a one-character change to the envelope would go unnoticed.
    if base64.b64encode(decoded).decode("ascii").rstrip("=") != standard:
        raise MalformedEnvelopeError(f"{what} is not canonical base64 (non-zero padding bits)")
    return decoded


def strict_json_loads(data: bytes) -> Any:
    """Parse UTF-8 JSON, refusing duplicate keys and NaN/Infinity; ValueError says what is wrong."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except _DuplicateKeyError as e:
        raise ValueError(f"duplicate JSON key {e.key!r}") from None
    except _ConstantError as e:
        raise ValueError(f"non-standard JSON constant {e.constant}") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _check_fields(
    obj: dict[str, Any], allowed: frozenset[str], *, required: frozenset[str], where: str
) -> None:
    missing = sorted(required - obj.keys())
    if missing:
        raise MalformedEnvelopeError(f"{where} is missing {', '.join(missing)}")
    extra = sorted(obj.keys() - allowed)
    if extra:
        raise MalformedEnvelopeError(f"{where} has unknown field(s) {', '.join(map(repr, extra))}")


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _ConstantError(ValueError):
    def __init__(self, constant: str) -> None:
        super().__init__(constant)
        self.constant = constant


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key)
        result[key] = value
    return result


def _reject_constant(constant: str) -> Any:
    raise _ConstantError(constant)
