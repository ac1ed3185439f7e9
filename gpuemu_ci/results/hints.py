"""Hints a failing op's record supports, computed from the results document alone (so a merged run of shards
gives the same hint as an unsharded one): what the user may have left out of the config."""

from __future__ import annotations

from gpuemu_ci.results.model import OpResult, OpStatus

CONTIGUOUS = "contiguous"


def contiguous_only_inputs(op: OpResult) -> dict[str, tuple[str, ...]]:
    """Inputs that were in a non-contiguous layout in every recorded failure of an op some of whose cases
    passed: input name -> the layouts it had there. A weight that fails only when strided is often a parameter
    the op never receives strided (an nn.Module's), or a kernel that ignores its strides."""
    failures = [f for f in op.failures if not f.errored and f.layouts]
    if op.status is not OpStatus.FAILED or not failures or op.cases_passed == 0:
        return {}
    names = set(failures[0].layouts)
    for failure in failures[1:]:
        names &= set(failure.layouts)
    found = {}
    for name in sorted(names):
        layouts = {failure.layouts[name] for failure in failures}
        if CONTIGUOUS not in layouts:
            found[name] = tuple(sorted(layouts))
    return found


def layout_hint(op: OpResult) -> str | None:
    """One line: which inputs every failure had non-contiguous, and how to declare them contiguous."""
    found = contiguous_only_inputs(op)
    if not found:
        return None
    named = ", ".join(f"`{name}` ({', '.join(layouts)})" for name, layouts in found.items())
    first = next(iter(found))
    return (
        f"every failing case had {named} in a non-contiguous layout. If the op only ever receives "
        f"{'it' if len(found) == 1 else 'them'} contiguous (a module's parameter, say), declare that under "
        f'[ops.inputs]: `{first} = {{ dims = [...], layouts = ["contiguous"] }}`; if not, the kernel '
        "mishandles the strides of what it is given"
    )
