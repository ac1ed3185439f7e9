"""`triton.autotune` under the layer: which config runs is drawn from the case seed, not benchmarked.

On a GPU the autotuner times every config and keeps the fastest; under the interpreter there is no device to
time (Triton's own benchmarker raises "0 active drivers"), and whichever config a GPU picks is one the kernel
must be right with. So for the duration of an op call each autotuned launch runs one config drawn from the
case seed and the launch (no benchmark runs, nothing is cached between calls): over a suite's cases every
config is exercised, and a case replays with the config it ran. `prune_configs_by`, `pre_hook` and
`restore_value` keep working: only the timing is replaced.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

MODULE = "triton.runtime.autotuner"
Wrap = Callable[[Any], Any]


def replaced(seed: Callable[[], int]) -> list[tuple[Any, str, Wrap]]:
    """(owner, name, wrap) for Triton's Autotuner, when loaded; `seed()` gives the running call's draw."""
    module = sys.modules.get(MODULE)
    tuner = getattr(module, "Autotuner", None)
    if tuner is None or "_bench" not in tuner.__dict__ or "run" not in tuner.__dict__:
        return []

    def bench(original: Any) -> Any:
        def seeded(self: Any, *args: Any, config: Any, **meta: Any) -> list[float]:
            configs = list(self.configs)
            index = configs.index(config) if config in configs else 0
            rank = float((index + seed()) % max(1, len(configs)))
            return [rank, rank, rank]  # the drawn config "times" 0 and wins

        return seeded

    def run(original: Any) -> Any:
        def fresh(self: Any, *args: Any, **kwargs: Any) -> Any:
            self.cache = {}  # a choice made for another case (or call) must not decide this one
            return original(self, *args, **kwargs)

        return fresh

    return [(tuner, "_bench", bench), (tuner, "run", run)]
