"""`gpuemu-ci keygen | sign | verify` end to end, through click, with real keys and files."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import CryptoSigner

from gpuemu_ci.attest import keys
from tests.support_cli import CliResult, run_cli


def invoke(command: str, args: Sequence[str], env: dict[str, str] | None = None) -> CliResult:
    """Run `gpuemu-ci COMMAND ARGS` with no GITHUB_* variables from the machine running the tests."""
    clean: dict[str, str | None] = {name: None for name in os.environ if name.startswith("GITHUB_")}
    clean.update(env or {})
    return run_cli([command, *args], env=clean)


@pytest.fixture
def keypair(tmp_path: Path) -> tuple[Path, Path]:
    result = invoke("keygen", ["-o", str(tmp_path / "signing.key")])
    assert result.exit_code == 0, result.output
    return tmp_path / "signing.key", tmp_path / "signing.key.pub"


@pytest.fixture
def report(workdir: Path, keypair: tuple[Path, Path]) -> Path:
    out = workdir / "report.dsse.json"
    result = invoke("sign", [str(workdir / "results.json"), "--key", str(keypair[0]), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def verify(report: Path, public: Path, *extra: str) -> CliResult:
    return invoke("verify", [str(report), "--key", str(public), *extra])


class TestKeygen:
    def test_writes_a_0600_key_and_prints_its_id(self, tmp_path: Path) -> None:
        result = invoke("keygen", ["-o", str(tmp_path / "k")])
        assert result.exit_code == 0
        assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600
        public = keys.load_public_key_file(tmp_path / "k.pub")
        assert f"key id:      {public.keyid}" in result.stdout
        assert f"fingerprint: {public.fingerprint}" in result.stdout
        private_body = (tmp_path / "k").read_text().splitlines()[1]
        assert private_body not in result.output

    def test_refuses_to_overwrite_unless_forced(self, tmp_path: Path) -> None:
        assert invoke("keygen", ["-o", str(tmp_path / "k")]).exit_code == 0
        before = (tmp_path / "k").read_bytes()
        refused = invoke("keygen", ["-o", str(tmp_path / "k")])
        assert refused.exit_code == 2
        assert "--force" in refused.stderr and "Traceback" not in refused.output
        assert (tmp_path / "k").read_bytes() == before
        assert invoke("keygen", ["-o", str(tmp_path / "k"), "--force"]).exit_code == 0
        assert (tmp_path / "k").read_bytes() != before
        assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600


class TestSignThenVerify:
    def test_valid_report_with_every_expectation(
        self, report: Path, keypair: tuple[Path, Path], workdir: Path, sample: Any
    ) -> None:
        result = verify(
            report,
            keypair[1],
            "--repo",
            "octo/kernels",
            "--commit",
            sample.commit,
            "--max-age",
            "1h",
            "--artifact",
            str(workdir / "gpuemu.toml"),
            "--artifact",
            str(workdir / "kernels" / "gelu.cu"),
            "--artifact",
            str(workdir / "results.json"),
        )
        assert result.exit_code == 0, result.output
        public = keys.load_public_key_file(keypair[1])
        assert public.keyid in result.stdout
        assert "repo:      octo/kernels (id 42)" in result.stdout
        assert f"commit:    {sample.commit}" in result.stdout
        assert "verdict:   failed" in result.stdout
        assert "issued_at: " in result.stdout
        assert "report verified" in result.stdout

    @pytest.mark.parametrize(
        ("args", "complaint"),
        [
            (["--repo", "octo/forked"], "report is for repo octo/kernels"),
            (["--repo-id", "7"], "repo id 42"),
            (["--commit", "fedcba9876543210fedcba9876543210fedcba98"], "report is for commit"),
        ],
    )
    def test_another_repo_or_commit_exits_2(
        self, report: Path, keypair: tuple[Path, Path], args: list[str], complaint: str
    ) -> None:
        result = verify(report, keypair[1], *args)
        assert result.exit_code == 2
        assert complaint in result.output

    def test_a_valid_signature_over_a_failed_verdict_fails_require_verdict_passed(
        self, report: Path, keypair: tuple[Path, Path]
    ) -> None:
        plain = verify(report, keypair[1])
        assert plain.exit_code == 0 and "verdict:   failed" in plain.stdout  # the signature holds; it says so
        required = verify(report, keypair[1], "--require-verdict", "passed")
        assert required.exit_code == 2
        assert "report's verdict is failed, required passed" in required.output
        assert verify(report, keypair[1], "--require-verdict", "failed").exit_code == 0
        bad = verify(report, keypair[1], "--require-verdict", "green")
        assert bad.exit_code == 2 and "Traceback" not in bad.output

    def test_changed_artifact_exits_2(self, report: Path, keypair: tuple[Path, Path], workdir: Path) -> None:
        kernel = workdir / "kernels" / "gelu.cu"
        kernel.write_text(kernel.read_text().replace("gelu", "geIu"))
        result = verify(report, keypair[1], "--artifact", str(kernel))
        assert result.exit_code == 2
        assert "differs from subject kernels/gelu.cu" in result.output

    def test_expired_report_exits_2(
        self, keypair: tuple[Path, Path], tmp_path: Path, make_envelope: Any
    ) -> None:
        key = keys.load_private_key_file(keypair[0])
        old = tmp_path / "old.dsse.json"
        old.write_bytes(make_envelope(key, issued_at=datetime.now(UTC) - timedelta(days=3)))
        expired = verify(old, keypair[1], "--max-age", "2d")
        assert expired.exit_code == 2
        assert "expired" in expired.output
        assert verify(old, keypair[1], "--max-age", "4d").exit_code == 0

    def test_wrong_key_exits_1(self, report: Path, tmp_path: Path) -> None:
        invoke("keygen", ["-o", str(tmp_path / "other")])
        result = verify(report, tmp_path / "other.pub")
        assert result.exit_code == 1
        assert "bad signature" in result.stderr

    def test_any_of_several_keys(self, report: Path, keypair: tuple[Path, Path], tmp_path: Path) -> None:
        invoke("keygen", ["-o", str(tmp_path / "other")])
        result = invoke(
            "verify", [str(report), "--key", str(tmp_path / "other.pub"), "--key", str(keypair[1])]
        )
        assert result.exit_code == 0, result.output

    @pytest.mark.parametrize(
        ("field", "code"),
        [("payload", 1), ("sig", 1), ("keyid", 1), ("payloadType", 3)],
    )
    def test_one_byte_change_in_each_field(
        self, report: Path, keypair: tuple[Path, Path], field: str, code: int
    ) -> None:
        text = report.read_text()
        start = text.index(f'"{field}": "') + len(field) + 5
        position = start + 10  # well inside the value, clear of base64 padding
        original = text[position]
        replacement = "B" if original != "B" else "C"
        if field == "keyid":
            replacement = "0" if original != "0" else "1"
        report.write_text(text[:position] + replacement + text[position + 1 :])
        result = verify(report, keypair[1])
        assert result.exit_code == code, result.output
        assert "Traceback" not in result.output


class TestUnsigned:
    def test_unsigned_report_is_written_and_refused_by_verify(
        self, workdir: Path, keypair: tuple[Path, Path]
    ) -> None:
        out = workdir / "unsigned.dsse.json"
        signed = invoke("sign", [str(workdir / "results.json"), "--unsigned", "-o", str(out)])
        assert signed.exit_code == 0
        assert "UNSIGNED" in signed.stderr
        envelope = json.loads(out.read_text())
        assert envelope["signatures"] == []
        statement = json.loads(base64.b64decode(envelope["payload"]))
        assert statement["predicate"]["signature"]["status"] == "unsigned"
        assert statement["predicate"]["verdict"] == "failed"

        result = verify(out, keypair[1])
        assert result.exit_code == 1
        assert "unsigned" in result.stderr


class TestKeyFromEnvironment:
    def test_sign_with_the_key_in_an_env_var_never_prints_it(
        self, workdir: Path, keypair: tuple[Path, Path]
    ) -> None:
        pem = keypair[0].read_text()
        out = workdir / "r.json"
        result = invoke(
            "sign",
            [str(workdir / "results.json"), "--key-env", "GPUEMU_SIGNING_KEY", "-o", str(out)],
            env={"GPUEMU_SIGNING_KEY": pem},
        )
        assert result.exit_code == 0, result.output
        for line in pem.splitlines()[1:-1]:
            assert line not in result.output
            assert line not in out.read_text()
        assert verify(out, keypair[1]).exit_code == 0

    def test_a_key_file_others_can_read_is_used_with_a_warning(
        self, workdir: Path, keypair: tuple[Path, Path]
    ) -> None:
        keypair[0].chmod(0o644)
        result = invoke(
            "sign",
            [str(workdir / "results.json"), "--key", str(keypair[0]), "-o", str(workdir / "r.json")],
        )
        assert result.exit_code == 0
        assert "readable by other users" in result.stderr

    def test_empty_env_var_is_a_usage_error_pointing_at_unsigned(self, workdir: Path) -> None:
        result = invoke(
            "sign",
            [str(workdir / "results.json"), "--key-env", "GPUEMU_SIGNING_KEY", "-o", str(workdir / "r")],
            env={"GPUEMU_SIGNING_KEY": ""},
        )
        assert result.exit_code == 2
        assert "--unsigned" in result.stderr
        assert not (workdir / "r").exists()


class TestSignContext:
    def test_github_environment_fills_what_results_lack(
        self, tmp_path: Path, keypair: tuple[Path, Path], sample: Any
    ) -> None:
        results = tmp_path / "results.json"
        results.write_text(json.dumps(sample.results(run=None, git=None)))
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"pull_request": {"number": 31}}))
        env = {
            "GITHUB_REPOSITORY": "octo/kernels",
            "GITHUB_REPOSITORY_ID": "42",
            "GITHUB_SHA": sample.other_commit,
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_RUN_ID": "555",
            "GITHUB_RUN_ATTEMPT": "3",
            "GITHUB_JOB": "gate",
        }
        out = tmp_path / "r.json"
        assert invoke("sign", [str(results), "--key", str(keypair[0]), "-o", str(out)], env).exit_code == 0
        result = verify(out, keypair[1], "--repo", "octo/kernels", "--commit", sample.other_commit)
        assert result.exit_code == 0, result.output
        assert "event pull_request, PR #31, run 555, attempt 3, job gate" in result.stdout

    def test_a_results_document_from_another_run_is_refused_in_ci(
        self, tmp_path: Path, keypair: tuple[Path, Path], sample: Any
    ) -> None:
        """Issue 45, item 3: results.json says run 9000000001 of a pull_request event; the signing job runs in
        run 555 for a push. The old signer bound the statement to the document's claims; now the environment
        binds it and the disagreement is refused. Signed where they agree, `verify` says which fields the
        signer saw itself and which it only repeated."""
        results = tmp_path / "results.json"
        results.write_text(json.dumps(sample.results()))
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"pull_request": {"number": 5, "head": {"sha": sample.commit}}}))
        env = {
            "GITHUB_REPOSITORY": "octo/kernels",
            "GITHUB_REPOSITORY_ID": "42",
            "GITHUB_SHA": sample.other_commit,
            "GITHUB_EVENT_NAME": "push",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_RUN_ID": "555",
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_JOB": "sign",
        }
        out = tmp_path / "r.json"
        args = [str(results), "--key", str(keypair[0]), "-o", str(out)]
        refused = invoke("sign", args, env)
        assert refused.exit_code == 2 and not out.exists()
        assert "event pull_request, but this job runs for push" in refused.stderr
        env.update(GITHUB_EVENT_NAME="pull_request", GITHUB_RUN_ID="9000000001")
        signed = invoke("sign", args, env)
        assert signed.exit_code == 0, signed.output
        shown = verify(out, keypair[1]).stdout
        assert (
            "bound by:  the signer's own environment: repo, repo id, commit, PR, event, run; "
            "the results document, unchecked: attempt, job, server"
        ) in shown

    def test_flags_override(self, workdir: Path, keypair: tuple[Path, Path], sample: Any) -> None:
        out = workdir / "r.json"
        args = [str(workdir / "results.json"), "--key", str(keypair[0]), "-o", str(out)]
        args += ["--repo", "octo/mirror", "--commit", sample.other_commit, "--pr", "9", "--job", "release"]
        assert invoke("sign", args).exit_code == 0
        result = verify(out, keypair[1], "--repo", "octo/mirror", "--commit", sample.other_commit)
        assert result.exit_code == 0, result.output
        assert "PR #9" in result.stdout and "job release" in result.stdout


class TestBadInput:
    @pytest.mark.parametrize(
        "content",
        [
            b"not json at all",
            b'{"payload": "e30=", "payloadType": "application/json", "signatures": []}',
            b'{"payload": "***", "payloadType": "application/vnd.in-toto+json", "signatures": []}',
            b'{"payloadType": "application/vnd.in-toto+json", "signatures": []}',
            b'{"payload": "e30=", "payloadType": "application/vnd.in-toto+json",'
            b' "signatures": [{"keyid": "x"}]}',
            b"\xff\xfe\x00",
        ],
    )
    def test_malformed_report_exits_3(
        self, tmp_path: Path, keypair: tuple[Path, Path], content: bytes
    ) -> None:
        path = tmp_path / "r.json"
        path.write_bytes(content)
        result = verify(path, keypair[1])
        assert result.exit_code == 3
        assert "malformed" in result.stderr and "Traceback" not in result.output

    def test_unusable_public_key_or_missing_report_exits_3(
        self, report: Path, keypair: tuple[Path, Path], tmp_path: Path
    ) -> None:
        garbage = tmp_path / "garbage.pub"
        garbage.write_text("hello")
        assert verify(report, garbage).exit_code == 3
        assert verify(report, keypair[0]).exit_code == 3  # the private key by mistake
        assert verify(tmp_path / "missing.json", keypair[1]).exit_code == 3
        assert verify(tmp_path, keypair[1]).exit_code == 3  # a directory

    def test_bad_flag_values_are_usage_errors(self, report: Path, keypair: tuple[Path, Path]) -> None:
        for args in (["--max-age", "soon"], ["--commit", "abc"], ["--repo", "no-slash"]):
            result = verify(report, keypair[1], *args)
            assert result.exit_code == 2
            assert "Invalid value" in result.output

    @pytest.mark.parametrize(
        ("setup", "message"),
        [
            ("no-key", "exactly one of"),
            ("two-keys", "exactly one of"),
            ("not-json", "not JSON"),
            ("no-config-digest", "field `sha256` - at `$.config`"),
            ("public-key", "public key"),
        ],
    )
    def test_sign_refuses_with_a_message(
        self, workdir: Path, keypair: tuple[Path, Path], sample: Any, setup: str, message: str
    ) -> None:
        results = workdir / "results.json"
        args = [str(results), "-o", str(workdir / "out.json"), "--key", str(keypair[0])]
        if setup == "no-key":
            args = args[:3]
        elif setup == "two-keys":
            args += ["--unsigned"]
        elif setup == "not-json":
            results.write_text("{")
        elif setup == "no-config-digest":
            results.write_text(json.dumps(sample.results(config={"path": "gpuemu.toml"})))
        elif setup == "public-key":
            args[-1] = str(keypair[1])
        result = invoke("sign", args)
        assert result.exit_code == 2
        assert message in result.stderr and "Traceback" not in result.output
        assert not (workdir / "out.json").exists()


class TestInteroperability:
    def test_our_verifier_accepts_a_report_signed_by_securesystemslib(
        self, tmp_path: Path, make_envelope: Any, sample: Any
    ) -> None:
        ours = json.loads(make_envelope(None))  # the statement, unsigned
        signer = CryptoSigner.generate_ed25519()
        theirs = SslibEnvelope(
            payload=base64.b64decode(ours["payload"]), payload_type=ours["payloadType"], signatures={}
        )
        theirs.sign(signer)
        report = tmp_path / "theirs.dsse.json"
        report.write_text(json.dumps(theirs.to_dict()))
        public = tmp_path / "theirs.pub"
        crypto_key = signer.public_key._crypto_key()
        assert isinstance(crypto_key, Ed25519PublicKey)
        public.write_bytes(keys.PublicKey.from_key(crypto_key).pem())

        result = verify(report, public, "--repo", "octo/kernels", "--commit", sample.commit)
        assert result.exit_code == 0, result.output
        assert signer.public_key.keyid in result.stdout


class TestThroughTheEntryPoint:
    """The same flow through `python -m gpuemu_ci`, as a customer runs it."""

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GPUEMU_"))}
        return subprocess.run(
            [sys.executable, "-m", "gpuemu_ci", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    @pytest.mark.slow
    def test_sign_verify_and_exit_codes(self, workdir: Path, sample: Any) -> None:
        keys.write_keypair(workdir / "k", keys.generate())  # keygen's own run is covered above
        assert (
            self.run("sign", "results.json", "--key", "k", "-o", "r.dsse.json", cwd=workdir).returncode == 0
        )
        good = self.run(
            "verify",
            "r.dsse.json",
            "--key",
            "k.pub",
            "--commit",
            sample.commit,
            "--artifact",
            "gpuemu.toml",
            cwd=workdir,
        )
        assert good.returncode == 0, good.stderr
        assert "verdict:   failed" in good.stdout
        assert (
            self.run("verify", "r.dsse.json", "--key", "k.pub", "--repo", "x/y", cwd=workdir).returncode == 2
        )

    @pytest.mark.slow
    def test_signs_what_gpuemu_ci_run_wrote(
        self, tmp_path: Path, keypair: tuple[Path, Path], sample: Any
    ) -> None:
        config = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "gpuemu.toml"
        ran = self.run(
            "run",
            "--config",
            str(config),
            "--out",
            "out",
            "--op",
            "gelu",
            "--iterations",
            "1",
            "--no-lint",
            cwd=tmp_path,
        )
        assert ran.returncode == 0, ran.stderr
        results = tmp_path / "out" / "results.json"
        args = [str(results), "--key", str(keypair[0]), "-o", str(tmp_path / "r.json")]
        signed = invoke("sign", [*args, "--repo", "octo/kernels", "--commit", sample.commit])
        assert signed.exit_code == 0, signed.output
        result = verify(
            tmp_path / "r.json", keypair[1], "--artifact", str(config), "--artifact", str(results)
        )
        assert result.exit_code == 0, result.output
        assert "verdict:   passed" in result.stdout
