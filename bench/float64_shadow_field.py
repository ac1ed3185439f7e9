"""What the float64 shadow run (gpuemu_ci/triton_cpu/shadow.py) names on the field's precision targets, each
kernel called directly through the layer with `CallSettings(shadow64=True)` on inputs of the kind it fails on:
rows of mean 1000 and standard deviation 1 for the one-pass variances (and Liger's own two-pass LayerNorm, which
must get no finding), logits below exp's fp32 range for the cross-entropy whose running max starts at 0, rows of
zeros for the RMSNorm without `eps` (a logic bug: no finding). Prints, per entry, the programs shadowed and the
distinct lines named. Needs torch, triton and liger-kernel 0.8.5.

    python bench/float64_shadow_field.py
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "field")]

import torch  # noqa: E402

from gpuemu_ci.triton_cpu.layer import CallSettings, intercepted  # noqa: E402


def named(entry: str, op: Callable[[], object]) -> None:
    with intercepted(CallSettings(seed=1, shadow64=True)) as call:
        op()
    report = call.report()
    lines = Counter(f"{f.site} [{f.kind}]" for f in report.shadow)
    said = "; ".join(f"{site} in {count} programs" for site, count in lines.items()) or "nothing"
    print(f"{entry}: {report.shadowed} programs shadowed; names {said}")


def main() -> None:
    from field_kernels import liger_mutants, liger_ops

    torch.manual_seed(0)
    x, w, b = 1000 + torch.randn(16, 1024), torch.rand(1024) + 0.5, torch.randn(1024)
    named("liger_layer_norm.bug.one_pass_variance", lambda: liger_mutants.layer_norm_one_pass(x, w, b, 1e-5))
    named("liger_layer_norm (Liger's own, two-pass)", lambda: liger_ops.layer_norm(x, w, b, 1e-5))
    g, gw, gb = 1000 + torch.randn(4, 64, 256), torch.rand(64) + 0.5, torch.randn(64)
    named("liger_group_norm.upstream.one_pass_variance", lambda: liger_ops.group_norm(g, gw, gb, 4, 1e-5))
    logits, target = -200 - 5 * torch.rand(4, 1000), torch.randint(0, 1000, (4,))
    named(
        "liger_cross_entropy.bug.max_init_zero",
        lambda: liger_mutants.cross_entropy_max_init_zero(logits, target),
    )
    zeros, rw = torch.zeros(4, 512), torch.rand(512)
    named("liger_rms_norm.bug.eps_ignored", lambda: liger_mutants.rms_norm_eps_ignored(zeros, rw, 1e-6))


if __name__ == "__main__":
    main()
