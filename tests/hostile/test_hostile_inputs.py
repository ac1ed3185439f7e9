"""Bad input of every kind, as an attacker or a faulty kernel would give it (issue #14, items 8 and 9): a clear
message and exit 2 (3 for a fault of the machine), never a traceback or an internal error, in bounded time and
memory.

Everything goes through the one CLI harness (`run_cli`), or the real `gpuemu-ci` process where a process is
the point (a FIFO would hang it, /dev/zero would fill its memory).
"""

from __future__ import annotations

import copy
import io
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support_cli import run_cli
from tests.support_reports import results_document

FORMATS = ("comment", "summary", "sarif", "junit", "html", "annotations")
REPO = Path(__file__).resolve().parents[2]


def clean(result: Any, expected: int) -> None:
    assert result.code == expected, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    assert "gpuemu-ci: error:" in result.stderr or "Error: Invalid value" in result.stderr  # click's own


# --- broken results files, read by every command that reads one ------------------------------------------


def _mutated(change: Callable[[dict[str, Any]], object]) -> bytes:
    document = copy.deepcopy(results_document())
    change(document)
    return json.dumps(document).encode()


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        node: Any = document
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value

    return change


BROKEN_RESULTS: dict[str, bytes] = {
    "empty": b"",
    "null": b"null",
    "a list": b"[]",
    "truncated": json.dumps(results_document()).encode()[:200],
    "not UTF-8": b"\xff\xfe{\x00}\x00",
    "a lone surrogate escape": json.dumps(results_document()).replace("worst error", "\\ud800").encode(),
    "nested 100,000 deep": b'{"schema_version": "2", "ops": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "schema version 1": _mutated(_set("schema_version", "1")),
    "schema version as a number": _mutated(_set("schema_version", 2)),
    "an unknown field": _mutated(_set("forged", True)),
    "a seed past 64 bits": _mutated(_set("seed", 2**64)),
    "a negative count": _mutated(_set("ops.0.cases_failed", -1)),
    "passed with exit code 1": _mutated(lambda d: d.update(verdict="passed", exit_code=1)),
    "NaN": json.dumps(results_document()).replace("812.0", "NaN").encode(),
    "a snapshot outside the output": _mutated(_set("ops.0.failures.0.snapshot", "../../../etc/passwd")),
    "a string where a number goes": _mutated(_set("ops.0.line", "3")),
    "an object where a list goes": _mutated(_set("ops", {"softmax": {}})),
}


@pytest.mark.parametrize("name", list(BROKEN_RESULTS))
def test_every_reader_refuses_a_broken_results_file_with_exit_2(tmp_path: Path, name: str) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(BROKEN_RESULTS[name])
    for args in (
        *(["render", fmt, path] for fmt in FORMATS),
        ["diff", path, path],
        ["baseline", "create", "--from", path, "-o", tmp_path / "baseline.json"],
        ["sign", path, "--unsigned", "-o", tmp_path / "report.json", "--repo", "o/r"],
        ["replay", "--config", REPO / "examples/quickstart/gpuemu.toml", path],
    ):
        result = run_cli([str(arg) for arg in args])
        if result.code == 2 and "baseline" in result.stderr and args[0] == "diff":
            pass  # diff names the file as the baseline it could not use
        clean(result, 2)


def test_valid_but_extreme_documents_render(tmp_path: Path) -> None:
    """Documents that are valid but built to hurt: a megabyte op name, 1e308 headroom, markup everywhere."""
    document = results_document()
    document["ops"][0]["name"] = "<img src=x onerror=alert(1)>|**x**" * 30_000
    document["ops"][0]["failures"][0]["headroom"] = 1.7976931348623157e308
    document["ops"][0]["failures"][0]["message"] = "::error::forged\n" * 5000
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    for fmt in FORMATS:
        result = run_cli(["render", fmt, path, "-o", tmp_path / f"out.{fmt}"])
        assert result.code == 0, result.output
    # What GitHub caps is cut to fit: the comment to 60,000 bytes, the summary to 1 MiB.
    assert len((tmp_path / "out.comment").read_bytes()) <= 60_000
    assert len((tmp_path / "out.summary").read_bytes()) <= 1 << 20
    assert "onerror=alert" not in (tmp_path / "out.html").read_text().replace("onerror=alert(1)&gt;", "")


# --- files that are not files ---------------------------------------------------------------------------


@pytest.mark.slow
def test_fifos_devices_and_huge_files_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sparse = tmp_path / "huge.json"
    with sparse.open("wb") as handle:
        handle.truncate(300 << 20)  # 300 MB of nothing: over every read cap, no disk used
    key = tmp_path / "k"
    assert run_cli(["keygen", "-o", key]).code == 0
    report = tmp_path / "report.json"
    report.write_text("{}")
    commands: list[tuple[list[str | Path], int]] = [
        (["verify", "/dev/zero", "--key", f"{key}.pub"], 3),
        (["verify", fifo, "--key", f"{key}.pub"], 3),
        (["verify", report, "--key", fifo], 3),
        (["verify", report, "--key", "/dev/zero"], 3),
        (["verify", report, "--key", f"{key}.pub", "--artifact", "/dev/zero"], 3),
        (["verify", report, "--key", f"{key}.pub", "--artifact", fifo], 3),
        (["verify", sparse, "--key", f"{key}.pub"], 3),
        (["render", "comment", fifo], 2),
        (["render", "comment", "/dev/zero"], 2),
        (["render", "comment", sparse], 2),
        (["diff", fifo, fifo], 2),
        (["sign", "/dev/zero", "--unsigned", "--repo", "o/r", "--commit", "a" * 40], 2),
    ]
    for args, code in commands:
        # A real process with a time limit: a read of /dev/zero or a blocked FIFO would hang it.
        done = subprocess.run(
            [sys.executable, "-m", "gpuemu_ci", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GPUEMU_USER_CONFIG": "none"},
        )
        assert done.returncode == code, (args, done.stderr)
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr
        assert "not a regular file" in done.stderr or "read at most" in done.stderr, done.stderr


def test_a_100k_character_path_is_a_usage_error(tmp_path: Path) -> None:
    long = "a" * 100_000
    clean(run_cli(["run", "--config", long]), 2)
    clean(run_cli(["render", "comment", long]), 2)
    clean(run_cli(["verify", long, "--key", long]), 3)
    clean(run_cli(["sign", long, "--unsigned"]), 2)


# --- configs built to exhaust memory or overflow ----------------------------------------------------------


def test_a_literal_dim_of_10_to_the_12_is_refused_not_allocated(make_project: Callable[..., Path]) -> None:
    config = make_project(
        """
        [project]
        name = "huge"
        [validation]
        dtypes = ["float32"]
        [[ops]]
        name = "big"
        op = "ops:f"
        reference = "ops:f"
        family = "elementwise"
        [ops.inputs]
        x = [1000000000000]
        """,
        {"ops.py": "def f(x):\n    return x\n"},
    )
    result = run_cli(["run", "--config", config, "--out", config.parent / "out"])
    clean(result, 2)
    assert "1,000,000,000,000 elements" in result.stderr


@pytest.mark.parametrize("expression", ["1e999", "N * 1e999", "-1e999", "ceil(N / 1e-999)"])
def test_an_infinite_launch_expression_is_a_config_error(
    make_project: Callable[..., Path], expression: str
) -> None:
    config = make_project(
        f"""
        [project]
        name = "k"
        [[kernels]]
        name = "gelu"
        source = "gelu.cu"
        [kernels.launch]
        kernel = "gelu"
        grid = ["{expression}"]
        block = [256]
        args = ["x", "out", "N"]
        output = ["N"]
        reference = "ops:ref"
        [kernels.dims]
        N = [64]
        [kernels.inputs]
        x = ["N"]
        """,
        {
            "gelu.cu": "__global__ void gelu(float* x, float* y, int n) {}\n",
            "ops.py": "def ref(x):\n  return x\n",
        },
    )
    result = run_cli(["run", "--config", config, "--out", config.parent / "out", "--no-lint"])
    assert result.code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert "finite" in result.stderr or "division by zero" in result.stderr


# --- hostile snapshots for replay -------------------------------------------------------------------------


def _snapshot(tmp_path: Path) -> tuple[Path, Path]:
    """A real failing run of the buggy example: (its config, one of its snapshots)."""
    config = REPO / "examples" / "buggy" / "gpuemu.toml"
    out = tmp_path / "run"
    result = run_cli(["run", "--config", config, "--op", "softmax", "--iterations", "16", "--out", out])
    assert result.code == 1, result.output
    # A float32 case's: the hostile edits below (a dtype claimed for other bits) assume float32 storage, and
    # the failing cases also include 16-bit ones (sorted, so the choice does not follow directory order).
    for snapshot in sorted((out / "snapshots").glob("*.npz")):
        with zipfile.ZipFile(snapshot) as archive:
            if _meta({"__metadata__.npy": archive.read("__metadata__.npy")})["dtype"] == "float32":
                return config, snapshot
    raise AssertionError(f"no float32 snapshot among {sorted((out / 'snapshots').glob('*.npz'))}")


def _rewrite(original: Path, target: Path, change: Callable[[dict[str, bytes]], object]) -> Path:
    with zipfile.ZipFile(original) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    change(members)
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return target


def _meta(members: dict[str, bytes]) -> dict[str, Any]:
    array = np.load(io.BytesIO(members["__metadata__.npy"]))
    result: dict[str, Any] = json.loads(bytes(array).decode())
    return result


def _with_meta(change: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, bytes]], None]:
    def apply(members: dict[str, bytes]) -> None:
        meta = _meta(members)
        result = change(meta)
        buffer = io.BytesIO()
        data = json.dumps(meta if result is None else result).encode()
        np.save(buffer, np.frombuffer(data, dtype=np.uint8))
        members["__metadata__.npy"] = buffer.getvalue()

    return apply


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _huge_header(members: dict[str, bytes]) -> None:
    key = next(k for k in members if k.startswith("input:"))
    data = bytearray(members[key])
    header_end = data.index(b"\n") + 1
    header = bytes(data[10:header_end]).decode("latin1")
    shape_start = header.index("'shape': (") + len("'shape': (")
    shape_end = header.index(")", shape_start)
    fake = header[:shape_start] + "1000000000000," + header[shape_end:]
    fake = fake.rstrip("\n").ljust(len(header) - 1) + "\n"
    members[key] = bytes(data[:10]) + fake.encode("latin1") + bytes(data[header_end:])


def _for_every_input(change: Callable[[bytes], bytes]) -> Callable[[dict[str, bytes]], None]:
    def apply(members: dict[str, bytes]) -> None:
        for key in [k for k in members if k.startswith("input:")]:
            members[key] = change(members[key])

    return apply


DEEP_META = b'{"op": "softmax", "kwargs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
HOSTILE_SNAPSHOTS: dict[str, Callable[[dict[str, bytes]], object]] = {
    "no metadata": lambda m: m.pop("__metadata__.npy"),
    "metadata is a list": _with_meta(lambda meta: [meta]),
    "metadata is a number": _with_meta(lambda meta: 7),
    "metadata is not JSON": lambda m: m.update({"__metadata__.npy": _npy(np.frombuffer(b"{not", np.uint8))}),
    "op missing": _with_meta(lambda meta: meta.pop("op")),
    "op of another name": _with_meta(lambda meta: meta.update(op="gelu")),
    "op is a number": _with_meta(lambda meta: meta.update(op=5)),
    "case seed missing": _with_meta(lambda meta: meta.pop("case_seed")),
    "case seed negative": _with_meta(lambda meta: meta.update(case_seed=-1)),
    "case seed past 64 bits": _with_meta(lambda meta: meta.update(case_seed=2**70)),
    "case seed a string": _with_meta(lambda meta: meta.update(case_seed="7")),
    "dtype missing": _with_meta(lambda meta: meta.pop("dtype")),
    "dtype unknown": _with_meta(lambda meta: meta.update(dtype="float128")),
    "dtype a list": _with_meta(lambda meta: meta.update(dtype=["float32"])),
    "mode unknown": _with_meta(lambda meta: meta.update(mode="chaos")),
    "mode missing": _with_meta(lambda meta: meta.pop("mode")),
    "dims a list": _with_meta(lambda meta: meta.update(dims=[1, 2])),
    "dims negative": _with_meta(lambda meta: meta.update(dims={"M": -4})),
    "kwargs a string": _with_meta(lambda meta: meta.update(kwargs="axis=-1")),
    "layouts a list": _with_meta(lambda meta: meta.update(layouts=["contiguous"])),
    "layout unknown": _with_meta(lambda meta: meta.update(layouts={"x": {"layout": "diagonal"}})),
    "layout for a missing input": _with_meta(
        lambda meta: meta.update(layouts={"y": {"layout": "contiguous"}})
    ),
    "layout missing": _with_meta(lambda meta: meta.update(layouts={})),
    "broadcast dim out of range": _with_meta(
        lambda meta: meta.update(layouts={"x": {"layout": "broadcast", "broadcast_dim": 99}})
    ),
    "broadcast dim a string": _with_meta(
        lambda meta: meta.update(layouts={"x": {"layout": "broadcast", "broadcast_dim": "0"}})
    ),
    "input order names a missing input": _with_meta(lambda meta: meta.update(input_order=["x", "ghost"])),
    "input order a string": _with_meta(lambda meta: meta.update(input_order="x")),
    "input dtypes a list": _with_meta(lambda meta: meta.update(input_dtypes=["bfloat16"])),
    "bfloat16 claimed for float32 bits": _with_meta(lambda meta: meta.update(input_dtypes={"x": "bfloat16"})),
    "deep metadata": lambda m: m.update(
        {
            "__metadata__.npy": _npy(
                np.frombuffer(
                    b'{"op": "softmax", "kwargs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", np.uint8
                )
            )
        }
    ),
    "a header claiming 10^12 elements": _huge_header,
    "an object array": _for_every_input(lambda _: _npy(np.array([{"a": 1}], dtype=object))),
    "a string array": _for_every_input(lambda _: _npy(np.array(["abc"]))),
    "a structured array": _for_every_input(lambda _: _npy(np.zeros(3, dtype=[("a", "i4"), ("b", "f4")]))),
    "an array of the wrong rank": _for_every_input(lambda _: _npy(np.zeros((2, 2, 2), np.float32))),
    "an empty array": _for_every_input(lambda _: _npy(np.zeros((0,), np.float32))),
    "truncated data": _for_every_input(lambda data: data[:-7]),
    "trailing garbage": _for_every_input(lambda data: data + b"\x00" * 13),
    "not npy": _for_every_input(lambda _: b"PK\x03\x04 not an array"),
    "npy version 9": _for_every_input(lambda data: data[:6] + b"\x09\x00" + data[8:]),
    "no inputs at all": lambda m: [m.pop(k) for k in [k for k in m if k.startswith("input:")]],
}


@pytest.mark.slow
def test_hostile_snapshots_are_refused_by_replay(tmp_path: Path) -> None:
    config, original = _snapshot(tmp_path)
    assert run_cli(["replay", "--config", config, "--op", "softmax", "--snapshot", original]).code == 1
    outcomes: dict[str, tuple[int, list[str]]] = {}
    for name, change in HOSTILE_SNAPSHOTS.items():
        snapshot = _rewrite(original, tmp_path / f"hostile-{len(outcomes)}.npz", change)
        result = run_cli(["replay", "--config", config, "--op", "softmax", "--snapshot", snapshot])
        outcomes[name] = (result.code, result.stderr.strip().splitlines()[-1:] if result.stderr else [])
        assert "Traceback" not in result.output and "internal error" not in result.output, (
            name,
            result.output,
        )
    # Each is refused as the bad input it is, or (a shape the op accepts) replayed and judged.
    wrong = {name: outcome for name, outcome in outcomes.items() if outcome[0] not in (1, 2)}
    assert wrong == {}
    refused = {name for name, (code, _) in outcomes.items() if code == 2}
    assert refused >= set(HOSTILE_SNAPSHOTS) - {"an array of the wrong rank", "an empty array"}
    for path in ("not a zip", "empty"):
        bad = tmp_path / f"{path}.npz"
        bad.write_bytes(b"" if path == "empty" else b"hello")
        clean(run_cli(["replay", "--config", config, "--op", "softmax", "--snapshot", bad]), 2)


# --- issue 45, item 6: a snapshot that is a deflate bomb ------------------------------------------------------

BOMB_MEGABYTES = 3 << 10  # 3 GiB of zeros (and a .npy header) from about 3 MB
MEMORY_LIMIT = 2 << 30  # the address space of the process that reads it: far less than the bomb inflates to


def deflate_bomb(path: Path, megabytes: int) -> int:
    """A snapshot whose one input is a deflated .npy of `megabytes` MiB of float32 zeros (its header true to
    its size), built without inflating or compressing that much: one compressed megabyte of zeros, flushed to a
    byte boundary, repeated. The zip is written by hand (its sizes fit 32 bits; CRC left 0: nothing honest reads
    that far). Returns the size it inflates to."""
    header_buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header_buffer, {"descr": "<f4", "fortran_order": False, "shape": (megabytes << 18,)}
    )
    header = header_buffer.getvalue()
    inflated = len(header) + (megabytes << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = compressor.compress(header) + compressor.flush(zlib.Z_FULL_FLUSH)
    megabyte = compressor.compress(bytes(1 << 20)) + compressor.flush(zlib.Z_FULL_FLUSH)
    data = start + megabyte * megabytes + compressor.flush(zlib.Z_FINISH)
    name = b"input:x.npy"
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, 0, len(data), inflated, len(name), 0)
    central = struct.pack(
        "<IHHHHHHIIIHHHHHII",
        0x02014B50,
        20,
        20,
        0,
        8,
        0,
        0,
        0,
        len(data),
        inflated,
        len(name),
        0,
        0,
        0,
        0,
        0,
        0,
    )
    directory_at = len(local) + len(name) + len(data)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central) + len(name), directory_at, 0)
    path.write_bytes(local + name + data + central + name + end)
    return inflated


def _gpuemu_in_bounded_memory(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUEMU_USER_CONFIG": "none", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "gpuemu_ci", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, preexec_fn=limit_memory,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("command", ["replay", "corpus add", "run"])
def test_a_deflate_bomb_snapshot_is_refused_before_it_inflates(tmp_path: Path, command: str) -> None:
    """replay, corpus add and the gate (which reads the corpus) say what the snapshot declares and stop, in a
    process whose memory is capped below what the bomb inflates to; the old code inflated it whole (the OOM
    killer ended it; here, MemoryError: an internal error)."""
    project = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "buggy", project)
    config = project / "gpuemu.toml"
    config.write_text(config.read_text().replace("[ci]\n", '[ci]\ncorpus = "gpuemu-corpus"\n', 1))
    assert 'corpus = "gpuemu-corpus"' in config.read_text()
    bomb = tmp_path / "bomb.npz"
    inflated = deflate_bomb(bomb, BOMB_MEGABYTES)
    assert bomb.stat().st_size < 8 << 20
    if command == "replay":
        args = ["replay", "--config", str(config), "--op", "softmax", "--snapshot", str(bomb)]
    elif command == "corpus add":
        args = ["corpus", "add", "--config", str(config), str(bomb)]
    else:
        (project / "gpuemu-corpus" / "softmax").mkdir(parents=True)
        shutil.copy(bomb, project / "gpuemu-corpus" / "softmax" / "bomb.npz")
        args = ["run", "--config", str(config), "--out", str(tmp_path / "out"), "--no-lint"]
    done = _gpuemu_in_bounded_memory(args, project)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert f"declare {inflated:,} bytes inflated" in done.stderr
    assert "over the 2,147,483,648 read at most" in done.stderr
    assert not (project / "gpuemu-corpus" / "softmax" / "bomb.npz").exists() or command == "run"


# --- the output directory -----------------------------------------------------------------------------------


MARKS_THAT_IT_RAN = (
    "import pathlib\n\ndef f(x):\n    pathlib.Path(__file__).with_name('ran').write_text('1')\n    return x\n"
)


@pytest.mark.skipif(os.geteuid() == 0 and not Path("/proc/self/status").exists(), reason="needs Linux")
def test_a_read_only_output_directory_is_found_before_running(make_project: Callable[..., Path]) -> None:
    """Read-only to everyone, root included: a read-only bind of /proc's own files is not available, so the
    directory is a path below a regular file (ENOTDIR), which no user can create."""
    config = make_project(
        """
        [project]
        name = "ro"
        [validation]
        dtypes = ["float32"]
        [[ops]]
        name = "slow"
        op = "ops:f"
        reference = "ops:f"
        family = "elementwise"
        [ops.dims]
        N = [8]
        [ops.inputs]
        x = ["N"]
        """,
        {"ops.py": MARKS_THAT_IT_RAN},
    )
    blocker = config.parent / "file"
    blocker.write_text("")
    result = run_cli(["run", "--config", config, "--out", blocker / "out"])
    clean(result, 2)
    assert "cannot take files" in result.stderr or "cannot use" in result.stderr
    assert not (config.parent / "ran").exists()  # nothing ran: the directory was checked first


@pytest.mark.slow
def test_a_snapshot_that_cannot_be_written_is_a_note_not_the_loss_of_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "snapshots").write_text("a file where the snapshot directory goes")  # every snapshot write fails
    config = REPO / "examples" / "buggy" / "gpuemu.toml"
    result = run_cli(["run", "--config", config, "--op", "softmax", "--iterations", "16", "--out", out])
    assert result.code == 1, result.output  # the gate's verdict, not an internal error
    document = json.loads((out / "results.json").read_text())
    failures = document["ops"][0]["failures"]
    assert failures and all(f["snapshot"] is None and f["snapshot_error"] for f in failures)
    assert any("snapshot(s) could not be written" in note for note in document["notes"])
    replay = run_cli([*failures[0]["replay"].split()[1:], "--out", str(tmp_path / "replay")])
    assert replay.code == 1  # the seed still reproduces it
