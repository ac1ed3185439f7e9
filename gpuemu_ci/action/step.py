"""One invocation of the Action: its context, inputs and outputs, and what every mode shares: running the gate,
publishing the results (files, annotations, step summary, report, PR comment) and signing.

A failed comment, issue or baseline download is a warning; the exit code is always the gate's."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import msgspec

from gpuemu_ci import early_signals
from gpuemu_ci.action import commands, lost_run, output_dir
from gpuemu_ci.action.inputs import ActionInputs, Mode
from gpuemu_ci.action.step_files import HELD_VARIABLES, StepFiles
from gpuemu_ci.attest.statement import RunContext, ci_commits
from gpuemu_ci.clock import utc_now
from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import Config
from gpuemu_ci.errors import AlreadyReported, ExitCode, InfraError, UsageError
from gpuemu_ci.files import NotBeneath, atomic_write, check_output_dir, read_beneath
from gpuemu_ci.github.client import GitHubClient
from gpuemu_ci.github.context import ActionContext
from gpuemu_ci.launch import python_env
from gpuemu_ci.pipeline.gate import GateBaseline, diffed
from gpuemu_ci.render.links import Links
from gpuemu_ci.render.markdown import UnverifiedSource
from gpuemu_ci.results.codec import RESULTS_NAME, from_json, write_results
from gpuemu_ci.results.model import Results, RunInfo, Verdict

REPORT_NAME = "report.dsse.json"


@dataclass
class ActionStep:
    """The Action as one step of a job: what it was given and what it leaves behind."""

    ctx: ActionContext
    inputs: ActionInputs
    env: Mapping[str, str]
    workspace: Path
    stdout: TextIO
    outputs: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _client: GitHubClient | None = None
    interrupted_by: int | None = None  # SIGINT or SIGTERM, passed on to the gate process: exit 130 or 143
    _out_pin: output_dir.PinnedDir | None = None  # the output directory before code under test ran
    # The step's file commands and event payload, held from the start (step_files.py).
    files: StepFiles = field(default_factory=lambda: StepFiles({}))
    # What this job is about (repository, run, event, commits), read before any code under test ran: what a
    # report is bound to (attest.statement.context_for_results).
    observed: tuple[RunContext, frozenset[str]] = (RunContext(), frozenset())

    @classmethod
    def start(
        cls, ctx: ActionContext, inputs: ActionInputs, env: Mapping[str, str], workspace: Path, stdout: TextIO
    ) -> ActionStep:
        """The step, with its file commands held and its run observed before anything else happens."""
        observed = (RunContext.from_environment(env), ci_commits(env))
        return cls(ctx, inputs, env, workspace, stdout, files=StepFiles.hold(env), observed=observed)

    @property
    def out_dir(self) -> Path:
        """The output directory, under the workspace."""
        return self.workspace / self.inputs.output_dir

    def relative(self, path: Path) -> str:
        """`path` relative to the workspace when it lies under it (as outputs and messages show paths), else
        as given."""
        try:
            return path.resolve().relative_to(self.workspace.resolve()).as_posix()
        except ValueError:
            return str(path)

    def warn(self, text: str) -> None:
        """A workflow warning (an annotation on the run), also kept for the step summary."""
        self.warnings.append(text)
        self.stdout.write(commands.format_command("warning", text) + "\n")

    def notice(self, text: str) -> None:
        """A workflow notice (an annotation on the run)."""
        self.stdout.write(commands.format_command("notice", text) + "\n")

    def client(self) -> GitHubClient | None:
        """The step's one API client: all its work within `api_timeout`, and stopped by a SIGTERM or SIGINT the
        moment it arrives (this process holds them back: early_signals.py)."""
        if self._client is None and self.ctx.token:
            self._client = GitHubClient(
                self.ctx.token,
                self.ctx.api_url,
                total_deadline=self.inputs.api_timeout_s,
                total_source=self.inputs.api_timeout_from or "the default; the input api_timeout sets it",
                stop_requested=early_signals.pending,
            )
        return self._client

    def close(self) -> None:
        """Write the step's outputs (the Action's own lines only: step_files.py), close the API client and hand
        the output files to the workspace's owner."""
        try:
            self.files.add("GITHUB_OUTPUT", commands.format_outputs(self.outputs).encode())
            self.files.commit()
        finally:
            self.files.close()
            if self._client is not None:
                self._client.close()
        output_dir.hand_over(self.out_dir, self.workspace, self._out_pin)

    # --- running --------------------------------------------------------------------------------------------
    def config(self) -> Config:
        """The config, parsed here only to refuse a bad one before anything runs (parsing runs no user code)."""
        return load_config(self.workspace / self.inputs.config)

    def run_info(self) -> RunInfo:
        """The run's facts (repository, run id and attempt, PR, commit, ...) that results record."""
        ctx = self.ctx
        return RunInfo(
            repo=ctx.repository,
            repo_id=None if ctx.repository_id is None else str(ctx.repository_id),
            run_id=None if ctx.run_id is None else str(ctx.run_id),
            run_attempt=ctx.run_attempt,
            pr=ctx.pr_number,
            event=ctx.event_name,
            server_url=ctx.server_url,
            job=self.inputs.job_key,
            # Pull requests run on a merge commit; the tested change is the PR head.
            commit=ctx.head_sha or ctx.sha,
        )

    def child_env(self) -> dict[str, str]:
        """The environment of code under test: this step's (already without secrets), minus the inputs, the
        step's file commands, which only the Action itself writes, and the event payload's path."""
        return python_env(
            {k: v for k, v in self.env.items() if not k.startswith("INPUT_") and k not in HELD_VARIABLES}
        )

    def run_gate(self, config: Config, baseline: GateBaseline | None = None) -> Results:
        """The suite on `config` with this step's inputs, run as code under test in a confined child; the
        results it wrote, read back as untrusted and with the verdict (and the baseline diff) decided here.
        When the child ends without results (killed by code under test, stopped by a signal), a document
        that says so, never a pass."""
        from gpuemu_ci.action import gate_process, sandbox, setup_step

        out_dir = output_dir.checked(
            self.out_dir, self.workspace, f"input output_dir: {self.inputs.output_dir}"
        )
        check_output_dir(out_dir)
        self._out_pin = output_dir.PinnedDir.pin(out_dir)
        self.prepare_publishing()  # before code under test runs, and before judging what it could change
        confinement = sandbox.confinement_for(self.workspace)
        if confinement.weakness:
            self.warn(f"confinement: {confinement.weakness}")
        confinement.owns(out_dir)
        if confinement.mode is not sandbox.ChildMode.SAME_USER:
            self.files.protect(confinement.uid)
        stale = out_dir / RESULTS_NAME
        stale.unlink(
            missing_ok=True
        )  # a self-hosted runner's previous run must never be published as this one
        cache_dir = self.workspace / self.inputs.cache_dir
        if self.inputs.requirements or self.inputs.setup:  # given to code under test: a real directory only
            cache_dir = output_dir.checked(
                cache_dir, self.workspace, f"input cache_dir: {self.inputs.cache_dir}"
            )
        plan = setup_step.SetupPlan(self.inputs.requirements, self.inputs.setup, cache_dir.resolve())
        env = self.child_env()
        with sandbox.private_home(confinement, env) as env:
            python = sys.executable
            if plan.wanted:
                setup_step.check_plan(plan, self.workspace)
                title = "gpuemu-ci: setup (installs what the ops need)"
                with commands.group(title, stream=self.stdout), commands.untrusted_output(self.stdout):
                    setup_step.run_setup(plan, confinement, env=env, workspace=self.workspace)
                env = setup_step.environment_for(plan, env)
                python = str(plan.python)
            request = gate_process.GateRequest(
                config=str((self.workspace / self.inputs.config).resolve()),
                suite=self.inputs.suite.value,
                out_dir=str(out_dir),
                seed=self.inputs.seed,
                require_gpu=self.inputs.require_gpu,
                run=self.run_info(),
                allow_skips=self.inputs.allow_skips,
            )
            argv = [python, "-P", "-m", "gpuemu_ci", "action-gate", gate_process.encode_request(request)]
            started_at = utc_now()
            # What the suite prints is shown, never obeyed: a workflow command that code under test writes to
            # the gate process's output (`::set-output`, `::add-mask`) is not the Action's.
            title = "gpuemu-ci: running the suite"
            with commands.group(title, stream=self.stdout), commands.untrusted_output(self.stdout):
                self.stdout.flush()
                try:
                    child = sandbox.spawn(argv, confinement, env=env, cwd=self.workspace)
                except OSError as exc:
                    raise InfraError(
                        f"could not start the gate process ({python}): {exc.strerror or exc}"
                    ) from None
                forwarded = sandbox.ForwardedSignals(child)
                try:
                    code = child.wait()
                finally:
                    forwarded.restore()
                    sandbox.reap_leftovers()
                self.interrupted_by = forwarded.signal
        # Everything the code under test started is dead now: what is checked here stays as it is.
        tampered = self.files.restore()
        for what in tampered:
            self.stdout.write(
                commands.format_command(
                    "error",
                    f"gpuemu-ci: the code under test changed the runner's {what}; it was put back as it was, with "
                    "only the Action's own lines",
                )
                + "\n"
            )
        self._out_pin.check(self.inputs.output_dir)
        try:  # the gate's own file: not through a link, not a file of anyone else's
            written = read_beneath(
                out_dir,
                RESULTS_NAME,
                "the results.json the gate wrote",
                owners={confinement.uid, os.geteuid()},
            )
        except NotBeneath as exc:
            written = None
            if not exc.missing:
                self.stdout.write(commands.format_command("error", f"gpuemu-ci: {exc.message}") + "\n")
        if written is None:
            if code in (ExitCode.USAGE, ExitCode.INFRASTRUCTURE):
                # It printed why, in the log above (as text: its workflow commands were not obeyed).
                self.stdout.write(
                    commands.format_command(
                        "error",
                        f"gpuemu-ci: the suite could not run (exit {code}); why is in the log of the step",
                    )
                    + "\n"
                )
                raise AlreadyReported(code)
            why, exit_code = lost_run.why_lost(code)
            self.stdout.write(commands.format_command("error", f"gpuemu-ci: {why}") + "\n")
            return lost_run.lost_run(
                config,
                suite=self.inputs.suite.value,
                seed=self.inputs.seed,
                run=self.run_info(),
                started_at=started_at,
                why=why,
                exit_code=exit_code,
            )
        results = from_json(written, source="the results.json the gate wrote")
        # Where and for what it ran is this step's to say, not the code under test's (the report binds it).
        results = msgspec.structs.replace(results, run=self.run_info())
        return _with_tampering(diffed(results, config, baseline), tampered)

    def read_untrusted(self, path: Path, what: str) -> bytes:
        """A file the Action reads that a pull request (or code under test) may have put there: never through a
        link, only the workspace owner's or the Action's own (files.read_beneath)."""
        absolute = Path(os.path.normpath(path if path.is_absolute() else self.workspace / path))
        root = self.workspace if absolute.is_relative_to(self.workspace) else Path(absolute.anchor)
        owners = {self.workspace.stat().st_uid, os.geteuid()}
        return read_beneath(root, absolute.relative_to(root), what, owners=owners)

    def results_path(self) -> Path:
        """The results file named by the `results` input (default: output_dir/results.json)."""
        path = Path(self.inputs.results) if self.inputs.results else self.out_dir / "results.json"
        path = path if path.is_absolute() else self.workspace / path
        if not path.is_file():
            raise UsageError(f"results file not found: {self.relative(path)} (input `results`)")
        return path

    # --- publishing -----------------------------------------------------------------------------------------
    def prepare_publishing(self) -> None:
        """Import everything publishing needs and open the API client (its HTTP stack imports lazily and reads
        the CA bundle): done before code under test runs, which may then change no file this process reads."""
        for name in PUBLISHING_MODULES:
            importlib.import_module(name)
        self.client()

    def publish(self, results: Results, *, comment: bool) -> int:
        """results.json, step summary, SARIF, JUnit, annotations, report, comment and outputs."""
        from gpuemu_ci.render.annotations import render_annotations
        from gpuemu_ci.render.junit import render_junit
        from gpuemu_ci.render.markdown import render_summary
        from gpuemu_ci.render.sarif import render_sarif

        path = write_results(self.out_dir, results)
        links = Links.for_results(results, run_url=self.ctx.run_url)
        sarif = render_sarif(results, job=self.inputs.job_key, source_root=self.workspace)
        atomic_write(self.out_dir / "results.sarif", sarif.encode())
        atomic_write(self.out_dir / "junit.xml", render_junit(results).encode())
        self.stdout.write(render_annotations(results, source_root=self.workspace))
        summary, truncated = commands.fit_step_summary(
            render_summary(results, links), self.files.used("GITHUB_STEP_SUMMARY")
        )
        self.files.add("GITHUB_STEP_SUMMARY", summary)
        if truncated:
            self.warn("the step summary was truncated to GitHub's 1 MiB limit; results.json has everything")
        self.write_report(path, sign=bool(self.inputs.signing_key) and not self.ctx.is_fork)
        regressions = results.compared.regressions if results.compared else 0
        self.outputs.update(
            {
                "verdict": results.verdict.value,
                "ops_passed": results.summary.ops_passed,
                "ops_failed": results.summary.ops_failed,
                "regressions": regressions,
                "results_path": self.relative(path),
            }
        )
        if comment and self.inputs.comment:
            self.outputs["comment_url"] = ""
            if not self.ctx.is_pull_request or self.ctx.pr_number is None:
                pass  # nothing to comment on outside pull requests
            elif self.ctx.token_is_read_only:
                self.notice(
                    "pull request from a fork: the token is read-only, so no comment is posted here; "
                    "the gpuemu-fork-comment workflow posts it from the uploaded results"
                )
            else:
                self.post_comment(results, self.ctx.pr_number)
        return 128 + self.interrupted_by if self.interrupted_by else results.exit_code

    def post_comment(
        self,
        results: Results,
        pr: int,
        *,
        run_url: str | None = None,
        unverified: UnverifiedSource | None = None,
    ) -> None:
        """Posts or updates this job's comment on PR `pr` and sets the `comment_url` output; without a token, a
        warning instead, and what the comment API reports goes out as a warning too."""
        from gpuemu_ci.github.comments import upsert_comment
        from gpuemu_ci.render.markdown import render_comment

        client = self.client()
        if client is None:
            self.warn("no github_token: the PR comment was not posted")
            return
        links = Links.for_results(results, run_url=run_url or self.ctx.run_url)
        body = render_comment(results, links, job=self.inputs.job_key, marker=False, unverified=unverified)
        outcome = upsert_comment(client, self.ctx.repository, pr, body, self.inputs.job_key)
        if outcome.warning:
            self.warn(f"PR comment: {outcome.warning}")
        if outcome.url:
            self.outputs["comment_url"] = outcome.url

    def write_report(self, results: Path, *, sign: bool) -> None:
        """Writes the report of `results` (signed when `sign` and a signing_key is given, else unsigned with a
        notice) and sets the `report_path` output; mode `sign` without a key is a UsageError."""
        from gpuemu_ci.attest import keys
        from gpuemu_ci.attest.signing import sign_results

        signing_key = None
        if sign and self.inputs.signing_key:
            signing_key = keys.load_private_key_pem(self.inputs.signing_key.encode(), "input signing_key")
        elif self.inputs.mode is Mode.SIGN:
            raise UsageError(
                "mode sign needs the signing_key input (a PEM Ed25519 private key from a secret)"
            )
        report = sign_results(results, signing_key, self.env, observed=self.observed)
        path = self.out_dir / REPORT_NAME
        atomic_write(path, report.envelope)
        self.outputs["report_path"] = self.relative(path)
        if signing_key is None and self.inputs.mode is not Mode.SIGN:
            note = "fork pull request without secrets" if self.ctx.is_fork else "no signing_key given"
            self.notice(f"the report is unsigned ({note})")


# What this process imports after the suite ran (publishing, commenting, signing, nightly issues; the codecs
# that HTTP and the renderers use): imported before any code under test runs, so that nothing this process
# runs is read from a file after that point. tests/hostile/test_token_holder.py proves the list complete.
PUBLISHING_MODULES = (
    "encodings.idna",
    "encodings.unicode_escape",
    "encodings.utf_16_be",
    "gpuemu_ci.attest.keys",
    "gpuemu_ci.attest.signing",
    "gpuemu_ci.github.artifacts",
    "gpuemu_ci.github.comments",
    "gpuemu_ci.github.identity",
    "gpuemu_ci.github.issues",
    "gpuemu_ci.render.annotations",
    "gpuemu_ci.render.junit",
    "gpuemu_ci.render.markdown",
    "gpuemu_ci.render.sarif",
)


def _with_tampering(results: Results, tampered: list[str]) -> Results:
    """A run whose code under test wrote to the runner's file commands or event payload is never a pass: what it
    wrote was discarded, and the document says so."""
    if not tampered:
        return results
    notes = tuple(f"the code under test changed the runner's {what}; it was put back" for what in tampered)
    if results.verdict is not Verdict.PASSED:
        return msgspec.structs.replace(results, notes=(*results.notes, *notes))
    return msgspec.structs.replace(
        results, verdict=Verdict.ERROR, exit_code=int(ExitCode.INFRASTRUCTURE), notes=(*results.notes, *notes)
    )
