"""The user's stack inside the container (issue #15, item 1): the `requirements` and `setup` inputs install what
the ops need before the gate runs, through the Action's entrypoint as the runner runs it, against the loopback
GitHub API. One workflow each, as the README's examples: a torch op, a Triton kernel, and an op importing a
local package that has a dependency of its own. The installed environment is reused by the next run (what
`actions/cache` on cache_dir keeps between jobs).

The stacks come from what this machine has (torch and Triton installed, the packages local): pip resolves
them without a network, as a cached run would.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.action.support_runner import ENTRYPOINT, Step, pull_request_event, run_step, runner_env
from tests.github.support_fake_api import FakeGitHub

# Every test here takes seconds (whole runs, real processes): the fast tier (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow

HEAD, BASE, MERGE = "1a" * 20, "2b" * 20, "3c" * 20


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def gate(
    fake_github: FakeGitHub, workspace: Path, inputs: dict[str, str], python: str = sys.executable
) -> Step:
    pr = fake_github.add_pull(head_sha=HEAD, base_sha=BASE)
    event = pull_request_event(fake_github, pr, head_sha=HEAD, base_sha=BASE)
    env = runner_env(fake_github, workspace, "pull_request", event, sha=MERGE, ref=f"refs/pull/{pr}/merge",
                     inputs={"mode": "gate", "baseline": "none", **inputs})  # fmt: skip
    return run_step(env, [python, str(ENTRYPOINT)])


def passed(step: Step) -> dict:
    assert step.returncode == 0, step.describe()
    assert step.outputs["verdict"] == "passed"
    document: dict = json.loads((step.workspace / step.outputs["results_path"]).read_text())
    return document


CONFIG_HEAD = """
[project]
name = "stack"

[validation]
dtypes = ["float32"]
seed = 5

[ci]
quick_dtypes = ["float32", "bfloat16"]
quick_iterations = 3
"""


def test_a_torch_op_with_requirements(fake_github: FakeGitHub, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    workspace = write(tmp_path / "ws", {
        "requirements.txt": "torch\n",
        "gpuemu.toml": CONFIG_HEAD + """
            [[ops]]
            name = "gelu"
            op = "ops:gelu"
            reference = "refs:gelu"
            family = "elementwise"
            framework = "torch"
            transcendental_ulps = 8
            [ops.dims]
            N = [64, 100]
            [ops.inputs]
            x = ["N"]
            """,
        "ops.py": """
            import torch
            def gelu(x):
                assert isinstance(x, torch.Tensor)
                return torch.nn.functional.gelu(x.float()).to(x.dtype)
            """,
        "refs.py": """
            import math
            import numpy as np
            def gelu(x):
                return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
            """,
    })  # fmt: skip
    step = gate(fake_github, workspace, {"requirements": "requirements.txt"})
    document = passed(step)
    assert document["ops"][0]["framework"] == "torch"
    assert "gpuemu-ci setup: pip install -r requirements.txt" in step.stdout
    assert (workspace / ".gpuemu-cache" / "venv" / "pyvenv.cfg").is_file()


def test_a_triton_kernel_with_setup(fake_github: FakeGitHub, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    workspace = write(tmp_path / "ws", {
        "gpuemu.toml": CONFIG_HEAD.replace('dtypes = ["float32"]', 'dtypes = ["float32", "bfloat16"]') + """
            [[ops]]
            name = "scale"
            op = "kernels:scale"
            reference = "kernels:scale_ref"
            family = "elementwise"
            framework = "torch"
            layouts = ["contiguous"]
            [ops.dims]
            N = [64, 100]
            [ops.inputs]
            x = ["N"]
            """,
        "kernels.py": """
            import torch
            import triton
            import triton.language as tl

            @triton.jit
            def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
                offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                mask = offsets < n
                x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
                tl.store(out_ptr + offsets, (x * 2.0).to(out_ptr.dtype.element_ty), mask=mask)

            def scale(x):
                out = torch.empty_like(x)
                _scale[(triton.cdiv(x.numel(), 64),)](x.contiguous(), out, x.numel(), BLOCK=64)
                return out

            def scale_ref(x):
                return x * 2.0
            """,
    })  # fmt: skip
    # bf16 runs in the interpreter too (the layer's bf16): nothing is skipped, so no skip needs allowing.
    step = gate(fake_github, workspace, {"setup": "pip install triton torch"})
    document = passed(step)
    (op,) = document["ops"]
    assert op["cases_skipped"] == 0
    rows = {row["dtype"]: row for row in op["dtypes"]}
    assert op["interpreter"] == "triton-interpreter" and rows["float32"]["status"] == "passed"
    assert (
        rows["bfloat16"]["status"] == "passed" and rows["bfloat16"]["cases_skipped"] == 0
    )  # the layer's bf16
    (pr,) = fake_github.state.pulls
    (comment,) = fake_github.comments(pr)
    assert "Ran in Triton's CPU interpreter" in comment["body"]
    assert (
        "gpuemu-ci passed: 1 of 1 ops within bounds" in comment["body"] and "skipped" not in comment["body"]
    )


LOCAL_PACKAGE = {
    "vendor/helperlib/pyproject.toml": """
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "helperlib"
        version = "1.0"
        """,
    "vendor/helperlib/src/helperlib/__init__.py": """
        import numpy as np
        def doubled(x):
            return (x.astype(np.float64) * 2).astype(x.dtype)
        """,
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "mykernels"
        version = "0.1"
        dependencies = ["helperlib"]
        [tool.setuptools.packages.find]
        where = ["src"]
        """,
    "src/mykernels/__init__.py": "",
    "src/mykernels/ops.py": """
        import helperlib
        def scale(x):
            return helperlib.doubled(x)
        def scale_ref(x):
            return x * 2.0
        """,
    "gpuemu.toml": CONFIG_HEAD
    + """
        [[ops]]
        name = "scale"
        op = "mykernels.ops:scale"
        reference = "mykernels.ops:scale_ref"
        family = "elementwise"
        [ops.dims]
        N = [16, 33]
        [ops.inputs]
        x = ["N"]
        """,
}


def test_a_local_package_with_its_own_dependency_and_a_cached_second_run(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    workspace = write(tmp_path / "ws", LOCAL_PACKAGE)
    setup = "pip install --no-index --no-build-isolation ./vendor/helperlib -e ."
    first = gate(fake_github, workspace, {"setup": setup})
    passed(first)
    assert "gpuemu-ci setup: create the virtual environment" in first.stdout
    venv = workspace / ".gpuemu-cache" / "venv"
    made = (venv / "pyvenv.cfg").stat().st_mtime_ns
    second = gate(
        fake_github, workspace, {"setup": setup}
    )  # what a restored actions/cache gives the next job
    passed(second)
    assert "create the virtual environment" not in second.stdout  # reused as it was
    assert (venv / "pyvenv.cfg").stat().st_mtime_ns == made


def test_a_setup_that_fails_stops_before_the_gate_with_exit_2(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    workspace = write(tmp_path / "ws", LOCAL_PACKAGE)
    step = gate(fake_github, workspace, {"setup": "pip install --no-index no-such-package-anywhere"})
    assert step.returncode == 2, step.describe()
    (error,) = step.messages("error")
    assert "setup step" in error and "exited with status" in error and "the gate did not run" in error
    assert not (workspace / "gpuemu-out" / "results.json").exists()


def test_a_missing_requirements_file_is_exit_2_before_anything_runs(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    workspace = write(tmp_path / "ws", LOCAL_PACKAGE)
    step = gate(fake_github, workspace, {"requirements": "requirements/missing.txt ../outside.txt"})
    assert step.returncode == 2, step.describe()
    (error,) = step.messages("error")
    assert "requirements" in error and "does not exist" in error
    assert not (workspace / ".gpuemu-cache").exists()


def test_the_setup_environment_sees_the_packages_of_a_tool_installed_in_a_virtual_environment(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    """gpuemu-ci installed the README's way, into a `python3 -m venv` environment: the environment the setup step
    makes (from the base interpreter, as `python -m venv` does) still imports what the tool's environment holds,
    so the gate's own dependencies and the user's setup both work (issue #27: msgspec was missing there)."""
    tool = tmp_path / "tool-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tool)], check=True)
    tool_python = str(tool / "bin" / "python")
    purelib = Path(
        subprocess.run(
            [tool_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    # The tool's environment: the packages this test runs with (as `pip install gpuemu-ci` would have put
    # there), and one module that no other environment has.
    here = [path for path in (*site.getsitepackages(), *sys.path) if path.endswith("site-packages")]
    (purelib / "tests_packages.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in here)
    )
    (purelib / "only_in_the_tool_environment.py").write_text("FOUND = True\n")
    workspace = write(tmp_path / "ws", {
        "gpuemu.toml": CONFIG_HEAD + """
            [[ops]]
            name = "scale"
            op = "ops:scale"
            reference = "ops:scale"
            family = "elementwise"
            [ops.dims]
            N = [16]
            [ops.inputs]
            x = ["N"]
            """,
        "ops.py": """
            import only_in_the_tool_environment
            def scale(x):
                return x * 2
            """,
    })  # fmt: skip
    setup = "python -c 'import only_in_the_tool_environment, msgspec'"
    step = gate(fake_github, workspace, {"setup": setup}, python=tool_python)
    passed(step)
    venv = workspace / ".gpuemu-cache" / "venv"
    assert "gpuemu-ci setup: let the environment see gpuemu-ci's own packages" in step.stdout
    assert str(purelib) in next(venv.glob("lib/python*/site-packages/_gpuemu_ci_tool.pth")).read_text()


def test_tritons_compile_cache_lives_in_cache_dir_unless_the_workflow_sets_one(tmp_path: Path) -> None:
    from gpuemu_ci.action.setup_step import SetupPlan, environment_for

    plan = SetupPlan(("requirements.txt",), None, tmp_path / ".gpuemu-cache")
    env = environment_for(plan, {"PATH": "/usr/bin"})
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / ".gpuemu-cache" / "triton")
    own = environment_for(plan, {"PATH": "/usr/bin", "TRITON_CACHE_DIR": "/mine"})
    assert own["TRITON_CACHE_DIR"] == "/mine"
