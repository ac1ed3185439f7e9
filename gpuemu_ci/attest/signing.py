"""Results file -> DSSE envelope (signed, or explicitly unsigned): the one path shared by `gpuemu-ci sign`
and the Action's sign/gate modes."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuemu_ci.attest import dsse, keys
from gpuemu_ci.attest.origin import repo_of_origin
from gpuemu_ci.attest.statement import (
    RunContext,
    Source,
    build_statement,
    canonical_bytes,
    ci_commits,
    context_for_results,
)
from gpuemu_ci.files import read_bounded
from gpuemu_ci.results.codec import from_json


@dataclass(frozen=True)
class SignedReport:
    """A report as `gpuemu-ci sign` makes it: the DSSE envelope's JSON, the in-toto statement it carries, and
    whether it is signed (False: an envelope without a signature, made when no key was given)."""

    envelope: bytes  # the DSSE envelope's JSON
    statement: dict[str, Any]
    signed: bool


def sign_results(
    results_path: Path,
    signing_key: keys.SigningKey | None,
    env: Mapping[str, str],
    flags: RunContext | None = None,
    *,
    observed: tuple[RunContext, frozenset[str]] | None = None,
) -> SignedReport:
    """Builds the in-toto statement for a results file and wraps it in a DSSE envelope; without a key the
    envelope has no signatures and the statement says so. `observed`: the run context and commits of `env`,
    when the caller read them already (the Action does, before any code under test could change the event
    payload)."""
    data = read_bounded(results_path, "results file")
    document = from_json(data, source=str(results_path))
    seen, commits = observed if observed is not None else (RunContext.from_environment(env), ci_commits(env))
    context = context_for_results(document, seen, flags or RunContext(), commits)
    if context.repo is None:  # nothing names it (no flag, results.json, CI): the clone's origin, last
        origin = repo_of_origin(Path.cwd())
        if origin is not None:
            context = replace(context, repo=origin, sources=(*context.sources, ("repo", Source.ORIGIN.value)))
    statement = build_statement(
        document,
        results_name=results_path.name,
        results_sha256=hashlib.sha256(data).hexdigest(),
        context=context,
        signer_keyid=None if signing_key is None else signing_key.keyid,
        issued_at=datetime.now(UTC),
        nonce=secrets.token_hex(16),
    )
    payload = canonical_bytes(statement)
    if signing_key is None:
        envelope = dsse.unsigned(payload, dsse.PAYLOAD_TYPE_IN_TOTO)
    else:
        envelope = dsse.sign(payload, dsse.PAYLOAD_TYPE_IN_TOTO, signing_key.private_key, signing_key.keyid)
    return SignedReport(envelope.to_json(), statement, signing_key is not None)
