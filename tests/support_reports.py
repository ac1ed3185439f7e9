"""Fixtures for signed reports, registered for every test by tests/conftest.py (`pytest_plugins`).

Shared fixtures for the signing tests: a results document as `gpuemu-ci run` writes it, keys.

Constants reach the tests through the `sample` fixture (not imports), so the tests work under
any pytest import mode.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.attest import dsse, keys, statement
from gpuemu_ci.results.codec import from_json

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
CONFIG_TEXT = b'[project]\nname = "quickstart"\n'
KERNEL_TEXT = b"__global__ void gelu_kernel(float* y, const float* x, int n) {}\n"


def results_document(**overrides: Any) -> dict[str, Any]:
    """A results.json (schema version 2) for one failing op, one skipped op and one kernel."""

    def op(name: str, status: str, **fields: Any) -> dict[str, Any]:
        return {
            "name": name,
            "status": status,
            "family": "softmax",
            "comparator": "bound",
            "line": 3,
            "framework": "numpy",
            "interpreter": None,
            "skip_reason": None,
            "message": None,
            "cases_total": 0,
            "cases_passed": 0,
            "cases_failed": 0,
            "cases_errored": 0,
            "dtypes": [],
            "failures": [],
            **fields,
        }

    def row(dtype: str, status: str, failed: int, headroom: float, error: float) -> dict[str, Any]:
        return {
            "dtype": dtype,
            "status": status,
            "cases_total": 6,
            "cases_failed": failed,
            "cases_errored": 0,
            "worst_headroom": headroom,
            "max_abs_error": error,
            "comparator": "bound",
        }

    failure = {
        "case_id": "softmax/7",
        "case_index": 7,
        "case_seed": 18446744073709551557,
        "dtype": "float16",
        "shapes": {"x": [4, 65]},
        "strides": {"x": [65, 1]},
        "layouts": {"x": "contiguous"},
        "kwargs": {},
        "distribution": "regular",
        "kind": "mismatch",
        "message": "worst error 812x the allowed",
        "comparator": "bound",
        "headroom": 812.0,
        "max_abs_error": 0.31,
        "worst_index": [0, 64],
        "exceeded": 3,
        "total": 260,
        "snapshot": None,
        "replay": "gpuemu-ci replay --op softmax --seed 18446744073709551557",
    }
    document: dict[str, Any] = {
        "schema_version": "2",
        "tool": {"name": "gpuemu-ci", "version": "0.1.0"},
        "generator_version": "2",
        "seed": 12345,
        "suite": "quick",
        "started_at": "2026-11-22T10:00:00Z",
        "finished_at": "2026-11-22T10:01:00Z",
        "config": {"path": "gpuemu.toml", "sha256": hashlib.sha256(CONFIG_TEXT).hexdigest(), "project": "q"},
        "environment": {
            "python": "3.11.7",
            "numpy": "2.4.6",
            "platform": "Linux-x86_64",
            "executable": "python3",
            "gpu": None,
        },
        "git": {"commit": COMMIT, "ref": "refs/heads/main"},
        "verdict": "failed",
        "exit_code": 1,
        "cut_short": False,
        "summary": {"duration_s": 1.5},
        "ops": [
            op(
                "softmax",
                "failed",
                cases_total=12,
                cases_passed=11,
                cases_failed=1,
                dtypes=[row("float32", "passed", 0, 0.12, 1.2e-7), row("float16", "failed", 1, 812.0, 0.31)],
                failures=[failure],
            ),
            op("gemm", "skipped", skip_reason="no GPU", family="matmul", comparator=None),
        ],
        "kernels": [
            {
                "name": "gelu",
                "source": "kernels/gelu.cu",
                "source_sha256": hashlib.sha256(KERNEL_TEXT).hexdigest(),
                "line": 20,
                "status": "passed",
                "archs": ["sm_80"],
                "arch_source": "config",
                "entries": [],
                "violations": [],
                "error": None,
            }
        ],
        "lint": {"status": "ran", "toolchain": None},
        "diff": None,
        "run": {
            "repo": "octo/kernels",
            "repo_id": "42",
            "run_id": "9000000001",
            "run_attempt": 1,
            "pr": 5,
            "event": "pull_request",
            "server_url": "https://github.com",
            "job": "gate",
        },
    }
    document.update(overrides)
    return document


@dataclass(frozen=True)
class Sample:
    """What the fixtures are built from."""

    commit: str
    other_commit: str
    config_text: bytes
    kernel_text: bytes
    results: Callable[..., dict[str, Any]]


@pytest.fixture(scope="session")
def sample() -> Sample:
    return Sample(COMMIT, OTHER_COMMIT, CONFIG_TEXT, KERNEL_TEXT, results_document)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A checkout-like directory: gpuemu.toml, a kernel source and results.json."""
    (tmp_path / "gpuemu.toml").write_bytes(CONFIG_TEXT)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "gelu.cu").write_bytes(KERNEL_TEXT)
    (tmp_path / "results.json").write_text(json.dumps(results_document(), indent=2))
    return tmp_path


@pytest.fixture(scope="session")
def signing_key() -> keys.SigningKey:
    return keys.generate()


@pytest.fixture(scope="session")
def other_key() -> keys.SigningKey:
    return keys.generate()


@pytest.fixture(scope="session")
def make_envelope(sample: Sample) -> Callable[..., bytes]:
    """Build a report envelope through the library (for issued_at and content the CLI won't fake).

    `key=None` gives an unsigned envelope; `statement_edit` may change the statement before signing.
    """

    def make(
        key: keys.SigningKey | None,
        *,
        results: dict[str, Any] | None = None,
        issued_at: datetime | None = None,
        statement_edit: Callable[[dict[str, Any]], None] | None = None,
        **context: Any,
    ) -> bytes:
        data = json.dumps(results if results is not None else sample.results()).encode()
        document = from_json(data)
        run_context = statement.context_for_results(
            document, statement.RunContext(), statement.RunContext(**context)
        )
        built = statement.build_statement(
            document,
            results_name="results.json",
            results_sha256=hashlib.sha256(data).hexdigest(),
            context=run_context,
            signer_keyid=None if key is None else key.keyid,
            issued_at=issued_at or datetime.now(UTC),
            nonce="00" * 16,
        )
        if statement_edit is not None:
            statement_edit(built)
        payload = statement.canonical_bytes(built)
        if key is None:
            return dsse.unsigned(payload, dsse.PAYLOAD_TYPE_IN_TOTO).to_json()
        return dsse.sign(payload, dsse.PAYLOAD_TYPE_IN_TOTO, key.private_key, key.keyid).to_json()

    return make
