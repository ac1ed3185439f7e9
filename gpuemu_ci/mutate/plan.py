"""Which mutants an op gets: every change the operators make in the kernels its suite ran (the census the
original run took in the workers), numbered in a fixed order, and the selection `--max-mutants` keeps.

The order is a function of the kernels' sources and the seed alone: the kernels sorted by file and line, each
operator's mutants shuffled by a generator seeded with the master seed and the operator's name, then taken
in turn from each operator (so that a small --max-mutants still tries every kind of bug). Nothing depends on
hash order or on which worker ran which case.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from gpuemu_ci.backends.interface import KernelPatch, OpTask
from gpuemu_ci.calls import LaunchedKernel
from gpuemu_ci.mutate import cuda_operators
from gpuemu_ci.mutate.cuda_operators import CudaOperator
from gpuemu_ci.mutate.kernel import find_kernel
from gpuemu_ci.mutate.source import Change, SourceFile, text_digest
from gpuemu_ci.mutate.triton_operators import OPERATORS, Operator


@dataclass(frozen=True)
class KernelSource:
    """A kernel the op ran, with its file's text as read now."""

    kernel: LaunchedKernel
    display: str  # the file as reports show it (relative to gpuemu.toml's directory, else the module's path)
    text: str

    @property
    def label(self) -> str:
        """`module.kernel`: how reports and mutant ids name the kernel."""
        return f"{self.kernel.module}.{self.kernel.name}"


@dataclass(frozen=True)
class Mutant:
    """One change to a Triton kernel's source; patched into the op's module in the worker, in memory (the file
    on disk is never written)."""

    id: str
    operator: str
    source: KernelSource
    change: Change
    before: str
    after: str

    @property
    def line(self) -> int:
        """The line (1-based) where the change starts."""
        return self.change.span.line

    @property
    def kernel(self) -> str:
        """The kernel changed, as `module.kernel`."""
        return self.source.label

    @property
    def file(self) -> str:
        """The changed file, as reports show it."""
        return self.source.display

    def patch(self) -> KernelPatch:
        """The patch that replaces the kernel by its changed source in the worker."""
        changed = SourceFile(self.source.text).changed(self.change)
        kernel = self.source.kernel
        return KernelPatch(kernel.module, kernel.name, kernel.path, changed, f"mutant {self.id}")

    def task(self, base: OpTask) -> OpTask:
        """The op's task with this mutant's kernel swapped in, in memory, in the worker."""
        return dataclasses.replace(base, patches=(self.patch(),))


class AnyMutant(Protocol):
    """What the run needs of a mutant of either language (plan.Mutant, cuda.CudaMutant)."""

    @property
    def id(self) -> str:
        """A digest of the file's text, the kernel, the operator and the change: the same mutant has the same id in
        every run of the same source (the verdict cache's key includes it)."""
        ...

    @property
    def operator(self) -> str:
        """The name of the operator that made it."""
        ...

    @property
    def kernel(self) -> str:
        """The kernel changed, as reports name it."""
        ...

    @property
    def file(self) -> str:
        """The changed file, as reports show it."""
        ...

    @property
    def line(self) -> int:
        """The line (1-based) where the change starts."""
        ...

    @property
    def before(self) -> str:
        """The text the change replaces."""
        ...

    @property
    def after(self) -> str:
        """The text put in its place."""
        ...

    def task(self, base: OpTask) -> OpTask:
        """The op's task `base` with this mutant compiled or patched in place of the original."""
        ...


M = TypeVar("M", bound=AnyMutant)


def operator_names() -> tuple[str, ...]:
    """Every operator's name, Triton's then CUDA's own, each once."""
    names = [op.name for op in OPERATORS] + [op.name for op in cuda_operators.OPERATORS]
    return tuple(dict.fromkeys(names))


def operators_named(names: Sequence[str]) -> tuple[tuple[Operator, ...], tuple[CudaOperator, ...]]:
    """The Triton and the CUDA operators called `names` (all of them when empty); ValueError naming an unknown
    one. A name both sets share (`bound_flipped`) selects both."""
    known = operator_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown operator {unknown[0]!r}; operators: {', '.join(known)}")
    if not names:
        return OPERATORS, cuda_operators.OPERATORS
    return (
        tuple(op for op in OPERATORS if op.name in names),
        tuple(op for op in cuda_operators.OPERATORS if op.name in names),
    )


def kernel_sources(kernels: Iterable[LaunchedKernel], root: Path) -> tuple[KernelSource, ...]:
    """The kernels the op ran that can be changed: those compiled from a file that exists, outside Triton's own
    package (`tl.sum` and friends are `@triton.jit` functions too), sorted by file and line."""
    found: dict[tuple[str, str], KernelSource] = {}
    for kernel in kernels:
        if kernel.module == "triton" or kernel.module.startswith("triton."):
            continue
        path = Path(kernel.path)
        if not path.is_file():
            continue  # code without a file (a mutant's own, a string exec'd): nothing to change
        try:
            display = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            display = kernel.module.replace(".", "/") + ".py"
        found.setdefault((kernel.path, kernel.name), KernelSource(kernel, display, path.read_text("utf-8")))
    return tuple(sorted(found.values(), key=lambda k: (k.display, k.kernel.line, k.kernel.name)))


def all_mutants(sources: Sequence[KernelSource], operators: Sequence[Operator]) -> list[Mutant]:
    """Every change of every operator in every kernel, each once, in source order per operator."""
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for source in sources:
        text = SourceFile(source.text)
        kernel = find_kernel(text, source.kernel.name, source.kernel.line)
        if kernel is None:
            continue
        for operator in operators:
            for change in operator.changes(kernel):
                before, after = text.diff_lines(change)
                span = change.span
                key = f"{source.display}:{source.kernel.name}:{operator.name}:{span}:{change.new}"
                identity = text_digest(f"{text_digest(source.text)}:{key}")
                if identity in seen or before == after:
                    continue
                seen.add(identity)
                mutants.append(Mutant(identity, operator.name, source, change, before, after))
    return mutants


def ordered(mutants: Sequence[M], operators: Sequence[str], seed: int) -> list[M]:
    """The plan's order: each operator's mutants shuffled from the seed, then one of each operator in turn."""
    queues = []
    for operator in operators:
        mine = [m for m in mutants if m.operator == operator]
        random.Random(f"gpuemu-mutate:{seed}:{operator}").shuffle(mine)
        queues.append(mine)
    order: list[M] = []
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop(0))
    return order
