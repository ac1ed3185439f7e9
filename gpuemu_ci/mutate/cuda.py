"""The mutants of a CUDA `[[kernels]]` source, and what the lint alone can say of them.

Every change the CUDA operators (cuda_operators.py) make in the file's `__global__` and `__device__`
functions is a mutant. Each is compiled as the kernel's own file would be (lint.run.lint_variants: a
temporary copy, the user's file never written) and judged by what the lint can judge:

- it does not compile: `errored`;
- it breaks a rule of `[kernels.artifact_checks]` that the original keeps (a register cap, a required or
  forbidden PTX/SASS pattern): `killed`, by the lint;
- its PTX is the original's, on every arch: `equivalent?` (no input can tell the two apart);
- otherwise only its cases can judge it: on a GPU, for a kernel with a launch table, they run through the
  op's usual CuPy launch (`CudaMutant.task`); anywhere else it is `not run`, never survived or killed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci.backends.cuda import KernelProgram
from gpuemu_ci.backends.interface import OpTask
from gpuemu_ci.config.model import KernelSpec
from gpuemu_ci.lint.model import Toolchain
from gpuemu_ci.lint.run import VariantLint, lint_variants
from gpuemu_ci.mutate.cuda_operators import CudaOperator
from gpuemu_ci.mutate.cuda_source import Function, device_functions, tokenize
from gpuemu_ci.mutate.source import Change, SourceFile, text_digest
from gpuemu_ci.results.base import Severity
from gpuemu_ci.results.kernels import KernelStatus
from gpuemu_ci.results.mutation import MutantStatus

SHOWN_OPCODES = 4  # opcode count changes named in a "not run" mutant's message
COMPILES_PER_JOB = 2  # mutants compiled per lint job between two looks at the deadline


class OriginalDoesNotBuild(Exception):
    """The original source, compiled as its mutants are, does not build: nothing can be compared with it."""


@dataclass(frozen=True)
class CudaMutant:
    """One change to a CUDA source file: the file's whole changed text, compiled in the worker in place of the
    original."""

    id: str
    operator: str
    kernel: str  # the function the change is in
    file: str  # the source as reports show it
    change: Change
    before: str
    after: str
    text: str  # the whole file with the change made

    @property
    def line(self) -> int:
        """The line (1-based) where the change starts."""
        return self.change.span.line

    def task(self, base: OpTask) -> OpTask:
        """The kernel's task with this mutant's text compiled in place of the file's (in the worker, through
        the same NVRTC compile and CuPy launch as the original)."""
        program = KernelProgram.decode(base.op_target.spec)
        changed = dataclasses.replace(program, code=self.text)
        return dataclasses.replace(base, op_target=dataclasses.replace(base.op_target, spec=changed.encode()))


def cuda_mutants(
    spec: KernelSpec, text: str, display: str, operators: Sequence[CudaOperator]
) -> list[CudaMutant]:
    """Every change of every operator in the `__global__` functions the entry names (its `entries`, else all of
    them) and the `__device__` functions they call, each once, in source order per function and operator."""
    source = SourceFile(text)
    functions = _reachable(device_functions(tokenize(text)), {_simple_name(entry) for entry in spec.entries})
    mutants: list[CudaMutant] = []
    seen: set[str] = set()
    for function in functions:
        for operator in operators:
            for change in operator.changes(function, source):
                before, after = source.diff_lines(change)
                key = f"{display}:{spec.name}:{function.name}:{operator.name}:{change.span}:{change.new}"
                identity = text_digest(f"{text_digest(text)}:{key}")
                if identity in seen or before == after:
                    continue
                seen.add(identity)
                changed = source.changed(change)
                mutants.append(
                    CudaMutant(
                        identity, operator.name, function.name, display, change, before, after, changed
                    )
                )
    return mutants


def _reachable(functions: Sequence[Function], entries: set[str]) -> list[Function]:
    """The kernels named (all when none is) and the device functions they call, by name, in source order."""
    by_name = {f.name: f for f in functions}
    wanted = [f.name for f in functions if f.qualifier == "__global__" and (not entries or f.name in entries)]
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        tokens = by_name[name].tokens
        for token in by_name[name].walk():
            called = token.kind == "name" and tokens[token.index + 1].text == "("
            if called and token.text in by_name and by_name[token.text].qualifier == "__device__":
                wanted.append(token.text)
    return [f for f in functions if f.name in seen]


def _simple_name(entry: str) -> str:
    """`block_sum` of `block_sum`, `void ns::block_sum<float>(float const*)` or `ns::block_sum`."""
    head = entry.split("(", 1)[0].split("<", 1)[0].strip()
    return head.rsplit("::", 1)[-1].split()[-1] if head else entry


@dataclass(frozen=True)
class LintJudgement:
    """What the lint made of a mutant: a status (None: only its cases can tell) and why."""

    status: MutantStatus | None
    message: str
    killed_by: str | None = None
    hint: str | None = None


def judge(mutant: CudaMutant, variant: VariantLint, original: VariantLint) -> LintJudgement:
    """The lint's verdict on a mutant, against the original compiled the same way."""
    result = variant.result
    if result.error is not None:
        error = result.error
        where = f" (line {error.line})" if error.line else ""
        return LintJudgement(MutantStatus.ERRORED, f"it does not compile{where}: {error.message}")
    if result.status is KernelStatus.ERROR:
        return LintJudgement(MutantStatus.ERRORED, "the compiler could not build it")
    broken = [v for v in result.violations if v.severity is Severity.ERROR]
    if broken:
        return LintJudgement(MutantStatus.KILLED, broken[0].message, killed_by=f"lint:{broken[0].metric}")
    if variant.ptx_digest is not None and variant.ptx_digest == original.ptx_digest:
        return LintJudgement(
            MutantStatus.EQUIVALENT,
            "it compiles to the original's PTX on every arch: no input can tell them apart",
        )
    return LintJudgement(None, _ptx_change(variant, original), hint=_lint_hint(mutant, variant, original))


def _ptx_change(variant: VariantLint, original: VariantLint) -> str:
    """The lint passed it: how its PTX differs (the opcode counts that changed), for the "not run" message."""
    before, after = original.ptx_counts, variant.ptx_counts
    changed = sorted(
        (op for op in set(before) | set(after) if before.get(op, 0) != after.get(op, 0)),
        key=lambda op: (-abs(after.get(op, 0) - before.get(op, 0)), op),
    )
    shown = ", ".join(f"{op} {before.get(op, 0)} → {after.get(op, 0)}" for op in changed[:SHOWN_OPCODES])
    more = f" and {len(changed) - SHOWN_OPCODES} more" if len(changed) > SHOWN_OPCODES else ""
    what = f"its PTX differs ({shown}{more})" if shown else "its PTX differs (the same opcode counts)"
    return f"the lint passed it; {what}"


# operator -> (the PTX opcode families its change can remove, what they are, a pattern that requires them)
_REQUIRED_BY_LINT = {
    "barrier_removed": (("bar.", "barrier."), "barrier", r"^(bar|barrier)\."),
    "atomic_to_store": (("atom.", "red."), "atomic", r"^(atom|red)\."),
}


def _lint_hint(mutant: CudaMutant, variant: VariantLint, original: VariantLint) -> str | None:
    """The check that would kill this mutant without a GPU, when its PTX lost every instruction of a kind
    the original has (the last barrier, the last atomic)."""
    rule = _REQUIRED_BY_LINT.get(mutant.operator)
    if rule is None:
        return None
    prefixes, what, pattern = rule

    def count(counts: dict[str, int]) -> int:
        return sum(n for opcode, n in counts.items() if opcode.startswith(prefixes))

    if not count(original.ptx_counts) or count(variant.ptx_counts):
        return None
    toml = pattern.replace("\\", "\\\\")
    return (
        f'its PTX has no {what} instruction left: `required_patterns = ["{toml}"]` in '
        "[kernels.artifact_checks] makes the lint kill it without a GPU"
    )


def lint_mutants(
    spec: KernelSpec,
    text: str,
    mutants: Sequence[CudaMutant],
    *,
    toolchain: Toolchain,
    root: Path,
    archs: Sequence[str] | None,
    jobs: int,
    deadline: float,
    on_judged: Callable[[CudaMutant, LintJudgement], None] = lambda mutant, judgement: None,
) -> tuple[dict[str, LintJudgement], bool]:
    """The lint's judgement of each mutant (by id), compiled `jobs` at a time beside the original (`text`),
    and whether the deadline stopped it before every mutant was compiled. Raises OriginalDoesNotBuild."""
    judged: dict[str, LintJudgement] = {}
    original: VariantLint | None = None
    chunk = max(1, jobs) * COMPILES_PER_JOB
    for start in range(0, len(mutants), chunk):
        if time.monotonic() > deadline:
            return judged, True
        batch = mutants[start : start + chunk]
        texts = ([text] if original is None else []) + [m.text for m in batch]
        linted = lint_variants(spec, texts, archs=archs, jobs=jobs, root=root, toolchain=toolchain)
        if original is None:
            original, linted = linted[0], linted[1:]
            if original.result.error is not None or original.ptx_digest is None:
                why = original.result.error.message if original.result.error else "no PTX came out"
                raise OriginalDoesNotBuild(
                    f"the original, compiled as its mutants are, does not build: {why}"
                )
        for mutant, variant in zip(batch, linted, strict=True):
            judged[mutant.id] = judge(mutant, variant, original)
            on_judged(mutant, judged[mutant.id])
    return judged, False


def source_display(path: Path, root: Path) -> str:
    """The file as reports show it: relative to `root` (gpuemu.toml's directory) when it lies under it, else
    its name."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name
