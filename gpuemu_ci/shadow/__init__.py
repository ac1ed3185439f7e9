"""Runtime shadow checking: `@shadow("op")` checks a sample of an op's real calls against its fp64 reference in
a background thread, judged like the gate, and writes what fails as replayable captures (`checker`).
Which calls are checked: `sampling`; captures: `capture`; the op judged: `spec`."""

from gpuemu_ci.shadow.checker import Shadow, ShadowCheckFailed, ShadowFailure, ShadowStats, shadow

__all__ = ["Shadow", "ShadowCheckFailed", "ShadowFailure", "ShadowStats", "shadow"]
