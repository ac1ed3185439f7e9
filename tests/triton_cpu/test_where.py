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
            # a transposed view of what the kernel wrote (Liger's RoPE returns such views): matched by address
            "transposed": call.stores.maps([y.numpy().T])[0].describe((65, 9)),
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
        assert seen["transposed"] == seen["describe"]


LARGE = textwrap.dedent("""
    import json
    import msgspec
    import torch
    import triton
    import triton.language as tl
    from gpuemu_ci.triton_cpu import where
    from gpuemu_ci.triton_cpu.layer import CallSettings, intercepted

    @triton.jit
    def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        at = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + at, tl.load(x_ptr + at, mask=at < n) * 2, mask=at < n)

    # Two outputs as large as get a map (Liger's RoPE returns q of 2**21 elements and k): 12 bytes an element
    # uncompressed, 31 MB, twice what a worker's reply may hold.
    x = torch.ones(where.MAX_ELEMENTS, dtype=torch.float32)
    y, z = torch.empty_like(x), torch.empty(x.numel() // 4)
    with intercepted(CallSettings(seed=5, vectorise=True, log_stores=True)) as call:
        double[(x.numel() // 1024,)](x, y, x.numel(), BLOCK=1024)
        double[(z.numel() // 1024,)](x, z, z.numel(), BLOCK=1024)
    maps = call.stores.maps([y.numpy(), z.numpy()])
    found = {
        "bytes": len(msgspec.msgpack.encode(maps)),
        "describe": maps[0].describe((1024 * 7 + 5,)),
        "note": call.stores.why_none(),
    }
    first = sum(len(getattr(maps[0], name)) for name in ("pid", "lane", "site", "kernel", "partial"))
    where.MAX_MAP_BYTES = first + 1  # a budget the first map alone fills
    small = where.StoreLog(stores=call.stores.stores, sites=call.stores.sites, kernels=call.stores.kernels)
    found["over_budget"] = [m is not None for m in small.maps([y.numpy(), z.numpy()])]
    found["over_note"] = small.why_none()
    print(json.dumps(found))
""")


@pytest.mark.slow  # a fresh interpreter with Triton, two outputs of 2**21 and 2**19 elements
def test_the_maps_of_the_largest_outputs_fit_in_a_workers_reply(tmp_path: Path) -> None:
    """A failing RoPE case's explain re-run crashed: its maps were 31 MB, over the 16 MiB reply limit."""
    from gpuemu_ci.backends.process import REPLY_LIMIT

    found = run_interpreted(LARGE, tmp_path)
    assert found["bytes"] < REPLY_LIMIT // 16
    assert found["describe"].startswith(
        "stored by program (7, 0, 0) of `double` (grid (2048, 1, 1)), lane 5 "
    )
    assert found["note"] == ""
    # Over the budget, an output gets no map and the call says why, rather than a reply the pool refuses.
    assert found["over_budget"] == [True, False]
    assert found["over_note"].startswith("where not recorded: the outputs' store maps are over")
