"""The lock files (requirements/*.lock) as a fresh machine installs them: nothing of the machine that wrote them
(a local index, a --find-links folder, a path), and dev.lock pins, with hashes, every requirement that
pyproject.toml and requirements/dev.in declare, at a version they accept."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements"
LOCKS = sorted(REQUIREMENTS.glob("*.lock"))
# Options that point pip somewhere other than PyPI, and paths only one machine has.
MACHINE_SPECIFIC = re.compile(
    r"^\s*(-i|-f|--index-url|--extra-index-url|--find-links|--trusted-host|-e|--editable)\b"
    r"|file:/|(^|[\s=@])/(opt|work|root|home|tmp|srv|mnt|Users)/"
)


@pytest.mark.parametrize("lock", LOCKS, ids=lambda path: path.name)
def test_no_lock_names_an_index_a_find_links_folder_or_a_local_path(lock: Path) -> None:
    offending = [
        line for line in lock.read_text(encoding="utf-8").splitlines() if MACHINE_SPECIFIC.search(line)
    ]
    assert offending == [], f"{lock.name} carries this machine's pip settings: {offending}"


def test_the_machine_specific_pattern_catches_what_pip_config_writes() -> None:
    """The check above can fail: each kind of line a local pip configuration leaves in a lock is caught."""
    for line in (
        "--extra-index-url file:///opt/pypi/simple",
        "--find-links /opt/wheels",
        "-i https://mirror.example/simple",
        "gpuemu-ci @ file:///home/dev/gpuemu-ci",
        "-e /home/someone/gpuemu-ci",
    ):
        assert MACHINE_SPECIFIC.search(line), line
    assert not MACHINE_SPECIFIC.search("numpy==2.4.6 ; python_full_version < '3.12' \\")
    assert not MACHINE_SPECIFIC.search("    --hash=sha256:" + "0" * 64)


def _locked(text: str) -> dict[str, list[tuple[str, list[str], str]]]:
    """name -> [(version, hashes, marker)] of each entry of a pip-compile/uv hashed lock."""
    entries: dict[str, list[tuple[str, list[str], str]]] = {}
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)(?:\s*;\s*([^-]*?))?\s*((?:--hash=\S+\s*)*)$", line)
        if match:
            name, version, marker, hashes = match.groups()
            entries.setdefault(canonicalize_name(name), []).append(
                (version, re.findall(r"--hash=(sha256:[0-9a-f]{64})", hashes), (marker or "").strip())
            )
    return entries


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    for line in (REQUIREMENTS / "dev.in").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return [Requirement(line) for line in lines]


def test_dev_lock_pins_every_declared_development_requirement_with_hashes() -> None:
    """A requirement added to the test extra or dev.in without running requirements/dev-lock.sh fails here,
    as does a lock whose pin the declaration no longer accepts."""
    locked = _locked((REQUIREMENTS / "dev.lock").read_text(encoding="utf-8"))
    problems = []
    for requirement in _declared():
        pins = locked.get(canonicalize_name(requirement.name))
        if not pins:
            problems.append(f"{requirement.name}: not in dev.lock")
            continue
        for version, hashes, _marker in pins:
            if not hashes:
                problems.append(f"{requirement.name}=={version}: no hash")
            if not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"{requirement.name}=={version}: outside {requirement.specifier}")
    assert problems == [], "run requirements/dev-lock.sh: " + "; ".join(problems)
    assert sum(len(pins) for pins in locked.values()) >= len(_declared())  # the parser read the whole lock


def test_tensorflow_lock_keeps_every_version_dev_lock_pins() -> None:
    """tensorflow.lock is installed on top of dev.lock (.ci/run): a package both name must be the same version
    under the same markers, so that TensorFlow never moves numpy or ml_dtypes (run requirements/dev-lock.sh)."""
    dev = _locked((REQUIREMENTS / "dev.lock").read_text(encoding="utf-8"))
    tensorflow = _locked((REQUIREMENTS / "tensorflow.lock").read_text(encoding="utf-8"))
    assert "tensorflow-cpu" in tensorflow
    shared = sorted(set(dev) & set(tensorflow))
    assert {"numpy", "ml-dtypes"} <= set(shared)
    moved = [
        name
        for name in shared
        if sorted((v, m) for v, _, m in dev[name]) != sorted((v, m) for v, _, m in tensorflow[name])
    ]
    assert moved == [], f"tensorflow.lock moves {moved}: run requirements/dev-lock.sh"
