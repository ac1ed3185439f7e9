"""The in-toto statement: subjects, predicate, canonical bytes, and the run context sources."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from gpuemu_ci.attest import statement
from gpuemu_ci.attest.statement import RunContext
from gpuemu_ci.errors import UsageError
from gpuemu_ci.results.codec import from_json
from gpuemu_ci.results.model import Results

ISSUED = datetime(2026, 11, 22, 10, 30, 0, tzinfo=UTC)


def as_results(document: dict[str, Any]) -> Results:
    return from_json(json.dumps(document))


def build(document: dict[str, Any], **context: Any) -> dict[str, Any]:
    results = from_json(json.dumps(document))  # what a results.json on disk gives the signer
    merged = statement.context_for_results(results, RunContext(), RunContext(**context))
    return statement.build_statement(
        results,
        results_name="results.json",
        results_sha256="cd" * 32,
        context=merged,
        signer_keyid="ab" * 32,
        issued_at=ISSUED,
        nonce="n" * 32,
    )


class TestSubjects:
    def test_commit_config_kernels_and_results_document(self, sample: Any) -> None:
        document = sample.results()
        subjects = build(document)["subject"]
        assert subjects == [
            {"name": "git+https://github.com/octo/kernels", "digest": {"gitCommit": sample.commit}},
            {"name": "gpuemu.toml", "digest": {"sha256": hashlib.sha256(sample.config_text).hexdigest()}},
            {"name": "kernels/gelu.cu", "digest": {"sha256": hashlib.sha256(sample.kernel_text).hexdigest()}},
            {"name": "results.json", "digest": {"sha256": "cd" * 32}},
        ]

    def test_two_kernels_sharing_a_source_give_one_subject(self, sample: Any) -> None:
        document = sample.results()
        document["kernels"].append({**document["kernels"][0], "name": "gelu_fast"})
        names = [s["name"] for s in build(document)["subject"]]
        assert names.count("kernels/gelu.cu") == 1

    def test_one_source_with_two_digests_is_refused(self, sample: Any) -> None:
        document = sample.results()
        document["kernels"].append({**document["kernels"][0], "source_sha256": "ee" * 32})
        with pytest.raises(statement.ResultsFormatError, match="two different digests"):
            build(document)

    def test_kernel_without_source_digest_is_not_a_subject(self, sample: Any) -> None:
        document = sample.results()
        document["kernels"][0]["source_sha256"] = None
        document["kernels"][0]["status"] = "error"
        built = build(document)
        assert "kernels/gelu.cu" not in [s["name"] for s in built["subject"]]
        assert built["predicate"]["kernels"][0]["status"] == "error"


class TestPredicate:
    def test_verdict_per_op_and_dtype(self, sample: Any) -> None:
        rows = build(sample.results())["predicate"]["results"]
        assert [(r["op"], r["dtype"], r["status"]) for r in rows] == [
            ("softmax", "float32", "passed"),
            ("softmax", "float16", "failed"),
            ("gemm", None, "skipped"),
        ]
        assert rows[2]["skip_reason"] == "no GPU"
        assert rows[1]["worst_headroom"] == 812.0

    def test_seeds_are_strings_even_beyond_double_precision(self, sample: Any) -> None:
        document = sample.results(seed=2**64 - 1)
        predicate = build(document)["predicate"]
        assert predicate["seed"] == str(2**64 - 1)
        assert predicate["failures"][0]["case_seed"] == "18446744073709551557"
        assert predicate["failures"][0]["replay"].endswith("--seed 18446744073709551557")

    def test_run_context_issue_time_and_nonce(self, sample: Any) -> None:
        run = build(sample.results())["predicate"]["run"]
        assert run == {
            "repo": "octo/kernels",
            "repo_id": "42",
            "commit": sample.commit,
            "pr": 5,
            "event": "pull_request",
            "run_id": "9000000001",
            "run_attempt": 1,
            "job": "gate",
            "server_url": "https://github.com",
            # Signed outside CI (no environment): every field is the results document's own claim.
            "sources": dict.fromkeys(
                ("repo", "repo_id", "commit", "pr", "event", "run_id", "run_attempt", "job", "server_url"),
                "results",
            ),
            "issued_at": "2026-11-22T10:30:00Z",
            "nonce": "n" * 32,
        }

    def test_versions_gpu_lint_and_diff(self, sample: Any) -> None:
        gpu = {
            "name": "NVIDIA H100",
            "compute_capability": "9.0",
            "driver_version": "580",
            "cuda_runtime_version": "13.0",
        }
        document = sample.results(diff={"status": "no_baseline", "message": "no baseline: first run"})
        document["environment"]["gpu"] = {**gpu, "count": 1}
        predicate = build(document)["predicate"]
        assert predicate["tool"] == {"name": "gpuemu-ci", "version": "0.1.0"}
        assert predicate["generator_version"] == "2"
        assert {k: predicate["environment"]["gpu"][k] for k in gpu} == gpu
        assert predicate["lint"] == {"status": "ran", "toolchain": None, "reason": None}
        assert predicate["diff"]["status"] == "no_baseline" and predicate["diff"]["summary_line"]

    def test_numbers_json_cannot_carry_become_strings(self) -> None:
        # JCS has no Infinity and no integers past 2^53: a copied value says it in a string instead of
        # failing to sign.
        assert statement.jcs_safe({"h": float("inf"), "n": 2**64 - 1}) == {
            "h": "Infinity",
            "n": str(2**64 - 1),
        }

    def test_unsigned_statement_says_so(self, sample: Any) -> None:
        results = from_json(json.dumps(sample.results()))
        built = statement.build_statement(
            results,
            results_name="results.json",
            results_sha256="cd" * 32,
            context=statement.context_for_results(results, RunContext(), RunContext()),
            signer_keyid=None,
            issued_at=ISSUED,
            nonce="n",
        )
        assert built["predicate"]["signature"]["status"] == "unsigned"
        assert "fork" in built["predicate"]["signature"]["reason"]


class TestCanonicalBytes:
    def test_same_inputs_same_bytes_whatever_the_key_order(self, sample: Any) -> None:
        document = sample.results()
        shuffled = json.loads(json.dumps(document, sort_keys=True))
        shuffled = dict(reversed(list(shuffled.items())))
        first = statement.canonical_bytes(build(document))
        assert first == statement.canonical_bytes(build(shuffled))
        # The bytes are RFC 8785: parse and re-serialise gives them back unchanged.
        assert rfc8785.dumps(json.loads(first)) == first
        assert b" " not in first.split(b'"replay"')[0]

    def test_statement_type_and_predicate_type(self, sample: Any) -> None:
        built = build(sample.results())
        assert built["_type"] == "https://in-toto.io/Statement/v1"
        assert built["predicateType"].startswith("https://gpuemu.dev/")


class TestBadResults:
    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"schema_version": "1"}, "schema version '1'"),
            ({"config": {"path": "gpuemu.toml"}}, r"missing required field `sha256` - at `\$.config`"),
            ({"config": {"path": "gpuemu.toml", "sha256": "xyz"}}, r"\$.config.sha256"),
            ({"verdict": None}, r"\$.verdict"),
            ({"seed": -1}, r"\$.seed"),
            ({"seed": True}, r"\$.seed"),
            ({"ops": "softmax"}, r"\$.ops"),
            ({"ops": [{"status": "passed"}]}, r"missing required field `name` - at `\$.ops\[0\]`"),
            (
                {"kernels": [{"name": "k", "source": "k.cu", "source_sha256": 5, "status": "passed"}]},
                r"\$.kernels\[0\]",
            ),
        ],
    )
    def test_named_field_in_the_error(self, sample: Any, change: dict[str, Any], message: str) -> None:
        with pytest.raises(UsageError, match=message) as info:
            build(sample.results(**change))
        assert info.value.exit_code == 2

    def test_repo_and_commit_are_required(self, sample: Any) -> None:
        with pytest.raises(UsageError, match="--repo"):
            build(sample.results(run=None))
        with pytest.raises(UsageError, match="--commit"):
            build(sample.results(git=None))

    @pytest.mark.parametrize(("field", "value"), [("repo", "not a repo"), ("commit", "abc123")])
    def test_malformed_binding(self, sample: Any, field: str, value: str) -> None:
        with pytest.raises(UsageError, match=field if field == "repo" else "commit id"):
            build(sample.results(), **{field: value})


class TestRunContext:
    def test_from_environment_with_a_pull_request_event(self, tmp_path: Path) -> None:
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"action": "synchronize", "number": 7, "pull_request": {"number": 7}}))
        env = {
            "GITHUB_REPOSITORY": "octo/kernels",
            "GITHUB_REPOSITORY_ID": "42",
            "GITHUB_SHA": "ab" * 20,
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_EVENT_PATH": str(event),
            "GITHUB_RUN_ID": "123",
            "GITHUB_RUN_ATTEMPT": "2",
            "GITHUB_JOB": "gate",
            "GITHUB_SERVER_URL": "https://ghe.example",
        }
        assert RunContext.from_environment(env) == RunContext(
            repo="octo/kernels",
            repo_id="42",
            commit="ab" * 20,
            pr=7,
            event="pull_request",
            run_id="123",
            run_attempt=2,
            job="gate",
            server_url="https://ghe.example",
        )

    @pytest.mark.parametrize(
        ("payload", "pr"),
        [
            ("pull_request.synchronize.json", 2),
            ("push.branch.json", None),
            ("workflow_run.completed.with_pr.json", 2),
            ("workflow_run.completed.no_pr.json", None),
        ],
    )
    def test_pr_number_from_real_webhook_payloads(self, payload: str, pr: int | None) -> None:
        path = Path(__file__).resolve().parent.parent / "fixtures" / "github-events" / payload
        assert RunContext.from_environment({"GITHUB_EVENT_PATH": str(path)}).pr == pr

    def test_workflow_run_event_with_one_pull_request(self, tmp_path: Path) -> None:
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"workflow_run": {"pull_requests": [{"number": 11}]}}))
        assert RunContext.from_environment({"GITHUB_EVENT_PATH": str(event)}).pr == 11
        event.write_text(json.dumps({"workflow_run": {"pull_requests": [{"number": 11}, {"number": 12}]}}))
        assert RunContext.from_environment({"GITHUB_EVENT_PATH": str(event)}).pr is None

    def test_push_event_and_missing_event_file(self, tmp_path: Path) -> None:
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"ref": "refs/heads/main"}))
        assert RunContext.from_environment({"GITHUB_EVENT_PATH": str(event)}).pr is None
        assert RunContext.from_environment({"GITHUB_EVENT_PATH": str(tmp_path / "gone.json")}).pr is None
        assert RunContext.from_environment({}) == RunContext()

    def test_broken_event_file_and_bad_numbers(self, tmp_path: Path) -> None:
        event = tmp_path / "event.json"
        event.write_text("{not json")
        with pytest.raises(UsageError, match="GITHUB_EVENT_PATH"):
            RunContext.from_environment({"GITHUB_EVENT_PATH": str(event)})
        with pytest.raises(UsageError, match="GITHUB_RUN_ATTEMPT"):
            RunContext.from_environment({"GITHUB_RUN_ATTEMPT": "first"})

    def test_flags_then_the_environment_then_the_results_document(self, sample: Any) -> None:
        """Issue 45, item 3: the signer binds the report to what it observes itself; the document's own run
        claims fill only what the environment does not know (the job, the attempt), and each field says where
        it came from."""
        env = RunContext(
            repo="octo/kernels", repo_id="42", commit="ee" * 20, job="sign", run_id="9000000001",
            event="pull_request", pr=5, run_attempt=2, server_url="https://github.com",
        )  # fmt: skip
        merged = statement.context_for_results(
            as_results(sample.results()), env, RunContext(job="manual"), frozenset({sample.commit, "ee" * 20})
        )
        assert merged.job == "manual"
        assert merged.commit == sample.commit  # the tested commit (one this run is about), not GITHUB_SHA
        assert (merged.run_id, merged.event, merged.pr, merged.run_attempt) == (
            "9000000001",
            "pull_request",
            5,
            1,
        )
        assert dict(merged.sources) == {
            "repo": "environment", "repo_id": "environment", "commit": "environment", "pr": "environment",
            "event": "environment", "run_id": "environment", "run_attempt": "results", "job": "flag",
            "server_url": "environment",
        }  # fmt: skip
        env_only = statement.context_for_results(as_results(sample.results(run=None)), env, RunContext())
        assert (env_only.repo, env_only.run_id, env_only.event) == (
            "octo/kernels",
            "9000000001",
            "pull_request",
        )
        assert dict(env_only.sources)["job"] == "environment"

    @pytest.mark.parametrize(
        ("field", "seen", "says"),
        [
            ("run_id", "77", "was produced in run 9000000001, but this job runs in run 77"),
            ("event", "push", "event pull_request, but this job runs for push"),
            ("repo_id", "43", "repository with id 42, but this job's repository has id 43"),
            ("pr", 6, "is about pull request 5, but this run is about pull request 6"),
            ("run_attempt", 0, None),
        ],
    )
    def test_a_document_whose_run_claims_disagree_with_the_environment_is_refused(
        self, sample: Any, field: str, seen: Any, says: str | None
    ) -> None:
        """The old signer took these from results.json as they were: a forged document was signed as this
        run's. A flag settles the field (who runs `sign` by hand vouches for it)."""
        if says is None:  # an attempt of the run later than the signer's own
            env = RunContext(run_attempt=1)
            document = sample.results()
            document["run"]["run_attempt"] = 3
            with pytest.raises(UsageError, match="attempt 3 of the run, but this job runs in attempt 1"):
                statement.context_for_results(as_results(document), env, RunContext())
            return
        env = RunContext(**{field: seen})
        with pytest.raises(UsageError, match=f"{says}.*pass --{field.replace('_', '-')} to sign it anyway"):
            statement.context_for_results(as_results(sample.results()), env, RunContext())
        forced = statement.context_for_results(as_results(sample.results()), env, RunContext(**{field: seen}))
        assert getattr(forced, field) == seen and dict(forced.sources)[field] == "flag"

    def test_results_from_another_repository_are_not_signed_silently(self, sample: Any) -> None:
        env = RunContext(repo="someone/else")
        with pytest.raises(UsageError, match="--repo"):
            statement.context_for_results(as_results(sample.results()), env, RunContext())
        forced = statement.context_for_results(
            as_results(sample.results()), env, RunContext(repo="someone/else")
        )
        assert forced.repo == "someone/else"
