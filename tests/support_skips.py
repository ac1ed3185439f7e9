"""Skipped tests, grouped by what they were missing, so a green run says what it did not test.

The last lines of every pytest run name each group of skipped tests and why (no GPU, no Chromium, ...). A group
whose missing piece the README's test command installs (torch, Triton, JAX, TensorFlow, the test extra) is a
broken set-up, not a property of the machine: the run fails, naming the group and the command, unless the group
is listed in GPUEMU_TESTS_MAY_SKIP (comma-separated names, e.g. `torch,triton`) for a deliberately partial
environment.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

MAY_SKIP_VARIABLE = "GPUEMU_TESTS_MAY_SKIP"
TEST_COMMAND = 'python3 -m pip install -e ".[test,test-torch,tensorflow,lint]" --extra-index-url https://download.pytorch.org/whl/cpu'


@dataclass(frozen=True)
class SkipGroup:
    """Tests skipped for one missing thing: `pattern` is matched against the skip's reason."""

    name: str
    pattern: re.Pattern[str]
    why: str  # what the machine lacks, and how to run the group
    installed_by_test_command: bool = False  # a skip here means the set-up is broken

    def matches(self, reason: str) -> bool:
        return self.pattern.search(reason) is not None


def _installed(name: str, pattern: str, installed: bool = True) -> SkipGroup:
    why = f"{name} is not installed ({TEST_COMMAND})" if installed else f"{name} is not installed"
    return SkipGroup(name, re.compile(pattern, re.I), why, installed_by_test_command=installed)


# Order matters: the first group whose pattern matches takes the skip.
GROUPS: tuple[SkipGroup, ...] = (
    SkipGroup(
        "no-GPU paths",
        re.compile(r"a GPU is present", re.I),
        "a GPU is present, so the CPU-only behaviour these check does not arise",
    ),
    SkipGroup(
        "GPU",
        re.compile(r"no GPU|NVIDIA GPU|CUDA device|could not import 'cupy'|cupy", re.I),
        "no NVIDIA GPU with CuPy here (bench/gpu_proof.sh runs them on one)",
    ),
    SkipGroup(
        "Chromium",
        re.compile(r"chromium", re.I),
        "no Chromium here (apt-get install chromium; .ci/run installs it)",
    ),
    SkipGroup(
        "container image",
        re.compile(r"GPUEMU_TEST_IMAGE|docker", re.I),
        "the Action's image is not built here (.ci/container builds it and runs them)",
    ),
    SkipGroup(
        "CUDA toolkit",
        re.compile(r"nvcc|NVRTC|cuobjdump|nvdisasm", re.I),
        "no nvcc or NVIDIA's compiler wheels here",
    ),
    _installed("torch", r"'torch'|\btorch is not installed|needs torch"),
    _installed("Triton", r"'triton'|\btriton\b.*\binstall"),
    _installed("JAX", r"'jax'"),
    _installed("TensorFlow", r"TensorFlow is not installed|'tensorflow'"),
    _installed("the test extra", r"'(cmarkgfm|jsonschema|ml_dtypes|securesystemslib|hypothesis)'|mkdocs"),
    _installed("Liger-Kernel", r"'liger_kernel'", installed=False),
)
OTHER = SkipGroup("other", re.compile(""), "see the reasons with pytest -rs")


def group_of(reason: str) -> SkipGroup:
    return next((group for group in GROUPS if group.matches(reason)), OTHER)


def reason_of(longrepr: object) -> str:
    """The reason pytest recorded for a skip (a (path, line, 'Skipped: reason') tuple, or text)."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return re.sub(r"^Skipped:\s*", "", str(text))


def may_skip() -> set[str]:
    return {name.strip().lower() for name in os.environ.get(MAY_SKIP_VARIABLE, "").split(",") if name.strip()}


@dataclass(frozen=True)
class SkipSummary:
    counts: Counter[SkipGroup]

    @classmethod
    def of(cls, reasons: Iterable[str]) -> SkipSummary:
        return cls(Counter(group_of(reason) for reason in reasons))

    def line(self) -> str:
        if not self.counts:
            return "skipped test groups: none, every collected test ran"
        parts = [
            f"{group.name} ({count} test{'s' if count != 1 else ''}: {group.why})"
            for group, count in sorted(self.counts.items(), key=lambda item: (-item[1], item[0].name))
        ]
        return "skipped test groups: " + "; ".join(parts)

    def broken_setup(self) -> list[SkipGroup]:
        """Groups the README's test command installs, skipped all the same (and not allowed to be)."""
        allowed = may_skip()
        return sorted(
            (
                group
                for group in self.counts
                if group.installed_by_test_command
                and group.name.lower() not in allowed
                and not (group.name == "Triton" and not sys.platform.startswith("linux"))
            ),
            key=lambda group: group.name,
        )
