"""A snoop for the secrets tests: code under test that looks for the token and the signing key everywhere a
process can look, written into a workspace as `snoop.py` and called from an op, an `inputs` hook and the
setup step.

The snoop must not carry the secrets it looks for, or it would find them in its own memory. It gets only a
polynomial hash (mod 2^64, random base) of the first `NEEDLE_BYTES` bytes of each secret, and hashes every
window of that length in what it reads: /proc/*/environ, /proc/*/cmdline, its own memory (every readable
data mapping: writable, anonymous, heap and stack, through /proc/self/mem), every file of the workspace, and
the Action's own process (its environ and memory, which must be refused). A control file outside the
workspace that holds the secrets shows that the search finds them when they are there.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

NEEDLE_BYTES = 16
MASK = (1 << 64) - 1


def window_hash(data: bytes, base: int) -> int:
    """The hash the snoop computes for one window: sum(b[k] * base**k) mod 2**64."""
    return sum(b * pow(base, k, 1 << 64) for k, b in enumerate(data)) & MASK


def write_needles(path: Path, named_secrets: dict[str, str]) -> None:
    """`needles.json` for the snoop: per secret, the hash of its first NEEDLE_BYTES bytes (never the bytes)."""
    base = secrets.randbits(63) | 1
    needles = {
        name: window_hash(value.encode()[:NEEDLE_BYTES], base)
        for name, value in named_secrets.items()
        if len(value.encode()) >= NEEDLE_BYTES
    }
    path.write_text(json.dumps({"base": base, "needles": needles}))


SNOOP_SOURCE = r'''
"""Looks for the Action's secrets from inside code under test; writes what it saw to snoop-out/."""
import json
import os
import pathlib

import numpy as np

NEEDLE_BYTES = 16
CHUNK = 4 << 20


def _hits(data, base, needles):
    """The needles whose hash matches a window of `data` (bytes-like)."""
    arr = np.frombuffer(data, dtype=np.uint8).astype(np.uint64)
    n = len(arr) - NEEDLE_BYTES + 1
    if n <= 0:
        return set()
    acc = np.zeros(n, dtype=np.uint64)
    term = np.empty(n, dtype=np.uint64)
    power = 1
    with np.errstate(over="ignore"):
        for k in range(NEEDLE_BYTES):
            np.multiply(arr[k : k + n], np.uint64(power), out=term)
            acc += term
            power = (power * base) & ((1 << 64) - 1)
    wanted = np.array(list(needles.values()), dtype=np.uint64)
    found = set(np.unique(acc[np.isin(acc, wanted)]).tolist())
    return {name for name, h in needles.items() if h in found}


def _search_stream(read_chunks, base, needles):
    found, carry, total = set(), b"", 0
    for chunk in read_chunks:
        total += len(chunk)
        found |= _hits(carry + chunk, base, needles)
        carry = chunk[-(NEEDLE_BYTES - 1):]
    return found, total


def _file_chunks(path):
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                return
            yield chunk


def _memory_chunks(pid):
    regions = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split()
            start, end = (int(x, 16) for x in parts[0].split("-"))
            name = parts[5] if len(parts) > 5 else ""
            data = "w" in parts[1] or not name.startswith("/")
            if "r" in parts[1] and data and name not in ("[vvar]", "[vsyscall]", "[vvar_vclock]"):
                regions.append((start, end))
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for start, end in regions:
            at = start
            while at < end:
                try:
                    mem.seek(at)
                    chunk = mem.read(min(CHUNK, end - at))
                except (OSError, OverflowError, ValueError):
                    break
                if not chunk:
                    break
                yield chunk
                at += len(chunk)


def _parent(pid):
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[-1].split()[1])


def _action_pid():
    """The nearest ancestor whose command line is the Action's own (`gpuemu_ci action`)."""
    pid = os.getpid()
    while pid > 1:
        pid = _parent(pid)
        try:
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gpuemu_ci" in argv and b"action" in argv:
            return pid
    return None


def _in_child(search):
    """`search()` (JSON-able) run in a forked child: what a search reads stays in this process's memory
    otherwise, where the next snoop in the same worker (op and hooks share worker processes) would find it."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.write(write_end, json.dumps(search()).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def _search_workspace(workspace, base, needles):
    files, found_in = 0, []
    for path in pathlib.Path(workspace).rglob("*"):
        if path.is_file() and not path.is_symlink() and "snoop-out" not in path.parts:
            try:
                found, _ = _search_stream(_file_chunks(path), base, needles)
            except OSError:
                continue
            files += 1
            found_in.append([f"workspace file {path}", sorted(found)])
    return files, found_in


def snoop(label, workspace, needles_file, control_file):
    spec = json.loads(pathlib.Path(needles_file).read_text())
    base, needles = spec["base"], spec["needles"]
    report = {"label": label, "pid": os.getpid(), "found": {}, "scanned": {}, "denied": []}

    def note(where, names):
        for name in names:
            report["found"].setdefault(name, []).append(where)

    counts = {"environ": 0, "cmdline": 0}
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        for what in ("environ", "cmdline"):
            try:
                data = pathlib.Path(f"/proc/{pid}/{what}").read_bytes()
            except OSError:
                continue
            counts[what] += 1
            note(f"/proc/{pid}/{what}", _hits(data, base, needles))
    report["scanned"].update(counts)

    found, total = _search_stream(_memory_chunks("self"), base, needles)
    note("own memory", found)
    report["scanned"]["own_memory_bytes"] = total

    files, found_in = _in_child(lambda: _search_workspace(workspace, base, needles))
    for where, names in found_in:
        note(where, names)
    report["scanned"]["workspace_files"] = files

    action = _action_pid()
    report["action_pid"] = action
    if action is not None:
        for what in ("environ", "mem"):
            try:
                if what == "environ":
                    data = pathlib.Path(f"/proc/{action}/environ").read_bytes()
                    note("the Action's environ", _hits(data, base, needles))
                else:
                    found, _ = _search_stream(_memory_chunks(action), base, needles)
                    note("the Action's memory", found)
                report.setdefault("action_readable", []).append(what)
            except OSError as exc:
                report["denied"].append(f"{what}: {type(exc).__name__}")

    report["control_found"] = _in_child(lambda: sorted(_search_stream(_file_chunks(control_file), base, needles)[0]))
    status = pathlib.Path("/proc/self/status").read_text().splitlines()
    report["capabilities"] = next((l.split()[1] for l in status if l.startswith("CapEff:")), None)
    report["uid"] = os.getuid()

    out = pathlib.Path(workspace) / "snoop-out"
    out.mkdir(exist_ok=True)
    (out / f"{label}-{os.getpid()}.json").write_text(json.dumps(report))
'''
