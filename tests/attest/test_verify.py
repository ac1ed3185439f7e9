"""verify_report: signature first, then the expectations, each failure with its own exit code."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.attest import dsse, keys
from gpuemu_ci.attest.verify_policy import (
    AllOf,
    ArtifactDigest,
    CheckKind,
    CommitIs,
    MaxAge,
    RepoIdIs,
    RepoIs,
    VerifyExit,
    parse_duration,
    verify_report,
)


def keyring(key: keys.SigningKey) -> dict[str, Any]:
    return {key.keyid: key.public.key}


def value_span(text: str, needle: str) -> range:
    """Positions of the JSON string value that follows `"needle": "`."""
    start = text.index(f'"{needle}": "') + len(needle) + 5
    return range(start, text.index('"', start))


class TestSignature:
    def test_a_fresh_report_verifies(
        self, signing_key: keys.SigningKey, make_envelope: Any, sample: Any
    ) -> None:
        outcome = verify_report(make_envelope(signing_key), keyring(signing_key), None)
        assert outcome.exit is VerifyExit.VALID
        assert outcome.keyids == (signing_key.keyid,)
        assert outcome.claims is not None
        assert (outcome.claims.repo, outcome.claims.commit, outcome.claims.verdict) == (
            "octo/kernels",
            sample.commit,
            "failed",
        )

    def test_wrong_key(
        self, signing_key: keys.SigningKey, other_key: keys.SigningKey, make_envelope: Any
    ) -> None:
        outcome = verify_report(make_envelope(signing_key), keyring(other_key), None)
        assert outcome.exit is VerifyExit.BAD_SIGNATURE
        assert outcome.claims is None

    def test_unsigned_report(self, signing_key: keys.SigningKey, make_envelope: Any) -> None:
        outcome = verify_report(make_envelope(None), keyring(signing_key), None)
        assert outcome.exit is VerifyExit.BAD_SIGNATURE
        assert outcome.message.startswith("unsigned")

    @pytest.mark.slow
    def test_every_single_byte_change_is_refused(
        self, signing_key: keys.SigningKey, make_envelope: Any
    ) -> None:
        data = make_envelope(signing_key)
        text = data.decode()
        fields = {name: value_span(text, name) for name in ("payload", "payloadType", "keyid", "sig")}
        expected = {
            "payloadType": {VerifyExit.MALFORMED},
            # A changed character is either still valid (bad signature: another key id, other
            # bytes) or breaks the JSON string or the canonical base64 (malformed).
            "keyid": {VerifyExit.BAD_SIGNATURE, VerifyExit.MALFORMED},
            "payload": {VerifyExit.BAD_SIGNATURE, VerifyExit.MALFORMED},
            "sig": {VerifyExit.BAD_SIGNATURE, VerifyExit.MALFORMED},
        }
        seen: dict[str, set[VerifyExit]] = {name: set() for name in fields}
        for position in range(len(data)):
            for flip in (0x01, 0x20):
                changed = bytearray(data)
                changed[position] ^= flip
                outcome = verify_report(bytes(changed), keyring(signing_key), None)
                field = next((name for name, span in fields.items() if position in span), None)
                assert outcome.exit is not VerifyExit.VALID, (position, flip)
                if field is None:
                    assert outcome.exit is VerifyExit.MALFORMED, (position, flip, outcome.message)
                else:
                    assert outcome.exit in expected[field], (field, position, flip, outcome.message)
                    seen[field].add(outcome.exit)
        assert all(VerifyExit.BAD_SIGNATURE in seen[name] for name in ("payload", "sig", "keyid"))

    def test_payload_is_verified_as_transmitted_not_recanonicalised(
        self, signing_key: keys.SigningKey, make_envelope: Any
    ) -> None:
        # Another signer may serialise differently; the bytes that were signed are what counts.
        envelope = json.loads(make_envelope(signing_key))
        statement = json.loads(base64.b64decode(envelope["payload"]))
        pretty = json.dumps(statement, indent=4).encode()
        resigned = dsse.sign(pretty, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
        assert verify_report(resigned.to_json(), keyring(signing_key), None).exit is VerifyExit.VALID
        envelope["payload"] = base64.b64encode(pretty).decode()  # same statement, other bytes
        assert (
            verify_report(json.dumps(envelope).encode(), keyring(signing_key), None).exit
            is VerifyExit.BAD_SIGNATURE
        )


class TestSignedButNotOurs:
    @pytest.mark.parametrize(
        ("edit", "message"),
        [
            (lambda s: s.update(predicateType="https://slsa.dev/provenance/v1"), "predicateType"),
            (lambda s: s.update(_type="https://in-toto.io/Statement/v0.1"), "_type"),
            (lambda s: s["predicate"]["run"].update(commit="ff" * 20), "gitCommit"),
            (lambda s: s["predicate"]["run"].update(issued_at="yesterday"), "issued_at"),
            (lambda s: s["predicate"]["run"].update(issued_at="2026-11-22T10:00:00"), "no time zone"),
            (lambda s: s["predicate"]["run"].update(issued_at="0001-01-01T00:00:00+01:00"), "out of range"),
            (lambda s: s["predicate"]["run"].pop("repo"), "repo"),
        ],
    )
    def test_malformed_statement_after_a_valid_signature(
        self, signing_key: keys.SigningKey, make_envelope: Any, edit: Any, message: str
    ) -> None:
        outcome = verify_report(make_envelope(signing_key, statement_edit=edit), keyring(signing_key), None)
        assert outcome.exit is VerifyExit.MALFORMED
        assert message in outcome.message


class TestExpectations:
    @pytest.fixture
    def claims(self, signing_key: keys.SigningKey, make_envelope: Any) -> Any:
        issued = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
        outcome = verify_report(make_envelope(signing_key, issued_at=issued), keyring(signing_key), None)
        return outcome.claims

    def test_repo(self, claims: Any) -> None:
        assert RepoIs("Octo/Kernels").check(claims)[0].ok
        (result,) = RepoIs("octo/other").check(claims)
        assert not result.ok and result.kind is CheckKind.REPO
        assert result.actual == "octo/kernels" and "octo/other" in result.message

    def test_repo_id(self, claims: Any) -> None:
        assert RepoIdIs("42").check(claims)[0].ok
        assert not RepoIdIs("43").check(claims)[0].ok

    def test_commit(self, claims: Any, sample: Any) -> None:
        assert CommitIs(sample.commit.upper()).check(claims)[0].ok
        (result,) = CommitIs(sample.other_commit).check(claims)
        assert not result.ok and result.kind is CheckKind.COMMIT

    def test_max_age(self, claims: Any) -> None:
        issued = claims.issued_at
        assert MaxAge(timedelta(days=2), now=issued + timedelta(days=1)).check(claims)[0].ok
        assert MaxAge(timedelta(days=1), now=issued + timedelta(days=1)).check(claims)[0].ok
        (expired,) = MaxAge(timedelta(days=1), now=issued + timedelta(days=1, seconds=1)).check(claims)
        assert not expired.ok and "expired" in expired.message

    def test_report_from_the_future_is_refused(self, claims: Any) -> None:
        (result,) = MaxAge(timedelta(days=7), now=claims.issued_at - timedelta(hours=1)).check(claims)
        assert not result.ok and "future" in result.message
        assert MaxAge(timedelta(days=7), now=claims.issued_at - timedelta(minutes=1)).check(claims)[0].ok

    def test_artifacts(self, claims: Any, workdir: Path) -> None:
        config = workdir / "gpuemu.toml"
        assert ArtifactDigest.from_file(config).check(claims)[0].ok
        assert ArtifactDigest.from_file(workdir / "kernels" / "gelu.cu").check(claims)[0].ok
        config.write_bytes(config.read_bytes() + b"# edited\n")
        (changed,) = ArtifactDigest.from_file(config).check(claims)
        assert not changed.ok and "differs from subject gpuemu.toml" in changed.message
        stranger = workdir / "notes.txt"
        stranger.write_text("hello")
        (unknown,) = ArtifactDigest.from_file(stranger).check(claims)
        assert not unknown.ok and "not among" in unknown.message

    def test_artifact_under_another_name_must_match_by_name_first(self, claims: Any, workdir: Path) -> None:
        # A file named like a subject is compared with that subject, not with any digest.
        imposter = workdir / "elsewhere" / "gpuemu.toml"
        imposter.parent.mkdir()
        imposter.write_bytes((workdir / "kernels" / "gelu.cu").read_bytes())
        assert not ArtifactDigest.from_file(imposter).check(claims)[0].ok

    def test_all_of_runs_every_check_and_refuses_an_empty_list(self, claims: Any, sample: Any) -> None:
        with pytest.raises(ValueError, match="at least one"):
            AllOf(())
        results = AllOf((RepoIs("a/b"), CommitIs(sample.commit), CommitIs(sample.other_commit))).check(claims)
        assert [r.ok for r in results] == [False, True, False]

    def test_verify_report_maps_failures_to_exit_2(
        self, signing_key: keys.SigningKey, make_envelope: Any, sample: Any
    ) -> None:
        data = make_envelope(signing_key)
        good = AllOf((RepoIs("octo/kernels"), CommitIs(sample.commit)))
        assert verify_report(data, keyring(signing_key), good).exit is VerifyExit.VALID
        bad = AllOf((RepoIs("octo/kernels"), CommitIs(sample.other_commit)))
        outcome = verify_report(data, keyring(signing_key), bad)
        assert outcome.exit is VerifyExit.EXPECTATION_MISMATCH
        assert [r.kind for r in outcome.failures] == [CheckKind.COMMIT]

    def test_policy_is_not_consulted_when_the_signature_fails(
        self, signing_key: keys.SigningKey, other_key: keys.SigningKey, make_envelope: Any
    ) -> None:
        class Exploding:
            def check(self, claims: Any) -> Any:
                raise AssertionError("policy ran before the signature held")

        outcome = verify_report(make_envelope(other_key), keyring(signing_key), Exploding())
        assert outcome.exit is VerifyExit.BAD_SIGNATURE


class TestDurations:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        [("7d", 604800), ("12h", 43200), ("30m", 1800), ("3600s", 3600), ("1w", 604800), ("1d12h", 129600)],
    )
    def test_accepted(self, text: str, seconds: int) -> None:
        assert parse_duration(text) == timedelta(seconds=seconds)

    @pytest.mark.parametrize("text", ["", "7", "d", "7x", "-1d", "1.5h", "7d garbage", "h12", "9" * 30 + "w"])
    def test_refused(self, text: str) -> None:
        with pytest.raises(ValueError, match="duration"):
            parse_duration(text)
