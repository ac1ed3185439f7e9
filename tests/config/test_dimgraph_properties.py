"""Properties of op schemas (config/dimgraph.py) and the sizes drawn from them, over generated schemas.

What a user relies on: every case the fuzzer makes from a schema meets every constraint the schema declares,
each drawn dim lies inside its declared range, and each derived dim is exactly its expression; a schema whose
typical sizes cannot meet its constraints is refused at load with a ConfigError, and one they can meet is
accepted. Constraints and derived dims are generated as text that means the same in Python, which judges.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpuemu_ci.config.load import load_config
from gpuemu_ci.config.model import OpSpec
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.fuzz.shapes import draw
from gpuemu_ci.plan.expand import stratum
from gpuemu_ci.plan.model import SizeClass
from gpuemu_ci.rng import SeededRng

FREE = ("A", "B", "C")
CONSTRAINTS = (
    "A <= B",
    "A + B >= C",
    "A % 2 == 0",
    "B in (1, A)",
    "2 * A <= C or C == 1",
    "not A > B + 3",
    "C != A",
    "B // 4 < C",
)
DERIVED = ("A * B", "A + C", "B // 2 + 1", "max(A, C) - min(A, C) + 1")


@dataclass(frozen=True)
class Dim:
    low: int
    high: int
    typical: tuple[int, ...]


@st.composite
def dims(draw_: st.DrawFn) -> Dim:
    low = draw_(st.integers(1, 8))
    high = draw_(st.integers(low, low + 600))
    typical = draw_(st.lists(st.integers(low, high), min_size=1, max_size=3, unique=True))
    return Dim(low, high, tuple(typical))


@dataclass(frozen=True)
class Schema:
    free: dict[str, Dim]
    derived: str | None
    constraints: tuple[str, ...]

    def toml(self) -> str:
        lines = [
            "[[ops]]",
            'name = "op"',
            'op = "m:f"',
            'reference = "m:f"',
            'family = "exact"',
            'dtypes = ["float32"]',
            f"constraints = [{', '.join(repr(c).replace(chr(39), chr(34)) for c in self.constraints)}]",
            "[ops.dims]",
        ]
        for name, dim in self.free.items():
            lines.append(f"{name} = {{ min = {dim.low}, max = {dim.high}, typical = {list(dim.typical)} }}")
        inputs = {"x": '["A", "B"]', "y": '["C"]'}
        if self.derived is not None:
            lines.append(f'D = "{self.derived}"')
            inputs["z"] = '["D"]'
        lines.append("[ops.inputs]")
        lines.extend(f"{name} = {value}" for name, value in inputs.items())
        return "\n".join(lines) + "\n"

    def holds(self, values: dict[str, int]) -> bool:
        return all(python(c, values) for c in self.constraints)

    def typical_can_meet_the_constraints(self) -> bool:
        names = list(self.free)
        return any(
            self.holds(dict(zip(names, combination, strict=True)))
            for combination in product(*(self.free[n].typical for n in names))
        )


def python(text: str, values: dict[str, int]) -> object:
    """What a constraint or derived dim means in Python (the texts above are Python expressions too)."""
    return eval(text, {"__builtins__": {}, "min": min, "max": max}, dict(values))


schemas = st.builds(
    Schema,
    st.fixed_dictionaries({name: dims() for name in FREE}),
    st.none() | st.sampled_from(DERIVED),
    st.lists(st.sampled_from(CONSTRAINTS), max_size=3, unique=True).map(tuple),
)


def load(schema: Schema) -> OpSpec:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "gpuemu.toml"
        path.write_text(schema.toml(), encoding="utf-8")
        return load_config(path).ops[0]


@given(schemas, st.lists(st.integers(0, 2**63), min_size=1, max_size=6))
def test_every_drawn_case_meets_the_schema(schema: Schema, seeds: list[int]) -> None:
    try:
        op = load(schema)
    except ConfigError as exc:
        assert not schema.typical_can_meet_the_constraints(), (
            f"refused a schema its typical sizes meet: {exc}"
        )
        return
    assert schema.typical_can_meet_the_constraints(), "accepted a schema its typical sizes cannot meet"
    for seed in seeds:
        chosen = stratum(op, seed)
        if (
            chosen.size_class is SizeClass.LARGE
        ):  # sized by memory, not by the schema's ranges (fuzz/large.py)
            continue
        try:
            case = draw(op, SeededRng(seed), chosen)
        except ConfigError:
            continue  # no sizes of this class meet the constraints: said as a config error, never a bad case
        values = case.dims
        assert schema.holds(values), (
            f"seed {seed} ({chosen.size_class}): {values} breaks {schema.constraints}"
        )
        for name, dim in schema.free.items():
            assert dim.low <= values[name] <= dim.high, (
                f"seed {seed}: {name} = {values[name]} outside its range"
            )
        if chosen.size_class is SizeClass.TYPICAL:
            assert all(values[name] in dim.typical for name, dim in schema.free.items())
        if schema.derived is not None:
            assert values["D"] == python(schema.derived, values)
