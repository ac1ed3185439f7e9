"""Where a kernel entry is defined in its source, so a lint finding can point at that line.

The results document names kernel entries (demangled) but not their lines; when the repository is
at hand (rendering in the checkout), the line is found by looking for the entry's name followed
by ``(`` (or template arguments) within two lines after ``__global__``. Nothing is found, and the
finding points at the file, when the source is not there or the name does not appear.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuemu_ci.errors import UsageError
from gpuemu_ci.files import read_beneath
from gpuemu_ci.results.kernels import KernelResult
from gpuemu_ci.results.model import Results

MAX_SOURCE_BYTES = 16 << 20  # a kernel source is read whole to find an entry's line


def entry_lines(report: Results, kernel: KernelResult, source_root: Path | None) -> dict[str, int]:
    """Line of each measured entry's definition in the kernel source, when the source can be read."""
    if source_root is None or not kernel.source:
        return {}
    root = source_root.resolve()
    relative = Path(os.path.normpath(report.repo_path(kernel.source)))
    try:  # the document is untrusted: nothing outside the checkout, nothing through a link, no FIFO
        data = read_beneath(root, relative, "kernel source", limit=MAX_SOURCE_BYTES)
    except UsageError:
        return {}
    lines = data.decode("utf-8", errors="replace").splitlines()
    found: dict[str, int] = {}
    for entry in {e.kernel for e in kernel.entries} | {v.kernel for v in kernel.violations}:
        name = identifier(entry)
        if not name:
            continue
        call = re.compile(rf"(?<![\w:]){re.escape(name)}\s*(<[^;{{]*>)?\s*\(")
        for number, line in enumerate(lines, start=1):
            window = " ".join(lines[max(0, number - 3) : number])
            if call.search(line) and "__global__" in window:
                found[entry] = number
                break
    return found


def identifier(entry: str) -> str:
    """``void ns::scale<128>(float*)`` -> ``scale``: the name a definition is written with."""
    head = entry.split("(", 1)[0]
    depth, plain = 0, []
    for char in head:  # drop template arguments, which may nest
        depth += char == "<"
        if depth == 0:
            plain.append(char)
        depth -= char == ">" and depth > 0
    words = "".join(plain).split()
    return words[-1].rsplit("::", 1)[-1] if words else ""
