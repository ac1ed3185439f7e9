"""action.yml: the inputs and outputs users write against, their defaults, and their documentation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpuemu_ci.github.context import read_inputs
from tests.action.support_files import ACTION_DOC, ACTION_REFERENCE_DOC, ACTION_YML, REPO, load_yaml

# The inputs and outputs issue 9 promises; more may exist, none of these may go missing.
PROMISED_INPUTS = {
    "config", "suite", "seed", "mode", "baseline", "comment", "fail_on_regression", "require_gpu",
    "signing_key", "github_token", "output_dir",
}  # fmt: skip
PROMISED_OUTPUTS = {
    "verdict", "ops_passed", "ops_failed", "regressions", "results_path", "report_path", "comment_url",
}  # fmt: skip
SNAKE_CASE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*\Z")
# https://docs.github.com/en/actions/reference/workflows-and-actions/metadata-syntax#brandingcolor
BRANDING_COLORS = {"white", "black", "yellow", "blue", "green", "orange", "red", "purple", "gray-dark"}


@pytest.fixture(scope="module")
def action() -> dict[str, Any]:
    return load_yaml(ACTION_YML)


@pytest.fixture(scope="module")
def inputs(action: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = action["inputs"]
    return result


def test_is_a_docker_action_built_from_the_dockerfile_beside_it(action: dict[str, Any]) -> None:
    runs = action["runs"]
    assert runs["using"] == "docker"
    assert runs["image"] == "Dockerfile"
    assert (ACTION_YML.parent / runs["image"]).is_file()
    # The image's exec-form ENTRYPOINT must run: args/entrypoint here would replace it.
    assert "entrypoint" not in runs and "args" not in runs


def test_has_name_description_and_valid_branding(action: dict[str, Any]) -> None:
    assert action["name"].strip()
    assert len(action["description"].strip()) > 20
    assert action["branding"]["color"] in BRANDING_COLORS
    assert re.fullmatch(r"[a-z0-9-]+", action["branding"]["icon"])


def test_input_and_output_ids_are_snake_case(action: dict[str, Any]) -> None:
    """Hyphenated ids become INPUT_A-B variables, which POSIX shells drop."""
    for kind in ("inputs", "outputs"):
        bad = [name for name in action[kind] if not SNAKE_CASE.match(name)]
        assert not bad, f"{kind} that are not snake_case: {bad}"


def test_every_promised_input_and_output_exists(action: dict[str, Any]) -> None:
    assert set(action["inputs"]) >= PROMISED_INPUTS
    assert set(action["outputs"]) >= PROMISED_OUTPUTS


def test_every_input_has_a_description_and_a_string_default(inputs: dict[str, dict[str, Any]]) -> None:
    for name, spec in inputs.items():
        assert str(spec.get("description", "")).strip(), name
        # The runner does not enforce `required`; every input works when left out.
        assert spec.get("required", False) is False, name
        assert isinstance(spec.get("default"), str), f"{name}: default must be a string"


def test_outputs_have_descriptions_and_no_value(action: dict[str, Any]) -> None:
    for name, spec in action["outputs"].items():
        assert str(spec.get("description", "")).strip(), name
        assert "value" not in spec, f"{name}: `value` is for composite actions; Docker writes GITHUB_OUTPUT"


def test_defaults_are_sane(inputs: dict[str, dict[str, Any]]) -> None:
    default = {name: spec["default"] for name, spec in inputs.items()}
    assert default["mode"] == "gate"
    assert default["suite"] == "quick"
    assert default["baseline"] == "auto"
    assert default["comment"] in ("true", "false")
    assert default["github_token"] == "${{ github.token }}"
    assert default["signing_key"] == "", "a signing key must never have a default"
    # Empty means "as the config says": a default here would silently override gpuemu.toml.
    assert default["fail_on_regression"] == ""
    assert default["require_gpu"] == ""
    assert default["seed"] == ""
    for name in ("config", "output_dir"):
        path = Path(default[name])
        assert not path.is_absolute() and ".." not in path.parts, f"{name} must stay inside the workspace"


def test_choice_inputs_name_their_choices_in_the_description(inputs: dict[str, dict[str, Any]]) -> None:
    for name, choices in {"mode": ("gate", "baseline", "nightly", "sign", "comment"),
                          "suite": ("quick", "thorough"), "baseline": ("auto", "none")}.items():  # fmt: skip
        description = inputs[name]["description"]
        missing = [c for c in choices if c not in description]
        assert not missing, f"{name}: description does not name {missing}"


def test_the_input_reader_sees_every_input_the_runner_passes(inputs: dict[str, dict[str, Any]]) -> None:
    """The runner sets INPUT_<ID upper-cased> for every input, defaults included."""
    env = {f"INPUT_{name.upper()}": spec["default"] or "x" for name, spec in inputs.items()}
    assert set(read_inputs(env)) == set(inputs)


# --- docs/action-reference.md (generated from action.yml) and docs/action.md -----------------------------------


def _doc_table(heading: str) -> dict[str, list[str]]:
    """Rows of the first table under `### heading`, keyed by the backticked name in the first cell."""
    text = ACTION_REFERENCE_DOC.read_text(encoding="utf-8")
    match = re.search(rf"^### {re.escape(heading)}\n(.*?)(?=^##+ |\Z)", text, re.S | re.M)
    assert match, f"{ACTION_REFERENCE_DOC.name} has no `### {heading}` section"
    rows: dict[str, list[str]] = {}
    for line in match.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        name = re.fullmatch(r"`([a-z0-9_]+)`", cells[0]) if cells else None
        if name:
            assert name.group(1) not in rows, f"{name.group(1)} is documented twice"
            rows[name.group(1)] = cells[1:]
    return rows


def test_docs_list_exactly_the_inputs_with_their_defaults(inputs: dict[str, dict[str, Any]]) -> None:
    rows = _doc_table("Inputs")
    assert set(rows) == set(inputs), (
        f"undocumented: {sorted(set(inputs) - set(rows))}, stale: {sorted(set(rows) - set(inputs))}"
    )
    for name, spec in inputs.items():
        documented = rows[name][0]
        expected = f"`{spec['default']}`" if spec["default"] else "(empty)"
        assert documented == expected, f"{name}: docs say default {documented}, action.yml {expected}"
        assert len(rows[name]) > 1 and rows[name][1], f"{name}: no description in the docs"


def test_docs_list_exactly_the_outputs(action: dict[str, Any]) -> None:
    rows = _doc_table("Outputs")
    assert set(rows) == set(action["outputs"])
    assert all(cells and cells[0] for cells in rows.values())


def test_docs_name_files_that_exist() -> None:
    """The docs name files that exist (so a rename does not leave them pointing at nothing)."""
    text = ACTION_DOC.read_text(encoding="utf-8")
    for relative in ("templates/workflows/", "Dockerfile", "action.yml"):
        assert relative in text
        assert (REPO / relative).exists()


# --- the light variant (light/action.yml) and the release's pinned form -------------------------------------

LIGHT_YML = REPO / "light" / "action.yml"


def test_the_light_action_is_a_subset_of_the_docker_action(inputs: dict[str, dict[str, Any]]) -> None:
    """Same ids, same defaults: a workflow can switch a sign or comment step between the two."""
    light = load_yaml(LIGHT_YML)
    assert light["runs"]["using"] == "composite"
    for name, spec in light["inputs"].items():
        assert name in inputs, name
        if name != "mode":
            assert str(spec.get("default", "")) == str(inputs[name].get("default", "")), name
    assert set(light["outputs"]) <= set(load_yaml(ACTION_YML)["outputs"])


def test_the_light_action_installs_the_hashed_light_lock_and_runs_only_sign_and_comment() -> None:
    light = load_yaml(LIGHT_YML)
    steps = light["runs"]["steps"]
    install = next(s for s in steps if "pip install" in s.get("run", ""))
    assert '--require-hashes -r "$GITHUB_ACTION_PATH/../requirements/light.lock"' in install["run"]
    assert "--no-deps" in install["run"]
    run = next(s for s in steps if s.get("id") == "gpuemu")
    assert run["env"]["GPUEMU_ACTION_MODES"] == "sign,comment"
    assert all(f"INPUT_{name.upper()}" in run["env"] for name in light["inputs"])
    lock = (REPO / "requirements" / "light.lock").read_text(encoding="utf-8")
    assert "nvidia" not in lock and "cupy" not in lock and "--hash=sha256:" in lock


def test_the_release_pins_action_yml_to_the_image_by_digest(tmp_path: Path) -> None:
    import subprocess
    import sys

    copy = tmp_path / "action.yml"
    copy.write_text(ACTION_YML.read_text(encoding="utf-8"), encoding="utf-8")
    reference = "ghcr.io/gpuemu/gpuemu-ci@sha256:" + "ab" * 32
    script = REPO / ".github" / "scripts" / "pin_action_image.py"
    done = subprocess.run([sys.executable, str(script), reference, str(copy)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pinned = load_yaml(copy)
    assert pinned["runs"] == {"using": "docker", "image": f"docker://{reference}"}
    assert pinned["inputs"] == load_yaml(ACTION_YML)["inputs"]  # nothing else changed
    refused = subprocess.run(
        [sys.executable, str(script), "ghcr.io/gpuemu/gpuemu-ci:v1", str(copy)],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "pinned by digest" in refused.stderr
    workflow = load_yaml(REPO / ".github" / "workflows" / "release.yml")
    text = (REPO / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8")
    assert "pin_action_image.py" in text and "steps.push.outputs.digest" in text
    assert workflow["jobs"]["image"]["permissions"] == {"contents": "read", "packages": "write"}
