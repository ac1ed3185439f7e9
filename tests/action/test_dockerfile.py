"""The action's Dockerfile and build context: GitHub's rules for container actions, Python 3.12, the CUDA
wheels from the hashed lock, the package installed from the context, and hadolint.

No Docker daemon is needed: the Dockerfile and .dockerignore are read with Docker's rules, and the
package is built from exactly the files the build context would contain."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from tests.action.support_files import (
    DOCKERFILE,
    DOCKERIGNORE,
    HADOLINT_MISSING,
    REPO,
    STARTER,
    TEMPLATES,
    Instruction,
    copy_sources,
    dockerignore_excludes,
    env_pairs,
    parse_dockerfile,
    tool_or_skip,
)


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def _only(instructions: list[Instruction], keyword: str) -> list[Instruction]:
    return [i for i in instructions if i.keyword == keyword]


def _in_context(path: str) -> bool:
    return not dockerignore_excludes(DOCKERIGNORE.read_text(encoding="utf-8"), path)


def _pyproject() -> dict:
    with (REPO / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)


def test_base_image_is_python_3_12_or_newer_on_debian_slim(instructions: list[Instruction]) -> None:
    """Not the CUDA development image: CUDA comes from NVIDIA's wheels in the lock (several gigabytes less)."""
    (base,) = _only(instructions, "FROM")
    image = base.args.split()[0]
    match = re.fullmatch(r"python:3\.(\d+)(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image)
    assert match and int(match.group(1)) >= 12, image


def test_no_user_and_no_workdir(instructions: list[Instruction]) -> None:
    """GitHub runs container actions as root with the workspace mounted as the working directory."""
    assert not _only(instructions, "USER")
    assert not _only(instructions, "WORKDIR")


def test_nvidia_runtime_variables_expose_the_gpu(instructions: list[Instruction]) -> None:
    env: dict[str, str] = {}
    for instruction in _only(instructions, "ENV"):
        env.update(env_pairs(instruction.args))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert {"compute", "utility"} <= set(env["NVIDIA_DRIVER_CAPABILITIES"].split(","))


def _entrypoint(instructions: list[Instruction]) -> list[str]:
    (entry,) = _only(instructions, "ENTRYPOINT")
    value = json.loads(entry.args)  # exec form is a JSON array; shell form would not parse
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def test_entrypoint_is_exec_form_python(instructions: list[Instruction]) -> None:
    command = _entrypoint(instructions)
    assert command[0] in ("python3", "python")
    assert PurePosixPath(command[1]).name == "entrypoint.py"
    assert PurePosixPath(command[1]).is_absolute(), "the working directory is the workspace, not the image"
    assert not _only(instructions, "CMD"), "CMD would become arguments of the entrypoint"


def _copied_to(instructions: list[Instruction], repo_path: str) -> set[PurePosixPath]:
    """Where COPY puts the repository file ``repo_path`` in the image (empty: nowhere)."""
    places = set()
    for instruction in _only(instructions, "COPY") + _only(instructions, "ADD"):
        assert "--from" not in instruction.args, "multi-stage COPY is not modelled here"
        sources, dest = copy_sources(instruction.args)
        for source in sources:
            source = source.rstrip("/") or "."
            if source == ".":
                places.add(PurePosixPath(dest) / repo_path)
            elif source == repo_path:
                places.add(PurePosixPath(dest) if not dest.endswith("/") else PurePosixPath(dest) / repo_path)
            elif repo_path.startswith(source + "/"):
                places.add(PurePosixPath(dest) / repo_path[len(source) + 1 :])
    return places if _in_context(repo_path) else set()


def test_entrypoint_py_is_copied_where_the_entrypoint_runs_it(instructions: list[Instruction]) -> None:
    target = PurePosixPath(_entrypoint(instructions)[1])
    assert target in _copied_to(instructions, "entrypoint.py")


def test_package_is_installed_from_the_build_context(instructions: list[Instruction]) -> None:
    """`pip install <dir>` where <dir> received pyproject.toml and the package sources."""
    installs = []
    for run in _only(instructions, "RUN"):
        for match in re.finditer(r"pip install\b([^&;|]*)", run.args):
            installs += [arg.strip("\"'") for arg in match.group(1).split() if not arg.startswith("-")]
    project_dirs = {str(p.parent) for p in _copied_to(instructions, "pyproject.toml")}
    local = [arg for arg in installs if arg.split("[", 1)[0].rstrip("/") in project_dirs]
    assert local, f"no `pip install` of the copied project (installs: {installs}, copied to: {project_dirs})"
    root = PurePosixPath(local[0].split("[", 1)[0])
    for needed in ("gpuemu_ci/__init__.py", "gpuemu_ci/cli/main.py", "README.md"):
        assert root / needed in _copied_to(instructions, needed), f"{needed} does not reach {root}"


def _lock_pins() -> dict[str, str]:
    text = (REPO / "requirements" / "image.lock").read_text(encoding="utf-8")
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, re.MULTILINE))


def test_dependencies_come_from_the_lock_by_hash(instructions: list[Instruction]) -> None:
    """Exactly the locked files: --require-hashes (every file checked), --no-deps (nothing resolved here)."""
    lock = PurePosixPath("/action/requirements/image.lock")
    assert lock in _copied_to(instructions, "requirements/image.lock")
    runs = [r.args for r in _only(instructions, "RUN")]
    (install,) = [r for r in runs if "image.lock" in r]
    assert re.search(r"pip install --no-deps --require-hashes -r /action/requirements/image\.lock", install)
    (own,) = [r for r in runs if "pip install" in r and "/action" in r and "image.lock" not in r]
    assert "--no-deps" in own and "--no-build-isolation" in own  # the pinned backend from the lock


def test_the_lock_has_what_the_image_needs(instructions: list[Instruction]) -> None:
    pins = _lock_pins()
    project = _pyproject()
    for requirement in project["project"]["dependencies"]:
        name = re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pins, f"{name} (a dependency of gpuemu-ci) is not in the lock"
    backend = project["build-system"]["requires"]
    assert backend == [f"setuptools=={pins['setuptools']}"], "the pinned build backend is the locked one"
    for wheel in ("nvidia-cuda-nvrtc", "nvidia-cuda-nvcc", "nvidia-cuda-nvdisasm", "cupy-cuda12x"):
        assert wheel in pins, wheel
    assert tuple(int(p) for p in pins["nvidia-cuda-nvrtc"].split(".")[:2]) >= (
        13,
        1,
    )  # lint/nvrtc.MIN_VERSION
    assert pins["nvidia-cuda-nvrtc"] == pins["nvidia-cuda-nvcc"]  # ptxas of NVRTC's own release
    assert "nvidia-nvvm" not in pins  # nvcc's front end: not needed for NVRTC + ptxas


def test_build_checks_the_lint_toolchain_works(instructions: list[Instruction]) -> None:
    runs = " ".join(r.args for r in _only(instructions, "RUN"))
    for tool in ("ptxas", "nvdisasm"):
        assert re.search(rf"\b{tool}\" --version", runs), tool
    assert "t.frontend == 'nvrtc'" in runs and "gpuemu-ci --version" in runs


def test_the_hip_toolchain_is_opt_in_pinned_and_checked(instructions: list[Instruction]) -> None:
    """`--build-arg GPUEMU_HIP=1` adds Debian's HIP toolchain (docs/hip.md), last, so both images share every layer
    above it; the versions are pinned, and the build fails if the lint cannot find the toolchain it installed."""
    args = [i.args for i in _only(instructions, "ARG")]
    assert 'GPUEMU_HIP=""' in args
    runs = _only(instructions, "RUN")
    hip = runs[-1].args
    assert hip.startswith('if [ -n "$GPUEMU_HIP" ]; then')
    for package in ("clang-15=", "lld-15=", "llvm-15=", "rocm-device-libs=", "libamdhip64-dev="):
        assert package in hip, package
    assert "discover_hip_toolchain" in hip and "assert not t.missing" in hip
    assert instructions.index(runs[-1]) == len(instructions) - 2  # then only the ENTRYPOINT


def test_dockerignore_keeps_the_package_and_drops_the_rest() -> None:
    kept = [
        "pyproject.toml",
        "README.md",
        "entrypoint.py",
        "gpuemu_ci/__init__.py",
        "gpuemu_ci/templates/workflows/gpuemu-pr.yml",
        "gpuemu_ci/templates/starter/gpuemu.toml",
        "requirements/image.lock",
    ]
    dropped = [
        ".git/config",
        "tests/action/test_dockerfile.py",
        "examples/quickstart/gpuemu.toml",
        "gpuemu_ci/__pycache__/errors.cpython-311.pyc",
        "gpuemu-out/results.json",
        ".github/workflows/ci.yml",
    ]
    assert [p for p in kept if not _in_context(p)] == []
    assert [p for p in dropped if _in_context(p)] == []


def test_dockerignore_reader_follows_docker_rules() -> None:
    """The reader the tests above rely on: last match wins, parents count, `!` re-includes."""
    rules = "*\n!keep\nkeep/**/*.pyc\n"
    assert dockerignore_excludes(rules, "other.txt")
    assert not dockerignore_excludes(rules, "keep/a/b.py")
    assert dockerignore_excludes(rules, "keep/a/b.pyc")
    assert dockerignore_excludes(rules, "keep/b.pyc")


def test_hadolint_passes() -> None:
    binary = tool_or_skip("hadolint", HADOLINT_MISSING)
    result = subprocess.run(
        [binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_would_catch_a_user_instruction(tmp_path: Path) -> None:
    binary = tool_or_skip("hadolint", HADOLINT_MISSING)
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text(encoding="utf-8") + "RUN pip install cupy-cuda12x\n")
    result = subprocess.run([binary, "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3013" in result.stdout


@pytest.mark.slow
def test_a_wheel_built_from_the_build_context_ships_the_templates(tmp_path: Path) -> None:
    """What `pip install /action` does in the image, on the files .dockerignore lets through."""
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} cannot read an SPDX license string (77 or later)")
    context = tmp_path / "context"
    for folder, dirs, files in os.walk(REPO):
        base = Path(folder).relative_to(REPO)
        # An excluded folder is left out whole (this .dockerignore re-includes nothing inside one).
        dirs[:] = [d for d in dirs if _in_context((base / d).as_posix())]
        for name in dirs:  # Docker's COPY keeps symbolic links (gpuemu_ci/templates -> ../templates)
            source = REPO / base / name
            if source.is_symlink():
                (context / base).mkdir(parents=True, exist_ok=True)
                (context / base / name).symlink_to(os.readlink(source))
        for name in files:
            relative = (base / name).as_posix()
            if _in_context(relative):
                (context / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / relative, context / relative)
    assert (context / "pyproject.toml").is_file() and not (context / "tests").exists()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            ".",
        ],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = tmp_path.glob("gpuemu_ci-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"gpuemu_ci/templates/workflows/{p.name}" for p in TEMPLATES.glob("*.yml")}
    for path in STARTER.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            expected.add(f"gpuemu_ci/templates/starter/{path.relative_to(STARTER).as_posix()}")
    assert expected - names == set()
