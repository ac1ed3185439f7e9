"""Whether this machine has an AMD GPU, for HIP kernels' launches, which only one can run.

It reads the topology the amdgpu kernel driver publishes (`/sys/class/kfd/kfd/topology/nodes/<n>/properties`,
one `name value` pair a line): a node with SIMDs (`simd_count` > 0) is a GPU, CPU nodes have none. Nothing is
loaded and no device is opened. `GPUEMU_NO_GPU=1` hides it too.

gpuemu-ci does not launch HIP kernels yet (nothing here could test a launch on an AMD GPU): the answer decides
only how a launch that did not run is reported, `skipped (no AMD GPU)` or an error saying it is not
supported.
"""

from __future__ import annotations

import os
from pathlib import Path

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


def gpu_nodes(nodes_dir: Path = KFD_NODES) -> int:
    """How many GPU nodes the KFD topology lists under `nodes_dir` (0 when it is missing or unreadable)."""
    try:
        nodes = sorted(nodes_dir.iterdir())
    except OSError:
        return 0
    count = 0
    for node in nodes:
        try:
            text = (node / "properties").read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "simd_count" and parts[1].isdigit() and int(parts[1]) > 0:
                count += 1
                break
    return count


def has_amd_gpu(nodes_dir: Path = KFD_NODES) -> bool:
    """Whether the machine has an AMD GPU the kernel driver exposes (a KFD node with a GPU); always False when
    GPUEMU_NO_GPU=1."""
    if os.environ.get("GPUEMU_NO_GPU") == "1":
        return False
    return gpu_nodes(nodes_dir) > 0
