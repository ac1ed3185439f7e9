"""Mutant verdicts kept between runs: one small JSON file per verdict, named by a digest of everything the
verdict depends on that the tool can see.

- A verdict of the op's suite: the tool and generator versions, the config file, the op, the seed, the suite
  and its cases, the kernel file's text and the change (the mutant's id covers both), and the original's
  outputs on every case, bit for bit (a change to the op's wrapper or to anything else it runs shows there).
- A verdict of the lint alone (a CUDA mutant that does not compile, breaks an artifact check or compiles to
  the original's PTX): the tool version, the config file (flags, archs, checks), the kernel, the change and
  the toolchain's versions.

A mutant that was not run is never kept. `--no-cache` ignores the directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from gpuemu_ci import __version__
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.mutate.source import text_digest
from gpuemu_ci.results.mutation import MutantResult

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpuemu_ci.calls import CaseReport
    from gpuemu_ci.config.model import Config
    from gpuemu_ci.lint.model import Toolchain
    from gpuemu_ci.pipeline.settings import Settings
    from gpuemu_ci.plan.model import CaseRef


class VerdictCache:
    """Mutants' verdicts on disk, one JSON file per key. A key covers everything the verdict depends on
    (versions, config, seed, suite, the original's outputs, the mutant), so a hit is the verdict a re-run
    would give."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def suite_key(
        config: Config,
        settings: Settings,
        op: str,
        cases: Sequence[CaseRef],
        original: Mapping[int, CaseReport],
        mutant: str,
    ) -> str:
        """The key of a verdict of the op's suite on mutant `mutant` (its id)."""
        outputs = [[report.outcome, report.outputs_digest] for _, report in sorted(original.items())]
        parts = [
            __version__,
            GENERATOR_VERSION,
            config.sha256,
            op,
            settings.seed,
            settings.suite.value,
            [ref.case_id for ref in cases],
            mutant,
            outputs,
        ]
        return _digest(parts)

    @staticmethod
    def lint_key(config: Config, settings: Settings, kernel: str, toolchain: Toolchain, mutant: str) -> str:
        """The key of a verdict of the lint alone on CUDA mutant `mutant` (its id)."""
        tools = [
            toolchain.nvcc_build or toolchain.nvcc_version,
            toolchain.nvrtc_version,
            toolchain.ptxas_version,
        ]
        parts = ["lint", __version__, config.sha256, kernel, list(settings.archs), tools, mutant]
        return _digest(parts)

    def get(self, key: str) -> MutantResult | None:
        """The cached verdict for `key`, or None when there is none or it cannot be read (the mutant is then
        run again)."""
        path = self.directory / f"{key}.json"
        try:
            return msgspec.json.decode(path.read_bytes(), type=MutantResult)
        except (OSError, msgspec.DecodeError):
            return None  # missing, unreadable or from another version of the model: run it again

    def put(self, key: str, result: MutantResult) -> None:
        """Write atomically; a cache that cannot be written costs a re-run, never the run."""
        with contextlib.suppress(OSError):
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(msgspec.json.encode(msgspec.structs.replace(result, cached=False)))
            os.replace(temporary, self.directory / f"{key}.json")


def _digest(parts: Sequence[object]) -> str:
    return text_digest(json.dumps(parts, sort_keys=True, default=str))
