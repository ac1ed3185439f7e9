"""Upstream's three execution modes, each running the op for real, in real worker processes: `script_based`
(the reference script a subprocess over upstream's stdin/stdout JSON protocol, warm when it can be imported),
`client_side` (the reference called in the judge worker) and `daemon_orchestrated` (one warm reference process
for every case)."""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpuemu_ci.backends import WorkerPool
from gpuemu_ci.backends.interface import OpTask, TargetKind
from gpuemu_ci.backends.script_protocol import ProtocolError, decode_reply, encode_reply, encode_request
from gpuemu_ci.calls import CaseReport
from gpuemu_ci.config.load import load_config
from gpuemu_ci.errors import ConfigError
from gpuemu_ci.pipeline.targets import naive_target, op_target, reference_target
from tests.backends.support_cases import first_case

# A reference script as upstream's daemon runs it: reads one case from stdin, prints its output, exits. It
# logs its pid (one line per process) so the test can count processes.
STDIN_SCRIPT = """
import base64, json, os, sys
import numpy as np

with open(os.path.join(os.path.dirname(__file__), "{log}"), "a") as log:
    log.write(f"{{os.getpid()}}\\n")
message = json.load(sys.stdin)
def tensor(t):
    return np.frombuffer(base64.b64decode(t["data"]), dtype=t["dtype"]).reshape(t["shape"])
x = tensor(message["inputs"]["x"])
scale = float(message["kwargs"].get("scale", "1"))
{body}
print("a log line on stderr", file=sys.stderr)
json.dump({{"shape": list(out.shape), "dtype": str(out.dtype), "data": base64.b64encode(out.tobytes()).decode()}},
          sys.stdout)
"""

# A reference script as upstream's pages write them: a `reference(inputs, **kwargs)` function.
FUNCTION_SCRIPT = """
import os
import numpy as np

with open(os.path.join(os.path.dirname(__file__), "{log}"), "a") as log:
    log.write(f"{{os.getpid()}}\\n")

def reference(inputs: dict, **kwargs) -> np.ndarray:
    print("reference called")  # a print must not break the protocol
    return inputs["x"] * float(kwargs.get("scale", "1"))
"""

OPS = """
def scaled(x, scale=1.0):
    return x * scale

def reference_dict(inputs, **kwargs):
    return inputs["x"] * kwargs["scale"]

def raising_reference(inputs, **kwargs):
    raise KeyError("y")
"""

SCHEMA = """
family = "elementwise"
kwargs = {{ scale = [2.5] }}
[ops.dims]
N = [5, 8]
[ops.inputs]
x = ["N"]
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream_modes")
    (root / "mode_ops.py").write_text(OPS)
    scripts = root / "scripts"
    scripts.mkdir()
    (scripts / "stdin_ref.py").write_text(STDIN_SCRIPT.format(log="stdin.log", body="out = x * scale"))
    (scripts / "stdin_noisy.py").write_text(
        STDIN_SCRIPT.format(log="noisy.log", body='out = x * scale\nprint("progress: 50%")')
    )
    (scripts / "stdin_exit.py").write_text(
        STDIN_SCRIPT.format(log="exit.log", body='out = x\nsys.exit("bad input shape")')
    )
    (scripts / "function_ref.py").write_text(FUNCTION_SCRIPT.format(log="function.log"))
    (scripts / "daemon_ref.py").write_text(FUNCTION_SCRIPT.format(log="daemon.log"))
    return root


@pytest.fixture(scope="module")
def pool(root: Path) -> Iterator[WorkerPool]:
    with WorkerPool(1, root, gpu=None) as p:
        yield p


def task(root: Path, name: str, lines: str) -> OpTask:
    text = f'[validation]\ndtypes = ["float32"]\n[[ops]]\nname = "{name}"\n{lines}\n{SCHEMA.format()}'
    path = root / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    config = load_config(path, env={"GPUEMU_USER_CONFIG": "none"})
    spec = config.op(name)
    return OpTask(
        name, spec, config.validation, root, op_target(spec, root), reference_target(spec, root),
        naive_target(spec, root), 60.0, 1, None,
    )  # fmt: skip


def run_cases(pool: WorkerPool, t: OpTask, count: int) -> list[CaseReport]:
    return [pool.run(t, first_case(t, n)) for n in range(count)]


def pids(root: Path, log: str) -> list[str]:
    path = root / "scripts" / log
    return path.read_text().split() if path.exists() else []


@pytest.mark.slow
def test_script_based_runs_a_stdin_script_once_per_case(pool: WorkerPool, root: Path) -> None:
    t = task(
        root,
        "cold",
        'module = "mode_ops:scaled"\nreference = "scripts/stdin_ref.py"\nexecution_mode = "script_based"',
    )
    assert t.reference.kind is TargetKind.SCRIPT_PROCESS and not t.reference.warm
    reports = run_cases(pool, t, 3)
    assert [r.outcome for r in reports] == ["passed"] * 3, reports[0].message
    assert len(set(pids(root, "stdin.log"))) == 3  # upstream's way: one process per case


@pytest.mark.slow
def test_script_based_keeps_a_function_script_warm(pool: WorkerPool, root: Path) -> None:
    t = task(
        root,
        "warm",
        'module = "mode_ops:scaled"\nreference = "scripts/function_ref.py"\nexecution_mode = "script_based"',
    )
    assert t.reference.warm
    reports = run_cases(pool, t, 4)
    assert [r.outcome for r in reports] == ["passed"] * 4, reports[0].message
    assert len(set(pids(root, "function.log"))) == 1  # one process for every case


def test_daemon_orchestrated_is_one_persistent_reference_process(pool: WorkerPool, root: Path) -> None:
    t = task(
        root,
        "daemon",
        'module = "mode_ops:scaled"\nreference = "scripts/daemon_ref.py"\nexecution_mode = "daemon_orchestrated"',
    )
    reports = run_cases(pool, t, 4)
    assert [r.outcome for r in reports] == ["passed"] * 4, reports[0].message
    assert len(set(pids(root, "daemon.log"))) == 1


def test_daemon_orchestrated_refuses_a_script_it_cannot_keep(root: Path) -> None:
    with pytest.raises(ConfigError) as info:
        task(
            root,
            "daemon_stdin",
            'module = "mode_ops:scaled"\nreference = "scripts/stdin_ref.py"\nexecution_mode = "daemon_orchestrated"',
        )
    assert (
        "defines no `reference(inputs, **kwargs)`" in info.value.message
        and "script_based" in info.value.message
    )


def test_client_side_calls_an_upstream_style_reference_in_process(pool: WorkerPool, root: Path) -> None:
    t = task(
        root,
        "client",
        'module = "mode_ops:scaled"\nreference = "mode_ops:reference_dict"\nexecution_mode = "client_side"',
    )
    assert t.reference.kind is TargetKind.CALLABLE
    (report,) = run_cases(pool, t, 1)
    assert report.outcome == "passed", report.message


@pytest.mark.slow
def test_the_op_is_really_run_in_every_mode(pool: WorkerPool, root: Path) -> None:
    """A wrong op fails against each mode's reference (never upstream's "output = reference")."""
    (root / "wrong_ops.py").write_text("def scaled(x, scale=1.0):\n    return x * scale + 1e-3\n")
    for mode, reference in (
        ("script_based", "scripts/stdin_ref.py"),
        ("daemon_orchestrated", "scripts/daemon_ref.py"),
        ("client_side", "mode_ops:reference_dict"),
    ):
        t = task(
            root,
            f"wrong_{mode}",
            f'module = "wrong_ops:scaled"\nreference = "{reference}"\nexecution_mode = "{mode}"',
        )
        (report,) = run_cases(pool, t, 1)
        assert report.outcome == "failed" and report.kind == "mismatch", (mode, report.message)


@pytest.mark.parametrize(
    ("reference", "words"),
    [
        ("scripts/stdin_noisy.py", "stdout is not one JSON object"),
        ("scripts/stdin_exit.py", "exited with code 1"),
        ("mode_ops:raising_reference", "KeyError"),
    ],
)
def test_a_reference_that_fails_is_a_reference_error_never_the_ops_failure(
    pool: WorkerPool, root: Path, reference: str, words: str
) -> None:
    name = "bad_" + reference.replace("/", "_").replace(".", "_").replace(":", "_")
    t = task(
        root, name, f'module = "mode_ops:scaled"\nreference = "{reference}"\nexecution_mode = "script_based"'
    )
    (report,) = run_cases(pool, t, 1)
    assert report.outcome == "errored" and "reference" in report.message, report.message
    assert words in report.message
    if reference == "scripts/stdin_exit.py":
        assert "bad input shape" in report.message  # the script's stderr is in the message


@pytest.mark.slow
def test_protocol_bytes_are_upstreams() -> None:
    """The request is upstream's JSON: element strides, base64 of the little-endian C-order bytes, kwargs as
    strings; a reply in upstream's {shape, dtype, data} decodes (strides, when present, are not read)."""
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32).T  # a transposed view: sent as C-order data
    request = json.loads(encode_request({"x": x}, {"causal": True, "scale": 0.5}))
    assert request == {
        "inputs": {
            "x": {
                "shape": [2, 2],
                "strides": [2, 1],
                "dtype": "float32",
                "data": base64.b64encode(np.ascontiguousarray(x).tobytes()).decode(),
            }
        },
        "kwargs": {"causal": "true", "scale": "0.5"},
    }
    reply = {
        "shape": [2],
        "strides": [4],
        "dtype": "f16",
        "data": base64.b64encode(np.array([1, -2], dtype=np.float16).tobytes()).decode(),
    }
    (out,) = decode_reply(json.dumps(reply).encode())
    assert out.dtype == np.float16 and out.tolist() == [1.0, -2.0]
    (again,) = decode_reply(encode_reply((out,)))
    assert again.tolist() == [1.0, -2.0]
    with pytest.raises(ProtocolError, match="12 bytes of data for shape"):
        decode_reply(json.dumps({**reply, "data": base64.b64encode(bytes(12)).decode()}).encode())
