"""The GitHub Action: inputs and context -> run, baseline diff, renderings, comment, report, outputs.

entrypoint.py only calls `main()`. Modes:
- gate (pull requests): run, diff against the base branch's `gpuemu-baseline` artifact, comment once per job;
- baseline (pushes to the default branch): run and write results.json + baseline.json for upload;
- nightly (schedule): the thorough suite with a fresh seed; one issue per failing op, closed when it passes;
- sign: sign an existing results file in a job that runs no code under test;
- comment (workflow_run companion for fork PRs): comment from a results file the PR's run uploaded.
A failed comment, issue or baseline download is a warning; the exit code is always the gate's.
Secrets (the token, the signing key) are read once and removed from the environment before any code under
test runs, since the op workers inherit it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from gpuemu_ci.action import commands
from gpuemu_ci.action.context import ActionContext
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config, Suite
from gpuemu_ci.errors import ExitCode, GpuemuError, InfraError, UsageError
from gpuemu_ci.github.client import GitHubClient
from gpuemu_ci.pipeline import RunOptions, run_pipeline
from gpuemu_ci.progress import StderrReporter
from gpuemu_ci.render.report import Links
from gpuemu_ci.results.io import atomic_write_bytes, dumps, read_results, write_results

REPORT_NAME = "report.dsse.json"
BASELINE_NAME = "baseline.json"
BASELINE_DIR = ".baseline"  # inside output_dir: the downloaded artifact, kept for `gpuemu-ci diff` by hand
SECRET_INPUTS = ("github_token", "signing_key")
# Plain words: the renderers escape backticks in messages.
HOW_BASELINES_ARE_MADE = (
    "Baselines come from the gpuemu-baseline artifact that this Action uploads in baseline mode on pushes "
    "to the base branch (gpuemu-ci init writes that workflow)."
)


class Mode(str, Enum):
    GATE = "gate"
    BASELINE = "baseline"
    NIGHTLY = "nightly"
    SIGN = "sign"
    COMMENT = "comment"


@dataclass(frozen=True)
class ActionInputs:
    """The action.yml inputs, validated."""

    config: str
    suite: Suite
    seed: int | None
    mode: Mode
    baseline: str
    comment: bool
    fail_on_regression: bool | None
    require_gpu: bool | None
    output_dir: str
    results: str | None
    job_key: str
    signing_key: str = field(default="", repr=False)

    @classmethod
    def from_context(cls, ctx: ActionContext) -> ActionInputs:
        mode_text = ctx.input("mode", "gate") or "gate"
        suite_text = ctx.input("suite", "quick") or "quick"
        seed_text = ctx.input("seed")
        try:
            mode = Mode(mode_text)
        except ValueError:
            raise UsageError(
                f"input mode={mode_text!r}: expected one of {', '.join(m.value for m in Mode)}"
            ) from None
        try:
            suite = Suite(suite_text)
        except ValueError:
            raise UsageError(f"input suite={suite_text!r}: expected quick or thorough") from None
        if seed_text is not None and not (
            seed_text.isascii() and seed_text.isdigit() and int(seed_text) < 2**64
        ):
            raise UsageError(f"input seed={seed_text!r}: expected an integer between 0 and 2^64 - 1")

        def optional_bool(name: str) -> bool | None:
            return None if ctx.input(name) is None else ctx.input_bool(name, False)

        return cls(
            config=ctx.input("config", "gpuemu.toml") or "gpuemu.toml",
            # Nightly mode is the thorough suite with a fresh seed, whatever `suite` says (the nightly
            # template passes `suite: thorough`, which alone would replay the config's seed every night).
            suite=Suite.NIGHTLY if mode is Mode.NIGHTLY else suite,
            seed=int(seed_text) if seed_text is not None else None,
            mode=mode,
            baseline=ctx.input("baseline", "auto") or "auto",
            comment=ctx.input_bool("comment", True),
            fail_on_regression=optional_bool("fail_on_regression"),
            require_gpu=optional_bool("require_gpu"),
            output_dir=ctx.input("output_dir", "gpuemu-out") or "gpuemu-out",
            results=ctx.input("results"),
            job_key=ctx.input("job_key") or ctx.job or "gpuemu-ci",
            signing_key=ctx.input("signing_key", "") or "",
        )


@dataclass
class Action:
    """One invocation of the Action."""

    ctx: ActionContext
    inputs: ActionInputs
    env: Mapping[str, str]
    workspace: Path
    stdout: TextIO = sys.stdout
    warnings: list[str] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    _client: GitHubClient | None = None
    _config: Config | None = None

    @property
    def out_dir(self) -> Path:
        return self.workspace / self.inputs.output_dir

    def relative(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.workspace.resolve()).as_posix()
        except ValueError:
            return str(path)

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        self.stdout.write(commands.format_command("warning", text) + "\n")

    def client(self) -> GitHubClient | None:
        if self._client is None and self.ctx.token:
            self._client = GitHubClient(self.ctx.token, self.ctx.api_url)
        return self._client

    # --- modes ----------------------------------------------------------------------------------------
    def run(self) -> int:
        try:
            handler = {
                Mode.GATE: self.gate,
                Mode.BASELINE: self.baseline_mode,
                Mode.NIGHTLY: self.nightly,
                Mode.SIGN: self.sign,
                Mode.COMMENT: self.comment_mode,
            }[self.inputs.mode]
            return handler()
        finally:
            commands.set_outputs(self.env.get("GITHUB_OUTPUT"), self.outputs)
            if self._client is not None:
                self._client.close()
            hand_over(self.out_dir, self.workspace)

    def gate(self) -> int:
        document = self.run_suite()
        document = self.attach_baseline(document)
        return self.publish(document, comment=True)

    def baseline_mode(self) -> int:
        from gpuemu_ci.diff.baseline import create_baseline

        document = self.run_suite()
        code = self.publish(document, comment=False)
        atomic_write_bytes(self.out_dir / BASELINE_NAME, dumps(create_baseline(document)).encode())
        return code

    def nightly(self) -> int:
        from gpuemu_ci.github.issues import NightlyOp, OpStatus, sync_nightly_issues

        document = self.run_suite()
        code = self.publish(document, comment=False)
        client = self.client()
        if client is None:
            self.warn("no github_token: nightly issues were not opened or closed")
            return code
        nightly_ops = [
            NightlyOp(op["name"], _nightly_status(op, OpStatus), _issue_details(op, document))
            for op in document["ops"]
        ]
        for outcome in sync_nightly_issues(
            client, self.ctx.repository, nightly_ops, run_url=self.ctx.run_url
        ):
            warning = getattr(outcome, "warning", None)
            if warning:
                self.warn(warning)
        return code

    def sign(self) -> int:
        results = self.results_path()
        self.write_report(results, sign=True)
        return int(ExitCode.PASSED)

    def comment_mode(self) -> int:
        """workflow_run companion: comment on the fork PR from the results its run uploaded."""
        from gpuemu_ci.github.client import GitHubError
        from gpuemu_ci.github.comments import resolve_pull_request

        document = read_results(self.results_path())
        self.outputs["comment_url"] = ""
        client = self.client()
        if client is None:
            self.warn("no github_token: cannot comment")
            return int(ExitCode.PASSED)
        run = self.ctx.triggering_run
        if run is not None:
            _check_tested_commit(document, run.head_sha)
        try:
            pr = run.pr_numbers[0] if run and run.pr_numbers else resolve_pull_request(client, self.ctx)
        except GitHubError as exc:
            self.warn(f"could not look up the pull request of the triggering run: {exc.message}")
            return int(ExitCode.PASSED)
        if pr is None:
            self.warn("could not find the pull request of the triggering run; no comment posted")
            return int(ExitCode.PASSED)
        # Link the run that tested the PR (its artifacts hold the snapshots), not this companion run; its
        # id comes from the event, not from the uploaded (untrusted) results.
        run_url = (
            f"{self.ctx.server_url.rstrip('/')}/{self.ctx.repository}/actions/runs/{run.id}" if run else None
        )
        self.post_comment(document, pr, run_url=run_url or self.ctx.run_url)
        return int(ExitCode.PASSED)

    # --- steps -----------------------------------------------------------------------------------------
    def results_path(self) -> Path:
        path = Path(self.inputs.results) if self.inputs.results else self.out_dir / "results.json"
        path = path if path.is_absolute() else self.workspace / path
        if not path.is_file():
            raise UsageError(f"results file not found: {self.relative(path)} (input `results`)")
        return path

    def run_context(self) -> dict[str, Any]:
        ctx = self.ctx
        return {
            "repo": ctx.repository,
            "repo_id": ctx.repository_id,
            "run_id": ctx.run_id,
            "run_attempt": ctx.run_attempt,
            "pr": ctx.pr_number,
            "event": ctx.event_name,
            "server_url": ctx.server_url,
            "job": self.inputs.job_key,
            "commit": ctx.head_sha or ctx.sha,
        }

    def run_suite(self) -> dict[str, Any]:
        config_path = self.workspace / self.inputs.config
        config = load_config(config_path)
        options = RunOptions(
            suite=self.inputs.suite,
            seed=self.inputs.seed,
            out_dir=self.out_dir.resolve(),
            require_gpu=self.inputs.require_gpu,
            run_context=self.run_context(),
        )
        with commands.group("gpuemu-ci: running the suite", stream=self.stdout):
            document = run_pipeline(config, options, StderrReporter()).to_json()
        if document.get("git") is None or self.ctx.is_pull_request:
            # Pull requests run on a merge commit; the tested change is the PR head.
            document["git"] = {"commit": self.ctx.head_sha or self.ctx.sha, "ref": self.ctx.ref}
        self._config = config
        return document

    def attach_baseline(self, document: dict[str, Any]) -> dict[str, Any]:
        from gpuemu_ci.diff.apply import apply_baseline
        from gpuemu_ci.diff.gate import fail_on_regression as effective_flag
        from gpuemu_ci.diff.gate import gate_document
        from gpuemu_ci.diff.model import BaselineDiff, DiffStatus

        choice = self.inputs.baseline
        assert self._config is not None, "run_suite() comes first"
        policies = self._config.policies
        flag = self.inputs.fail_on_regression
        if choice == "none":
            return document
        if choice != "auto":
            path = Path(choice) if Path(choice).is_absolute() else self.workspace / choice
            return apply_baseline(
                document, path, policies, flag, provenance={"source": "input", "path": choice}
            )

        def neutral(reason: str) -> dict[str, Any]:
            message = (
                f"no baseline: {reason}. No regression check was done; this run's own verdicts decide "
                f"the gate. {HOW_BASELINES_ARE_MADE}"
            )
            return gate_document(
                document,
                BaselineDiff(
                    DiffStatus.NO_BASELINE, message, fail_on_regression=effective_flag(policies, flag)
                ),
            )

        client = self.client()
        if client is None:
            return neutral("no github_token to look up the gpuemu-baseline artifact")
        from gpuemu_ci.github.artifacts import MatchKind, fetch_baseline

        target = self.out_dir / BASELINE_DIR
        # A previous run's copy: self-hosted runners keep workspaces between jobs.
        shutil.rmtree(target, ignore_errors=True)
        fetched = fetch_baseline(client, self.ctx, target)
        match = fetched.match
        if match.kind is MatchKind.UNAVAILABLE:
            # Not a first run: the lookup itself failed (often a missing `actions: read` permission).
            self.warn(
                f"baseline: {match.reason}. The job needs the permission actions: read; the gate ran "
                "without a regression check"
            )
        baseline_file = _find_baseline_file(fetched.directory)
        if baseline_file is None:
            reason = (
                match.reason
                if not fetched.directory
                else "the gpuemu-baseline artifact holds no baseline.json"
            )
            return neutral(reason)
        provenance = {
            "source": "artifact",
            "match": match.label,
            "reason": match.reason,
            "run_id": match.run_id,
            "commit": match.sha,
        }
        return apply_baseline(document, baseline_file, policies, flag, provenance=provenance)

    def publish(self, document: dict[str, Any], *, comment: bool) -> int:
        """results.json, step summary, SARIF, JUnit, annotations, report, comment and outputs."""
        from gpuemu_ci.render.annotations import render_annotations
        from gpuemu_ci.render.junit import render_junit
        from gpuemu_ci.render.markdown import render_summary
        from gpuemu_ci.render.parse import parse_report
        from gpuemu_ci.render.sarif import render_sarif

        results = write_results(self.out_dir, document)
        report = parse_report(document)
        links = Links.for_report(report, run_url=self.ctx.run_url)
        atomic_write_bytes(
            self.out_dir / "results.sarif",
            render_sarif(report, job=self.inputs.job_key, source_root=self.workspace).encode(),
        )
        atomic_write_bytes(self.out_dir / "junit.xml", render_junit(report).encode())
        self.stdout.write(render_annotations(report, source_root=self.workspace))
        summary = commands.append_step_summary(
            self.env.get("GITHUB_STEP_SUMMARY"), render_summary(report, links)
        )
        if summary.truncated:
            self.warn("the step summary was truncated to GitHub's 1 MiB limit; results.json has everything")
        self.write_report(results, sign=bool(self.inputs.signing_key) and not self.ctx.is_fork)
        diff = document.get("diff") or {}
        self.outputs.update(
            {
                "verdict": document["verdict"],
                "ops_passed": document["summary"]["ops_passed"],
                "ops_failed": document["summary"]["ops_failed"],
                "regressions": diff.get("regressions", 0) or 0,
                "results_path": self.relative(results),
            }
        )
        if comment and self.inputs.comment:
            self.outputs["comment_url"] = ""
            if not self.ctx.is_pull_request or self.ctx.pr_number is None:
                pass  # nothing to comment on outside pull requests
            elif self.ctx.token_is_read_only:
                self.stdout.write(
                    commands.format_command(
                        "notice",
                        "pull request from a fork: the token is read-only, so no comment is posted here; "
                        "the gpuemu-fork-comment workflow posts it from the uploaded results",
                    )
                    + "\n"
                )
            else:
                self.post_comment(document, self.ctx.pr_number)
        return int(document["exit_code"])

    def post_comment(self, document: dict[str, Any], pr: int, *, run_url: str | None = None) -> None:
        from gpuemu_ci.github.comments import upsert_comment
        from gpuemu_ci.render.markdown import render_comment
        from gpuemu_ci.render.parse import parse_report

        client = self.client()
        if client is None:
            self.warn("no github_token: the PR comment was not posted")
            return
        report = parse_report(document)
        links = Links.for_report(report, run_url=run_url or self.ctx.run_url)
        body = render_comment(report, links, job=self.inputs.job_key, marker=False)
        outcome = upsert_comment(client, self.ctx.repository, pr, body, self.inputs.job_key)
        if outcome.warning:
            self.warn(f"PR comment: {outcome.warning}")
        if outcome.url:
            self.outputs["comment_url"] = outcome.url

    def write_report(self, results: Path, *, sign: bool) -> None:
        from gpuemu_ci.attest import keys
        from gpuemu_ci.attest.signing import sign_results

        signing_key = None
        if sign and self.inputs.signing_key:
            signing_key = keys.load_private_key_pem(self.inputs.signing_key.encode(), "input signing_key")
        elif self.inputs.mode is Mode.SIGN:
            raise UsageError(
                "mode sign needs the signing_key input (a PEM Ed25519 private key from a secret)"
            )
        report = sign_results(results, signing_key, self.env)
        path = self.out_dir / REPORT_NAME
        atomic_write_bytes(path, report.envelope)
        self.outputs["report_path"] = self.relative(path)
        if signing_key is None and self.inputs.mode is not Mode.SIGN:
            note = "fork pull request without secrets" if self.ctx.is_fork else "no signing_key given"
            self.stdout.write(commands.format_command("notice", f"the report is unsigned ({note})") + "\n")


def _find_baseline_file(directory: Path | None) -> Path | None:
    if directory is None:
        return None
    for name in (BASELINE_NAME, "results.json"):
        found = sorted(directory.rglob(name))
        if found:
            return found[0]
    return None


def _nightly_status(op: dict[str, Any], status_enum: Any) -> Any:
    if op["status"] == "failed":
        return status_enum.FAILED
    if op["status"] == "passed":
        return status_enum.PASSED
    return status_enum.NOT_RUN


def _issue_details(op: dict[str, Any], document: dict[str, Any]) -> str:
    from gpuemu_ci.render.escape import markdown_code_span, markdown_text

    lines = [
        f"Nightly seed `{document['seed']}`: {op['cases_failed']} of {op['cases_total']} cases failed.",
        "",
    ]
    for failure in op["failures"][:5]:
        shapes = ", ".join(f"{k}{tuple(v)}" for k, v in failure["shapes"].items())
        first_line = failure["message"].splitlines()[0][:300] if failure["message"] else ""
        lines.append(
            f"- {markdown_text(failure['kind'])} [{failure['dtype']}] {markdown_text(shapes)} "
            f"{markdown_text(failure['distribution'])}: {markdown_text(first_line)}"
        )
        lines.append(f"  replay: {markdown_code_span(failure['replay'])}")
    return "\n".join(lines)


def hand_over(directory: Path, workspace: Path) -> None:
    """Docker actions run as root: give the outputs to the workspace's owner so later steps can touch them."""
    if not directory.exists() or not hasattr(os, "chown") or os.geteuid() != 0:
        return
    owner = workspace.stat()
    try:  # an output_dir like out/gpuemu also made `out`, which later steps must be able to clean
        parts = directory.resolve().relative_to(workspace.resolve()).parts
    except ValueError:
        parts = ()
    parents = [workspace.joinpath(*parts[:i]) for i in range(1, len(parts))]
    for path in [*parents, directory, *directory.rglob("*")]:
        with contextlib.suppress(OSError):
            os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)


def _scrub_secrets(environ: MutableMapping[str, str]) -> None:
    """Remove the secret inputs from the process environment, which the op workers inherit."""
    for name in SECRET_INPUTS:
        for key in (f"INPUT_{name.upper()}", f"INPUT_{name.upper().replace('_', '-')}"):
            environ.pop(key, None)
    environ.pop("GITHUB_TOKEN", None)


def main(env: Mapping[str, str] | None = None, stdout: TextIO | None = None) -> int:
    """The Action's entry point; returns the gate's exit code."""
    from_process = env is None
    env = dict(os.environ if env is None else env)
    stream = stdout or sys.stdout
    try:
        ctx = ActionContext.from_env(env)
        if from_process:
            _scrub_secrets(os.environ)
        inputs = ActionInputs.from_context(ctx)
        if inputs.signing_key:
            commands.add_mask(inputs.signing_key, stream=stream)
        workspace = (ctx.workspace or Path.cwd()).resolve()
        os.chdir(workspace)
        return Action(ctx, inputs, env, workspace, stream).run()
    except GpuemuError as exc:
        stream.write(commands.format_command("error", f"gpuemu-ci: {exc.diagnostics()}") + "\n")
        sys.stderr.write(f"gpuemu-ci: error: {exc.diagnostics()}\n")
        return int(exc.exit_code)
    except Exception as exc:  # a bug in gpuemu-ci: say so, never a green step
        stream.write(
            commands.format_command("error", f"gpuemu-ci internal error: {type(exc).__name__}: {exc}") + "\n"
        )
        if env.get("GPUEMU_DEBUG"):
            raise
        return int(ExitCode.INFRASTRUCTURE)


def _check_tested_commit(document: dict[str, Any], head_sha: str) -> None:
    """The artifact must describe the commit the triggering run tested (from the event, which the pull
    request cannot forge): a stale or swapped results file would otherwise be commented as this PR's."""
    run_info = document.get("run") if isinstance(document.get("run"), dict) else {}
    git_info = document.get("git") if isinstance(document.get("git"), dict) else {}
    tested = run_info.get("commit") or git_info.get("commit")
    if tested != head_sha:
        raise InfraError(
            f"the results artifact is for commit {tested or '(none recorded)'}, but the run that triggered this "
            f"one tested {head_sha}; no comment posted (re-run the pull request's workflow)"
        )


__all__ = ["Action", "ActionInputs", "Mode", "main"]
