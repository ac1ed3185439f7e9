"""Mutant verdicts kept between runs: one small JSON file per verdict, named by a digest of everything the
verdict depends on that the tool can see: the tool and generator versions, the config file, the op, the seed,
the suite and its case count, the kernel file's text and the change (the mutant's id covers both), and the
original's outputs on every case, bit for bit (a change to the op's wrapper or to anything else it runs
shows there). A mutant that was not run is never kept. `--no-cache` ignores the directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from gpuemu_ci import __version__
from gpuemu_ci.fuzz.values import GENERATOR_VERSION
from gpuemu_ci.mutate.source import text_digest
from gpuemu_ci.results.mutation import MutantResult

if TYPE_CHECKING:
    from gpuemu_ci.config.model import Config
    from gpuemu_ci.mutate.plan import Mutant
    from gpuemu_ci.mutate.run import _Op
    from gpuemu_ci.pipeline.settings import Settings


class VerdictCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def key(self, config: Config, settings: Settings, state: _Op, mutant: Mutant) -> str:
        outputs = [
            [report.outcome, report.outputs_digest] for _, report in sorted(state.original.reports.items())
        ]
        parts = [
            __version__,
            GENERATOR_VERSION,
            config.sha256,
            state.spec.name,
            settings.seed,
            settings.suite.value,
            [ref.case_id for ref in state.cases],
            mutant.id,
            outputs,
        ]
        return text_digest(json.dumps(parts, sort_keys=True, default=str))

    def get(self, key: str) -> MutantResult | None:
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
