"""DSSE envelopes: PAE, strict decoding, signature checks, and interoperability with securesystemslib."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from gpuemu_ci.attest import dsse, keys

PAYLOAD = b'{"hello": "world",  "spacing": "kept as is"}'


def keyring(*signing: keys.SigningKey) -> dict[str, Ed25519PublicKey]:
    return {k.keyid: k.public.key for k in signing}


def envelope_dict(envelope: dsse.Envelope) -> dict:
    result: dict = json.loads(envelope.to_json())
    return result


class TestPae:
    def test_matches_the_dsse_specification_example(self) -> None:
        # protocol.md test vector of secure-systems-lab/dsse.
        assert (
            dsse.pae("http://example.com/HelloWorld", b"hello world")
            == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        )

    def test_lengths_are_byte_lengths(self) -> None:
        assert dsse.pae("t\u00e9", "\u00e9".encode()) == b"DSSEv1 3 t\xc3\xa9 2 \xc3\xa9"


class TestRoundTrip:
    def test_verify_returns_the_exact_signed_bytes(self, signing_key: keys.SigningKey) -> None:
        envelope = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        parsed = dsse.Envelope.from_json(envelope.to_json())
        verified = dsse.verify(parsed, keyring(signing_key))
        assert verified.payload == PAYLOAD
        assert verified.keyids == (signing_key.keyid,)

    def test_url_safe_and_unpadded_base64_are_accepted(self, signing_key: keys.SigningKey) -> None:
        envelope = dsse.sign(
            b"\xfb\xff" * 7, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid
        )
        document = envelope_dict(envelope)
        document["payload"] = base64.urlsafe_b64encode(envelope.payload).decode().rstrip("=")
        document["signatures"][0]["sig"] = base64.urlsafe_b64encode(envelope.signatures[0].sig).decode()
        assert "-" in document["payload"] or "_" in document["payload"]
        parsed = dsse.Envelope.from_json(json.dumps(document).encode())
        assert dsse.verify(parsed, keyring(signing_key)).payload == b"\xfb\xff" * 7


class TestStrictDecoding:
    @pytest.fixture
    def good(self, signing_key: keys.SigningKey) -> dict:
        return envelope_dict(
            dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        )

    def parse(self, document: object) -> dsse.Envelope:
        return dsse.Envelope.from_json(json.dumps(document).encode())

    def test_wrong_payload_type(self, good: dict) -> None:
        good["payloadType"] = "application/json"
        with pytest.raises(dsse.MalformedEnvelopeError, match="payloadType"):
            self.parse(good)

    @pytest.mark.parametrize("field", ["payload", "payloadType", "signatures"])
    def test_missing_field(self, good: dict, field: str) -> None:
        del good[field]
        with pytest.raises(dsse.MalformedEnvelopeError, match=f"missing {field}"):
            self.parse(good)

    def test_unknown_field(self, good: dict) -> None:
        good["comment"] = "trust me"
        with pytest.raises(dsse.MalformedEnvelopeError, match="unknown field"):
            self.parse(good)

    def test_duplicate_key(self, good: dict) -> None:
        text = json.dumps(good)
        text = text[:-1] + ', "payloadType": "application/vnd.in-toto+json"}'
        with pytest.raises(dsse.MalformedEnvelopeError, match="duplicate"):
            dsse.Envelope.from_json(text.encode())

    def test_non_canonical_base64_padding_bits(self, good: dict) -> None:
        # A 64-byte signature ends in one character with four unused bits; setting one of them
        # decodes to the same bytes in lenient decoders, so it must be refused here.
        sig = good["signatures"][0]["sig"]
        assert sig.endswith("==")
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        last = sig[-3]
        good["signatures"][0]["sig"] = sig[:-3] + alphabet[alphabet.index(last) | 1] + "=="
        assert base64.b64decode(good["signatures"][0]["sig"]) == base64.b64decode(sig)
        with pytest.raises(dsse.MalformedEnvelopeError, match="canonical"):
            self.parse(good)

    @pytest.mark.parametrize("bad", ["not base64!", "a", "abcde", "ab+_", "YQ===", "YQ=", 17])
    def test_bad_base64(self, good: dict, bad: object) -> None:
        good["payload"] = bad
        with pytest.raises(dsse.MalformedEnvelopeError, match="payload"):
            self.parse(good)

    @pytest.mark.parametrize(
        "data", [b"", b"[]", b"\xff\xfe", b'{"payload": NaN}', b"[" * 100000, b'"envelope"']
    )
    def test_not_an_envelope(self, data: bytes) -> None:
        with pytest.raises(dsse.MalformedEnvelopeError):
            dsse.Envelope.from_json(data)

    def test_signature_entry_with_unknown_field(self, good: dict) -> None:
        good["signatures"][0]["cert"] = "x"
        with pytest.raises(dsse.MalformedEnvelopeError, match=r"signatures\[0\]"):
            self.parse(good)


class TestVerify:
    def test_no_signature_is_unsigned(self) -> None:
        envelope = dsse.unsigned(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO)
        parsed = dsse.Envelope.from_json(envelope.to_json())
        assert parsed.signatures == ()
        with pytest.raises(dsse.UnsignedEnvelopeError, match="unsigned"):
            dsse.verify(parsed, {"k": keys.generate().public.key})

    def test_wrong_key(self, signing_key: keys.SigningKey, other_key: keys.SigningKey) -> None:
        envelope = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        with pytest.raises(dsse.SignatureError, match="not the given key"):
            dsse.verify(envelope, keyring(other_key))

    def test_keyid_pointing_at_the_verifier_but_signed_by_another_key(
        self, signing_key: keys.SigningKey, other_key: keys.SigningKey
    ) -> None:
        envelope = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, other_key.private_key, signing_key.keyid)
        with pytest.raises(dsse.SignatureError, match="0 of the required 1"):
            dsse.verify(envelope, keyring(signing_key))

    def test_payload_type_is_covered_by_the_signature(self, signing_key: keys.SigningKey) -> None:
        envelope = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        relabelled = dsse.Envelope(PAYLOAD, "application/json", envelope.signatures)
        with pytest.raises(dsse.SignatureError):
            dsse.verify(relabelled, keyring(signing_key))

    def test_empty_keyid_is_tried_against_every_key(
        self, signing_key: keys.SigningKey, other_key: keys.SigningKey
    ) -> None:
        envelope = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, "")
        assert dsse.verify(envelope, keyring(other_key, signing_key)).keyids == (signing_key.keyid,)

    def test_threshold_counts_distinct_keys(
        self, signing_key: keys.SigningKey, other_key: keys.SigningKey
    ) -> None:
        one = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        two = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, other_key.private_key, other_key.keyid)
        doubled = dsse.Envelope(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, one.signatures + one.signatures)
        with pytest.raises(dsse.SignatureError):
            dsse.verify(doubled, keyring(signing_key, other_key), threshold=2)
        both = dsse.Envelope(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, one.signatures + two.signatures)
        assert set(dsse.verify(both, keyring(signing_key, other_key), threshold=2).keyids) == {
            signing_key.keyid,
            other_key.keyid,
        }

    def test_threshold_below_one_is_refused(self, signing_key: keys.SigningKey) -> None:
        envelope = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        with pytest.raises(ValueError, match="threshold"):
            dsse.verify(envelope, keyring(signing_key), threshold=0)


class TestInteroperability:
    """securesystemslib's DSSE implementation, independent of ours, in both directions."""

    def test_securesystemslib_verifies_our_envelope(self, signing_key: keys.SigningKey) -> None:
        ours = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        theirs = SslibEnvelope.from_dict(json.loads(ours.to_json()))
        public = SSlibKey.from_crypto(signing_key.public.key)
        accepted = theirs.verify([public], 1)
        assert list(accepted) == [signing_key.keyid]
        assert theirs.payload == PAYLOAD

    def test_securesystemslib_rejects_our_envelope_under_another_key(
        self, signing_key: keys.SigningKey, other_key: keys.SigningKey
    ) -> None:
        ours = dsse.sign(PAYLOAD, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        theirs = SslibEnvelope.from_dict(json.loads(ours.to_json()))
        with pytest.raises(Exception, match="threshold"):
            theirs.verify([SSlibKey.from_crypto(other_key.public.key)], 1)

    def test_we_verify_an_envelope_securesystemslib_signed(self) -> None:
        signer = CryptoSigner.generate_ed25519()
        theirs = SslibEnvelope(payload=PAYLOAD, payload_type=dsse.PAYLOAD_TYPE_IN_TOTO, signatures={})
        theirs.sign(signer)
        data = json.dumps(theirs.to_dict()).encode()

        crypto_key = signer.public_key._crypto_key()
        assert isinstance(crypto_key, Ed25519PublicKey)
        public = keys.PublicKey.from_key(crypto_key)
        assert public.keyid == signer.public_key.keyid
        verified = dsse.verify(dsse.Envelope.from_json(data), {public.keyid: public.key})
        assert verified.payload == PAYLOAD

    def test_we_reject_a_securesystemslib_envelope_with_an_altered_payload(self) -> None:
        signer = CryptoSigner.generate_ed25519()
        theirs = SslibEnvelope(payload=PAYLOAD, payload_type=dsse.PAYLOAD_TYPE_IN_TOTO, signatures={})
        theirs.sign(signer)
        theirs.payload = PAYLOAD.replace(b"world", b"w0rld")
        crypto_key = signer.public_key._crypto_key()
        assert isinstance(crypto_key, Ed25519PublicKey)
        public = keys.PublicKey.from_key(crypto_key)
        envelope = dsse.Envelope.from_json(json.dumps(theirs.to_dict()).encode())
        with pytest.raises(dsse.SignatureError):
            dsse.verify(envelope, {public.keyid: public.key})
