"""The key reference (gpuemu_ci/config/keys.py, rendered into docs/config.md) against the loader that reads
the keys: a key the loader reads but the reference does not list, an alias it does not name, an example that
is not TOML, or a default the loader does not actually use all fail here."""

from __future__ import annotations

import ast
import dataclasses
import tomllib
from pathlib import Path

import pytest

from gpuemu_ci.config import model
from gpuemu_ci.config.keys import KEYS
from gpuemu_ci.config.load import load_config

CONFIG_SOURCES = Path(model.__file__).parent
READER_METHODS = {"string", "integer", "choice", "raw", "boolean", "number", "string_list", "table", "has"}
# Keys read inside a value whose shape the reference describes in that key's type column.
DESCRIBED_IN_A_TYPE = {
    "min",
    "max",
    "typical",
    "expr",  # [ops.dims] <dim> = { min, max, typical } / { expr, ... }
    "atol",
    "rtol",  # tolerances: { atol, rtol }
    "pattern",
    "target",  # required/forbidden patterns: { pattern, target }
}
# Tables: each is a header in the reference (or a key whose rows are in its own table).
TABLES = {"project", "validation", "ci", "policies", "ops", "kernels", "tolerances", "dims", "kwargs",
          "launch", "artifact_checks", "required_patterns", "forbidden_patterns", "triton"}  # fmt: skip


def _loader_trees() -> list[ast.Module]:
    """The loader's modules (keys.py, the reference itself, is not one)."""
    return [
        ast.parse(source.read_text(encoding="utf-8"))
        for source in sorted(CONFIG_SOURCES.glob("*.py"))
        if source.name != "keys.py"
    ]


def _keys_the_loader_reads() -> set[str]:
    """Every literal key passed to a TableReader method in gpuemu_ci/config/."""
    keys = set()
    for tree in _loader_trees():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in READER_METHODS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                keys.add(node.args[0].value)
    return keys


def _aliases_the_loader_accepts() -> set[str]:
    """The alias spellings in `aliases={...}` arguments and *_ALIASES dicts of gpuemu_ci/config/."""
    aliases = set()
    for tree in _loader_trees():
        for node in ast.walk(tree):
            value = None
            if (isinstance(node, ast.keyword) and node.arg == "aliases") or (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id.endswith("ALIASES") for t in node.targets)
            ):
                value = node.value
            if isinstance(value, ast.Dict):
                aliases |= {
                    k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                }
    return aliases


def test_every_key_the_loader_reads_is_in_the_reference() -> None:
    documented = {k.key for k in KEYS}
    read = _keys_the_loader_reads()
    assert len(read) > 60, "the scan found too few keys: has the loader stopped using TableReader?"
    missing = read - documented - DESCRIBED_IN_A_TYPE - TABLES
    assert not missing, (
        f"keys the loader reads that gpuemu_ci/config/keys.py does not list: {sorted(missing)}"
    )


def _names_the_loader_mentions() -> set[str]:
    """Every identifier-like string constant in the loader: keys read through helpers (`_bound(sub, "low")`,
    `exprs("grid", True)`) are among them."""
    return {
        node.value
        for tree in _loader_trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier()
    }


@pytest.mark.slow
def test_every_documented_key_is_one_the_loader_reads() -> None:
    stale = {k.key for k in KEYS if not k.key.startswith("<")} - _names_the_loader_mentions()
    assert not stale, f"listed in gpuemu_ci/config/keys.py but read nowhere: {sorted(stale)}"


def test_every_alias_is_named() -> None:
    named = {a for k in KEYS for a in k.aliases}
    assert _aliases_the_loader_accepts() == named


@pytest.mark.parametrize("key", KEYS, ids=lambda k: f"{k.table}.{k.key}")
def test_every_example_is_a_toml_value(key: object) -> None:
    tomllib.loads(f"value = {key.example}")  # type: ignore[attr-defined]


def test_the_defaults_shown_are_the_ones_the_loader_uses(tmp_path: Path) -> None:
    """A config that sets nothing in [validation], [ci] and [policies] gets exactly the model's defaults, which
    are the ones the reference prints."""
    config = tmp_path / "gpuemu.toml"
    config.write_text(
        '[[ops]]\nname = "x"\nop = "m:f"\nreference = "m:g"\ninputs = ["x"]\n', encoding="utf-8"
    )
    loaded = load_config(config)
    assert loaded.validation == model.Validation()
    assert loaded.ci == model.CiSettings()
    assert loaded.policies == model.Policies()
    op = loaded.ops[0]
    assert op.error_model == model.ErrorModel()
    assert op.execution == model.Execution()
    assert dataclasses.replace(op.targets, op="", reference="") == model.OpTargets("", "")
