"""How an op's status and note follow from its case counts: one rule for a run (pipeline/op_runner.py) and for
the merge of a run's shards (results/merge.py), so both write the same document."""

from __future__ import annotations

from gpuemu_ci.results.model import OpStatus

MAX_RECORDED_FAILURES = 20  # per op; the rest are counted (snapshots cost disk and comment space)


def op_status(total: int, failed: int, errored: int, skipped: int = 0) -> OpStatus:
    """Skipped cases (not judged on this machine) count neither way: an op none of whose cases was judged is
    skipped, never passed."""
    if failed:
        return OpStatus.FAILED
    if errored:
        return OpStatus.ERROR
    if total - skipped == 0:
        return OpStatus.SKIPPED if skipped else OpStatus.ERROR
    return OpStatus.PASSED


def op_message(
    total: int, errored: int, failed: int, cut_short: bool, skipped: int = 0, skip_reason: str | None = None
) -> str | None:
    """The note an OpResult carries about its counts."""
    if total == 0:
        return "no case ran" + (" (the suite timeout expired first)" if cut_short else "")
    if errored and not failed:
        return f"{errored} of {total} cases could not be judged (the reference failed)"
    if skipped:
        return f"{skipped} of {total} cases not judged here ({skip_reason}): not tested"
    return None
