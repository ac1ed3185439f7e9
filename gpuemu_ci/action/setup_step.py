"""The `setup` and `requirements` inputs: install the stack the ops need (torch, Triton, the user's own package)
inside the container, before the gate runs, as code under test (confined, with no secret in reach).

Everything is installed into a virtual environment under `cache_dir` in the workspace, made with
`--system-site-packages` so that gpuemu-ci, NumPy and CuPy from the image stay visible; the gate then runs
with that environment's Python. When gpuemu-ci itself runs from a virtual environment, `python -m venv` builds
on the *base* interpreter, whose site-packages lack gpuemu-ci's dependencies: a `.pth` file then adds the
tool's own site-packages after the new environment's (what the user installs still wins).

pip's download cache and Triton's compile cache (TRITON_CACHE_DIR) live beside the environment. A workflow
keeps them between runs with `actions/cache` on `cache_dir` (docs/action.md shows how): a restored environment
made by the same Python is reused as it is, so an unchanged `pip install` finds everything already satisfied.
"""

from __future__ import annotations

import os
import shlex
import shutil
import site
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuemu_ci.action import sandbox
from gpuemu_ci.errors import InfraError, UsageError

VENV_NAME = "venv"
PIP_CACHE_NAME = "pip"
TRITON_CACHE_NAME = "triton"  # Triton's compile cache (TRITON_CACHE_DIR): a GPU runner compiles a kernel once
TOOL_PTH_NAME = "_gpuemu_ci_tool.pth"
SEE_TOOL_PACKAGES = "let the environment see gpuemu-ci's own packages"

# Run by the new environment's Python (confined, like every step): writes the .pth into its own site-packages.
# `site.addsitedir` (not a bare path line) so that the tool's own .pth files (editable installs) apply too.
_WRITE_TOOL_PTH = (
    "import pathlib, sys, sysconfig; "
    f"target = pathlib.Path(sysconfig.get_path('purelib')) / {TOOL_PTH_NAME!r}; "
    "target.write_text(''.join(f'import site; site.addsitedir({d!r})\\n' for d in sys.argv[1:]))"
)


@dataclass(frozen=True)
class SetupPlan:
    """What the inputs ask to install: requirement files (relative to the workspace), then a shell command."""

    requirements: tuple[str, ...]
    command: str | None
    cache_dir: Path

    @property
    def wanted(self) -> bool:
        """Whether the `setup` input asks for anything (requirements or a command)."""
        return bool(self.requirements or self.command)

    @property
    def venv(self) -> Path:
        """The virtual environment the setup installs into, under the cache directory."""
        return self.cache_dir / VENV_NAME

    @property
    def python(self) -> Path:
        """That environment's interpreter: what code under test then runs with."""
        return self.venv / "bin" / "python"


def parse_requirements(text: str | None) -> tuple[str, ...]:
    """The `requirements` input: file paths separated by newlines or spaces."""
    return tuple(shlex.split(text or "", comments=True))


def check_plan(plan: SetupPlan, workspace: Path) -> None:
    """Every requirements file exists inside the workspace (a usage error, exit 2, before anything runs)."""
    root = workspace.resolve()
    for name in plan.requirements:
        path = (workspace / name).resolve()
        if not path.is_relative_to(root):
            raise UsageError(f"input requirements: {name} is outside the workspace")
        if not path.is_file():
            raise UsageError(f"input requirements: {name} does not exist in the workspace")
    if not plan.cache_dir.resolve().is_relative_to(root):
        raise UsageError(f"input cache_dir: {plan.cache_dir} is outside the workspace")


def environment_for(plan: SetupPlan, env: Mapping[str, str]) -> dict[str, str]:
    """The environment the setup command and the gate run in: the virtual environment first on PATH."""
    result = dict(env)
    if plan.wanted:
        result["VIRTUAL_ENV"] = str(plan.venv)
        result["PATH"] = os.pathsep.join(p for p in (str(plan.venv / "bin"), env.get("PATH", "")) if p)
        result.pop("PYTHONHOME", None)
    result["PIP_CACHE_DIR"] = str(plan.cache_dir / PIP_CACHE_NAME)
    # Triton's compiled kernels beside it, kept by the same actions/cache (the workflow templates key a cache of
    # their own on the Triton version and the kernels' source); a TRITON_CACHE_DIR the workflow sets wins.
    result.setdefault("TRITON_CACHE_DIR", str(plan.cache_dir / TRITON_CACHE_NAME))
    result.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return result


def venv_usable(venv: Path) -> bool:
    """Whether a (restored) virtual environment was made by this very Python and still works."""
    config = venv / "pyvenv.cfg"
    try:
        lines = config.read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    values = {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in lines)}
    version = ".".join(str(p) for p in sys.version_info[:3])
    home = Path(values.get("home", ""))
    return (
        values.get("version", values.get("version_info", "")).startswith(version)
        and values.get("include-system-site-packages") == "true"
        and home.resolve() == Path(sys.executable).resolve().parent
        and (venv / "bin" / "python").exists()
    )


def tool_site_packages() -> list[str]:
    """The site-packages of the virtual environment gpuemu-ci runs from; none when it runs from the base
    interpreter (`--system-site-packages` already shows those)."""
    if sys.prefix == sys.base_prefix:
        return []
    return [path for path in site.getsitepackages() if Path(path).is_dir()]


def commands(plan: SetupPlan, python: str) -> list[tuple[str, list[str]]]:
    """(what, argv) of each step, in order; the virtual environment is made only when it is not usable. The
    tool's packages are linked on every run, so a cache restored under another tool installation is right."""
    steps: list[tuple[str, list[str]]] = []
    if not venv_usable(plan.venv):
        steps.append(
            (
                "create the virtual environment",
                [python, "-m", "venv", "--system-site-packages", str(plan.venv)],
            )
        )
    steps.append((SEE_TOOL_PACKAGES, [str(plan.python), "-c", _WRITE_TOOL_PTH, *tool_site_packages()]))
    if plan.requirements:
        argv = [str(plan.python), "-m", "pip", "install"]
        for name in plan.requirements:
            argv += ["-r", name]
        steps.append((f"pip install -r {' -r '.join(plan.requirements)}", argv))
    if plan.command:
        steps.append((plan.command, ["/bin/sh", "-c", plan.command]))
    return steps


def run_setup(
    plan: SetupPlan,
    confinement: sandbox.Confinement,
    *,
    env: Mapping[str, str],
    workspace: Path,
    python: str = sys.executable,
) -> None:
    """Run every step confined; a step that fails is a usage error naming it and its exit status (exit 2)."""
    if not venv_usable(plan.venv):
        shutil.rmtree(plan.venv, ignore_errors=True)  # made by another Python (a stale cache): start over
    plan.cache_dir.mkdir(parents=True, exist_ok=True)
    confinement.owns(plan.cache_dir)
    environment = environment_for(plan, env)
    for what, argv in commands(plan, python):
        print(f"gpuemu-ci setup: {what}", flush=True)
        try:
            child = sandbox.spawn(argv, confinement, env=environment, cwd=workspace)
        except OSError as exc:
            raise InfraError(f"setup: could not start {argv[0]}: {exc.strerror or exc}") from None
        code = child.wait()
        sandbox.reap_leftovers()
        if code != 0:
            status = f"status {code}" if code > 0 else f"signal {-code}"
            raise UsageError(f"the setup step `{what}` exited with {status}; the gate did not run")
