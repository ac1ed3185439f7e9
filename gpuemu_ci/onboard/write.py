"""An inferred op written out: its `[[ops]]` entry as TOML text (with what the calls could not settle as comments
beside it) appended to gpuemu.toml, and a reference module for the user to fill in."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpuemu_ci.onboard.infer import InputDraft, OpDraft

REFERENCES = "gpuemu_refs"  # the package, next to gpuemu.toml, that holds the written references


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _input_line(draft: InputDraft) -> str:
    fields = {"dims": list(draft.dims)}
    for key in ("dtype", "kind", "low", "high", "ignore_value"):
        value = getattr(draft, key)
        if value is not None:
            fields[key] = value
    if draft.contiguous_only:
        fields["layouts"] = ["contiguous"]
    if list(fields) == ["dims"]:
        line = f"{draft.name} = {_toml(draft.dims)}"
    else:
        line = f"{draft.name} = {{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in fields.items()) + " }"
    return line + (f"   # {draft.why}" if draft.why else "")


def reference_spec(draft: OpDraft) -> str:
    """The `reference = "..."` target the drafted reference module gets (`<references
    package>.<module>:reference`)."""
    return f"{REFERENCES}.{module_name(draft.name)}:reference"


def module_name(op_name: str) -> str:
    """A Python module name for an op name: non-word characters become `_`, and `op_` is put in front of one
    that does not start with a letter."""
    name = re.sub(r"\W", "_", op_name).lower()
    return name if name[:1].isalpha() else f"op_{name}"


def entry_text(draft: OpDraft, family: str | None) -> str:
    """The `[[ops]]` entry, with its notes as comments."""
    lines = [
        "",
        f"# Added by `gpuemu-ci add` from {draft.calls} recorded kind(s) of call.",
        *(f"# note: {note}" for note in draft.notes),
        "[[ops]]",
        f"name = {_toml(draft.name)}",
        f"op = {_toml(draft.target)}",
        f"reference = {_toml(reference_spec(draft))}   # fill in {REFERENCES}/{module_name(draft.name)}.py",
        f"framework = {_toml(draft.framework)}",
    ]
    if family:
        lines.append(f"family = {_toml(family)}")
    else:
        lines.append(
            "# family = ...   # elementwise, reduction, scan, softmax, norm, matmul, attention: the error model "
            "(without one: allclose with [validation.tolerances])"
        )
    lines.append(f"dtypes = {_toml(draft.dtypes)}   # the dtypes the calls used")
    if draft.output is not None:
        lines.append(f"output = {_toml(draft.output)}")
    if draft.output_dtype:
        one = (
            draft.output_dtype[0]
            if len(set(draft.output_dtype)) == 1 and len(draft.output_dtype) == 1
            else None
        )
        lines.append(f"output_dtype = {_toml(one if one else draft.output_dtype)}")
    if draft.kwargs:
        pairs = ", ".join(
            f"{name} = {_toml(values[0] if len(values) == 1 and isinstance(values[0], str) else list(values))}"
            for name, values in draft.kwargs.items()
        )
        lines.append(f"kwargs = {{ {pairs} }}")
    lines.append("[ops.dims]")
    for dim in draft.dims:
        if dim.expr:
            lines.append(f"{dim.name} = {_toml(dim.expr)}   # seen: {', '.join(map(str, dim.sizes))}")
        else:
            typical = _typical(dim.sizes)
            lines.append(
                f"{dim.name} = {_toml(typical)}   # seen: {_seen(dim.sizes)}; 1 up to the max is explored"
            )
    lines.append("[ops.inputs]")
    lines += [_input_line(draft_input) for draft_input in draft.inputs]
    return "\n".join(lines) + "\n"


def _typical(sizes: tuple[int, ...]) -> list[int]:
    """At most four of the sizes seen: the smallest, the largest and two between."""
    if len(sizes) <= 4:
        return list(sizes)
    return sorted({sizes[0], sizes[len(sizes) // 3], sizes[2 * len(sizes) // 3], sizes[-1]})


def _seen(sizes: tuple[int, ...]) -> str:
    return ", ".join(map(str, sizes[:8])) + (f" ... ({len(sizes)} sizes)" if len(sizes) > 8 else "")


def reference_text(draft: OpDraft, like: str | None) -> str:
    """The reference module: the op's parameters, and a body to fill in (or a call of `like`)."""
    tensors = [i.name for i in draft.inputs]
    params = [*tensors, *draft.kwargs]
    torch = draft.framework == "torch"
    lines = [
        f'"""The float64 reference of `{draft.name}` ({draft.target}), written by `gpuemu-ci add`.',
        "",
        "gpuemu-ci calls `reference` with float64 copies of each case's inputs (NumPy arrays; float64 tensors when",
        "it differentiates the reference for `backward = true`) and the case's kwargs, and compares the op's output",
        'with what it returns: compute from the inputs as given, in float64."""',
        "",
        "import numpy",
    ]
    if torch:
        lines.append("import torch")
    module = like.rpartition(".")[0] if like else ""
    if module and module not in ("numpy", "torch"):
        lines.append(f"import {module}")
    lines += ["", ""]
    if torch:
        lines += [
            "def _tensor(value):",
            '    """NumPy arrays (the forward check) and tensors (the backward check) alike, as float64 tensors."""',
            "    return value if isinstance(value, torch.Tensor) else torch.from_numpy(numpy.asarray(value))",
            "",
            "",
        ]
    lines.append(f"def reference({', '.join(params)}):")
    if torch and tensors:
        converted = ", ".join(f"_tensor({t})" for t in tensors)
        lines.append(f"    {', '.join(tensors)}{',' if len(tensors) == 1 else ''} = {converted}")
    if like:
        lines += [
            f"    # {like} called with the op's arguments in the op's order: check that the order matches.",
            f"    return {like}({', '.join(params)})",
        ]
    else:
        lines.append(
            f'    raise NotImplementedError("write the float64 reference of {draft.name} in '
            f'{REFERENCES}/{module_name(draft.name)}.py")'
        )
    return "\n".join(lines) + "\n"


def write_op(config: Path, draft: OpDraft, family: str | None, like: str | None) -> tuple[Path, Path]:
    """Append the entry to `config` (created with a [project] table when missing) and write the reference
    module beside it (never over an existing one). Returns (config, reference module)."""
    reference = config.parent / REFERENCES / f"{module_name(draft.name)}.py"
    if not config.exists():
        config.write_text(
            f"[project]\nname = {_toml(config.parent.resolve().name or 'kernels')}\n", encoding="utf-8"
        )
    with open(config, "a", encoding="utf-8") as handle:
        handle.write(entry_text(draft, family))
    reference.parent.mkdir(exist_ok=True)
    init = reference.parent / "__init__.py"
    if not init.exists():
        init.write_text("", encoding="utf-8")
    if not reference.exists():
        reference.write_text(reference_text(draft, like), encoding="utf-8")
    return config, reference
