"""The regression corpus: input snapshots pinned next to gpuemu.toml (`[ci] corpus = "gpuemu-corpus"`), one
folder per op, that every gate run replays before it fuzzes. Cases come from captures of shadow-checked calls
that failed and from the failures of a run (`gpuemu-ci corpus add results.json`), so a fixed bug stays fixed.

A case is stored as its snapshot file (named by the hash of its content, so adding it twice keeps one), which
keeps the exact inputs, dtype (bfloat16 included), shapes and strides; it does not depend on the input
generator, so a corpus survives generator changes."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci.config.model import Config
from gpuemu_ci.errors import ConfigError, UsageError
from gpuemu_ci.plan.model import CaseRef
from gpuemu_ci.results.codec import read_results
from gpuemu_ci.results.snapshots import read_snapshot


@dataclass(frozen=True)
class CorpusCase:
    """One pinned case."""

    op: str
    path: Path

    @property
    def label(self) -> str:
        """How results name the case: `corpus:<file name>`."""
        return f"corpus:{self.path.name}"


def planned(config: Config, op: str) -> list[CaseRef]:
    """The op's pinned cases as the gate runs them, before its fuzzed ones (indices -1, -2, ...: they sort
    first). The seed is the one the snapshot records; the inputs come from the file."""
    refs = []
    for position, case in enumerate(cases(config, op)):
        try:
            seed = int(read_snapshot(case.path)[1]["case_seed"])
        except UsageError as exc:
            raise ConfigError(
                f"the regression corpus holds a file that is not a case: {exc}", path=str(config.path)
            ) from None
        refs.append(CaseRef(op, -1 - position, seed, snapshot=case.path))
    return refs


def corpus_dir(config: Config) -> Path:
    """The corpus directory the config declares (a ConfigError saying how to declare one otherwise)."""
    if config.ci.corpus is None:
        raise ConfigError(
            'no regression corpus is declared: add `corpus = "gpuemu-corpus"` under [ci] in gpuemu.toml',
            path=str(config.path),
        )
    return config.root / config.ci.corpus


def cases(config: Config, op: str | None = None) -> tuple[CorpusCase, ...]:
    """The pinned cases (of one op, or all), in a stable order; none when no corpus is declared."""
    if config.ci.corpus is None:
        return ()
    root = config.root / config.ci.corpus
    folders = [root / op] if op is not None else sorted(p for p in root.glob("*") if p.is_dir())
    return tuple(CorpusCase(folder.name, path) for folder in folders for path in sorted(folder.glob("*.npz")))


def add(config: Config, sources: list[Path]) -> list[CorpusCase]:
    """Pins captures or snapshots (.npz), or every recorded failure of a results.json; returns what was added
    (cases already pinned are not added twice)."""
    target = corpus_dir(config)
    known = {op.name for op in config.ops}
    added: list[CorpusCase] = []
    for source in sources:
        for snapshot in _snapshots_in(source):
            op = str(read_snapshot(snapshot)[1].get("op") or "")
            if op not in known:
                raise UsageError(
                    f"{snapshot} is a case of op {op!r}, which {config.path.name} does not declare"
                )
            destination = target / op / snapshot.name
            if destination.exists():
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(snapshot, destination)
            added.append(CorpusCase(op, destination))
    return added


def _snapshots_in(source: Path) -> list[Path]:
    if source.suffix == ".npz":
        return [source]
    if source.suffix == ".json":
        results = read_results(source)
        found = []
        for op in results.ops:
            for failure in op.failures:
                if failure.snapshot is None:
                    raise UsageError(f"{source}: failure {failure.case_id} has no snapshot to pin")
                found.append(source.parent / failure.snapshot)
        return found
    raise UsageError(f"{source} is neither a snapshot (.npz) nor a results file (.json)")
