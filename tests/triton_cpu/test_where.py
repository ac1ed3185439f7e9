"""Where a Triton kernel stored each output element (triton_cpu/where.py): real kernels in Triton's real
interpreter under the layer, vectorised and one program at a time, the output matched to the stores by address."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.triton_cpu.support_interpreter import run_interpreted

SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    import torch
    import triton
    import triton.language as tl
    from gpuemu_ci.triton_cpu.layer import CallSettings, intercepted

    @triton.jit
    def tiles(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        r = tl.program_id(0) * BM + tl.arange(0, BM)
        c = tl.program_id(1) * BN + tl.arange(0, BN)
        mask = (r[:, None] < M) & (c[None, :] < N)
        at = r[:, None] * N + c[None, :]
        x = tl.load(x_ptr + at, mask=mask, other=0.0)
        tl.store(y_ptr + at, x * 2, mask=mask)  # STORE LINE

    found = {}
    for vectorise in (True, False):
        x = torch.arange(10 * 70, dtype=torch.float32).reshape(10, 70)
        y = torch.empty_like(x)
        with intercepted(CallSettings(seed=5, vectorise=vectorise, log_stores=True)) as call:
            tiles[(3, 3)](x, y, 10, 70, BM=4, BN=32)
        (stored,) = call.stores.maps([y.numpy()])
        bad = np.zeros((10, 70), dtype=bool)
        bad[:, 64:] = True
        found[str(vectorise)] = {
            "describe": stored.describe((9, 65)),
            "full": stored.describe((1, 3)),
            "tiles": {str(k): v for k, v in stored.tiles().items()},
            "partial_only": stored.partial_only(bad),
            "not_only": stored.partial_only(np.ones((10, 70), dtype=bool)),
            "other": call.stores.maps([x.numpy()])[0] is None,  # only read: no store matched
        }
    print(json.dumps(found))
""")


@pytest.mark.slow  # a fresh interpreter with Triton (about 10 s)
def test_the_worst_element_is_traced_to_its_program_lane_and_store_line(tmp_path: Path) -> None:
    found = run_interpreted(SCRIPT, tmp_path)
    line = next(i for i, text in enumerate(SCRIPT.splitlines(), 1) if "STORE LINE" in text)
    for vectorise in ("True", "False"):
        seen = found[vectorise]
        # Element (9, 65): rows 8-11 are program 2 along axis 0, cols 64-95 program 2 along axis 1; in its
        # 4x32 block it is row 1, col 1: lane 33. Rows 10-11 and cols 70-95 are masked off: a partial store.
        assert seen["describe"] == (
            f"stored by program (2, 2, 0) of `tiles` (grid (3, 3, 1)), lane 33 of its block, at kernels.py:{line} "
            "(in tiles); its store's mask was partial in that program"
        ), vectorise
        assert seen["full"].startswith("stored by program (0, 0, 0)") and seen["full"].endswith(
            "a full (unmasked) tile"
        )
        assert seen["tiles"] == {"-1": 32, "-2": 4}
        assert seen["partial_only"] is True and seen["not_only"] is False
        assert seen["other"] is True
