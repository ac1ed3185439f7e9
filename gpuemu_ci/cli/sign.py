"""`gpuemu-ci keygen`, `sign` and `verify`: thin commands over `gpuemu_ci.attest`.

Exit codes: keygen and sign use errors.ExitCode (0 done, 2 usage: bad key, bad results file,
missing repo or commit). verify uses VerifyExit: 0 valid, 1 bad signature (wrong key, altered
envelope, unsigned report), 2 expectation mismatch (repo, commit, age, artifact), 3 malformed
input (report or public key). A wrongly spelled flag is a usage error and exits 2, as click does.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from gpuemu_ci.attest import keys
from gpuemu_ci.attest.signing import sign_results
from gpuemu_ci.attest.statement import (
    RunContext,
    Source,
    normalize_commit,
    normalize_repo,
)
from gpuemu_ci.attest.verify_policy import (
    AllOf,
    ArtifactDigest,
    Check,
    CommitIs,
    MaxAge,
    RepoIdIs,
    RepoIs,
    ReportClaims,
    VerdictIs,
    VerifyExit,
    VerifyOutcome,
    format_duration,
    parse_duration,
    verify_report,
)
from gpuemu_ci.cli.main import os_error
from gpuemu_ci.clock import format_utc
from gpuemu_ci.errors import (
    BadSignature,
    ExpectationNotMet,
    GpuemuError,
    MalformedReport,
    UsageError,
    VerifyFailed,
)
from gpuemu_ci.files import atomic_write, cannot_write, read_bounded
from gpuemu_ci.render.escape import terminal_text
from gpuemu_ci.results.model import Verdict

DEFAULT_KEY_ENV = "GPUEMU_SIGNING_KEY"


def _checked(convert: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback applying `convert` to the value(s), with its ValueError as a usage error."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return convert(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None

    return callback


def _digits(text: str) -> str:
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number")
    return text


@click.command("keygen")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Private key file to create (mode 0600); the public key goes to OUTPUT.pub.",
)
@click.option("--force", is_flag=True, help="Replace existing key files.")
def keygen_command(output: Path, force: bool) -> None:
    """Create an Ed25519 signing key pair for signed reports."""
    key = keys.generate()
    private_path, public_path = keys.write_keypair(output, key, force=force)
    click.echo(f"private key: {private_path} (mode 0600; keep it secret, e.g. as secret {DEFAULT_KEY_ENV})")
    click.echo(f"public key:  {public_path} (give it to whoever verifies reports)")
    click.echo(f"key id:      {key.keyid}")
    click.echo(f"fingerprint: {key.public.fingerprint}")


@click.command("sign")
@click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--key", "key_path", type=click.Path(dir_okay=False, path_type=Path), help="Private key file (PEM)."
)
@click.option(
    "--key-env", metavar="NAME", help=f"Read the PEM private key from env var NAME (e.g. {DEFAULT_KEY_ENV})."
)
@click.option(
    "--unsigned", is_flag=True, help="No key available (fork PRs): write an envelope without signatures."
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("gpuemu-report.dsse.json"),
    show_default=True,
    help="Where to write the DSSE envelope.",
)
@click.option(
    "--repo", metavar="O/R", callback=_checked(normalize_repo), help="owner/name [GITHUB_REPOSITORY]."
)
@click.option(
    "--repo-id", metavar="N", callback=_checked(_digits), help="Numeric repository id [GITHUB_REPOSITORY_ID]."
)
@click.option(
    "--commit",
    metavar="SHA",
    callback=_checked(normalize_commit),
    help="Tested commit, full id [results git.commit, GITHUB_SHA].",
)
@click.option(
    "--pr", type=click.IntRange(min=1), metavar="N", help="Pull request number [from GITHUB_EVENT_PATH]."
)
@click.option("--event", metavar="NAME", help="Triggering event name [GITHUB_EVENT_NAME].")
@click.option("--run-id", metavar="N", callback=_checked(_digits), help="Workflow run id [GITHUB_RUN_ID].")
@click.option(
    "--run-attempt", type=click.IntRange(min=1), metavar="N", help="Run attempt [GITHUB_RUN_ATTEMPT]."
)
@click.option("--job", metavar="ID", help="Job id [GITHUB_JOB].")
@click.option("--server-url", metavar="URL", help="Server URL for the commit subject [GITHUB_SERVER_URL].")
def sign_command(
    results: Path,
    key_path: Path | None,
    key_env: str | None,
    unsigned: bool,
    output: Path,
    **flags: Any,
) -> None:
    """Sign RESULTS (results.json) as an in-toto statement in a DSSE envelope.

    The run context comes from the flags, then from the GITHUB_* environment this runs in (in
    Actions: repository, its id, event, run, pull request, and the commit among the run's own),
    then from the results document, whose run claims must agree with that environment (a
    disagreement is refused, exit 2, unless a flag settles it). The statement records where each
    field came from; `verify` shows it. The key is never printed.
    """
    if sum((key_path is not None, key_env is not None, unsigned)) != 1:
        raise UsageError("give exactly one of --key PATH, --key-env NAME or --unsigned")
    signing_key = _load_signing_key(key_path, key_env)
    report = sign_results(results, signing_key, os.environ, RunContext(**flags))
    statement = report.statement
    try:
        atomic_write(output, report.envelope)
    except OSError as e:
        raise cannot_write(output, e) from None

    run = statement["predicate"]["run"]
    what = f"{results} (verdict {statement['predicate']['verdict']}) for {run['repo']}@{run['commit'][:12]}"
    if signing_key is None:
        click.echo(f"wrote an UNSIGNED report for {what} to {output}", err=True)
    else:
        click.echo(f"signed {what} with key {signing_key.keyid} ({signing_key.public.fingerprint})", err=True)
        click.echo(f"wrote {output}", err=True)


@click.command("verify")
@click.argument("report", type=click.Path(path_type=Path))
@click.option(
    "--key",
    "key_paths",
    type=click.Path(path_type=Path),
    multiple=True,
    required=True,
    help="Public key (PEM); repeat to accept any of several keys.",
)
@click.option(
    "--repo", metavar="O/R", callback=_checked(normalize_repo), help="Require this owner/name repository."
)
@click.option(
    "--repo-id", metavar="N", callback=_checked(_digits), help="Require this numeric repository id."
)
@click.option(
    "--commit", metavar="SHA", callback=_checked(normalize_commit), help="Require this commit (full id)."
)
@click.option(
    "--require-verdict",
    type=click.Choice([v.value for v in Verdict]),
    help="Require this verdict (e.g. passed: a valid signature over a failed gate is not enough).",
)
@click.option(
    "--max-age",
    metavar="DURATION",
    callback=_checked(parse_duration),
    help="Require issued_at within e.g. 7d, 12h, 30m, 3600s.",
)
@click.option(
    "--artifact",
    "artifacts",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="Require this file's sha256 among the signed subjects (e.g. gpuemu.toml, a kernel source).",
)
def verify_command(
    report: Path,
    key_paths: tuple[Path, ...],
    repo: str | None,
    repo_id: str | None,
    commit: str | None,
    require_verdict: str | None,
    max_age: Any,
    artifacts: tuple[Path, ...],
) -> None:
    """Verify a signed REPORT offline: the signature first, then the expectations.

    Exit 0 valid, 1 bad signature (or unsigned), 2 expectation mismatch, 3 malformed input.
    """
    try:
        public_keys = [keys.load_public_key_file(path) for path in key_paths]
        data = read_bounded(report, "report")
    except GpuemuError as e:
        raise MalformedReport(e.message) from None
    except OSError as e:  # a path that cannot be opened at all (too long, a loop): malformed input, exit 3
        raise MalformedReport(os_error(e).message) from None
    checks: list[Check] = []
    if repo is not None:
        checks.append(RepoIs(repo))
    if repo_id is not None:
        checks.append(RepoIdIs(repo_id))
    if commit is not None:
        checks.append(CommitIs(commit))
    if require_verdict is not None:
        checks.append(VerdictIs(require_verdict))
    if max_age is not None:
        checks.append(MaxAge(max_age, now=datetime.now(UTC)))
    try:
        checks.extend(ArtifactDigest.from_file(path) for path in artifacts)
    except OSError as e:
        raise MalformedReport(os_error(e).message) from None
    except GpuemuError as e:  # a FIFO, a device, a file past the size cap
        raise MalformedReport(e.message) from None

    outcome = verify_report(
        data, {k.keyid: k.key for k in public_keys}, AllOf(tuple(checks)) if checks else None
    )
    _print_outcome(outcome, public_keys)
    # Messages quote the report's own strings: printed escaped, like every claim above.
    if outcome.exit is VerifyExit.EXPECTATION_MISMATCH:
        raise ExpectationNotMet(f"expectation not met: {terminal_text(outcome.message)}")
    if outcome.exit is not VerifyExit.VALID:
        raise VERIFY_ERRORS[outcome.exit](terminal_text(outcome.message))


VERIFY_ERRORS: dict[VerifyExit, type[VerifyFailed]] = {
    VerifyExit.BAD_SIGNATURE: BadSignature,
    VerifyExit.EXPECTATION_MISMATCH: ExpectationNotMet,
    VerifyExit.MALFORMED: MalformedReport,
}


def _print_outcome(outcome: VerifyOutcome, public_keys: list[keys.PublicKey]) -> None:
    """What the report claims, one line each. Every string from the report is untrusted (a signature says who
    signed, not that the text is harmless): `terminal_text` keeps a newline in a run field from printing a line
    of its own such as "verdict: passed"."""
    if outcome.claims is None:
        return
    claims = _shown(outcome.claims)
    by_id: dict[str, keys.PublicKey] = {k.keyid: k for k in public_keys}
    signers = ", ".join(f"{kid} ({by_id[kid].fingerprint})" for kid in outcome.keyids)
    age = datetime.now(UTC) - claims.issued_at
    when = f"{format_duration(age)} ago" if age >= timedelta(0) else f"{format_duration(-age)} in the future"
    run = [
        f"event {claims.event}" if claims.event else None,
        f"PR #{claims.pr}" if claims.pr else None,
        f"run {claims.run_id}" if claims.run_id else None,
        f"attempt {claims.run_attempt}" if claims.run_attempt else None,
        f"job {claims.job}" if claims.job else None,
    ]
    click.echo(f"signature: valid, key {signers}")
    click.echo(f"repo:      {claims.repo}" + (f" (id {claims.repo_id})" if claims.repo_id else ""))
    click.echo(f"commit:    {claims.commit}")
    click.echo(f"run:       {', '.join(p for p in run if p) or '(not recorded)'}")
    click.echo(f"bound by:  {_bound_by(claims)}")
    click.echo(f"issued_at: {format_utc(claims.issued_at)} ({when})")
    click.echo(f"verdict:   {claims.verdict}")
    for result in outcome.results:
        click.echo(f"{'ok' if result.ok else 'FAILED'}: {terminal_text(result.message)}")
    if outcome.exit is VerifyExit.VALID:
        click.echo(
            "report verified" + ("" if outcome.results else " (signature only: no expectations given)")
        )


SOURCE_WORDS = {
    Source.ENVIRONMENT: "the signer's own environment",
    Source.FLAG: "flags given to the signer",
    Source.ORIGIN: "the clone's origin remote",
    Source.RESULTS: "the results document, unchecked",
}
FIELD_WORDS = {
    "repo_id": "repo id",
    "pr": "PR",
    "run_id": "run",
    "run_attempt": "attempt",
    "server_url": "server",
}


def _bound_by(claims: ReportClaims) -> str:
    """Where the signer took each bound field from: what it saw itself, and what it could only repeat."""
    if not claims.sources:
        return "(not recorded: signed by an older gpuemu-ci)"
    order = [f.name for f in dataclasses.fields(RunContext)]
    known = sorted(claims.sources, key=lambda pair: order.index(pair[0]) if pair[0] in order else len(order))
    parts = []
    for source in Source:
        names = [terminal_text(FIELD_WORDS.get(name, name)) for name, s in known if s == source.value]
        if names:
            parts.append(f"{SOURCE_WORDS[source]}: {', '.join(names)}")
    return "; ".join(parts)


def _shown(claims: ReportClaims) -> ReportClaims:
    """The claims with every string escaped for the terminal."""
    escaped: dict[str, Any] = {
        f.name: terminal_text(getattr(claims, f.name))
        for f in dataclasses.fields(claims)
        if type(getattr(claims, f.name)) is str  # not the enums
    }
    return dataclasses.replace(claims, **escaped)


def _load_signing_key(key_path: Path | None, key_env: str | None) -> keys.SigningKey | None:
    if key_path is not None:
        key = keys.load_private_key_file(key_path)
        mode = key_path.stat().st_mode
        if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            click.echo(f"gpuemu-ci: warning: {key_path} is readable by other users (chmod 600 it)", err=True)
        return key
    if key_env is not None:
        key = keys.load_private_key_env(key_env, os.environ)
        # Nothing started later (hooks, subprocesses) should inherit the key.
        os.environ.pop(key_env, None)
        return key
    return None
