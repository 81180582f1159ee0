"""Which recorded failures a resumed stage runs again: those whose cause was the machine, not the run.

A run that failed because the data was missing or wrong, or no CUDA device was there, says nothing about the
program. A resumed stage passes the up-front checks first (tr2.cards.check_machine), so such a cause is gone and
the run is owed: it runs again, its new record carrying `retried` with the earlier cause and reason. Every other
failure (an exit code of the program, a timeout, out of memory, no window) is a result and stays.
"""
from __future__ import annotations

import re

# cause -> what the trainer (or the stage) prints when it is the machine's; one line of `reason` or `tail`
CAUSES = {
    "no data": re.compile(r"data file .* (not found|differs from the expected)|TR2_DATA: .* is not a folder"),
    "no GPU": re.compile(r"no CUDA device|no CUDA-capable device|cudaErrorNoDevice|CUDA driver version is "
                         r"insufficient|Found no NVIDIA driver"),
}
FAILED = ("failed", "timeout", "no-window")  # the statuses of a run that did not finish (tr2.clock)


def cause(record: dict):
    """'no data' | 'no GPU' when a failed run's reason (or log tail) shows the machine's cause, else None."""
    if record.get("status") not in FAILED:
        return None
    text = "\n".join([str(record.get("reason") or ""), *[str(x) for x in (record.get("tail") or [])]])
    return next((name for name, pattern in CAUSES.items() if pattern.search(text)), None)


def should_retry(record: dict) -> bool:
    """Run again on resume: a failure whose cause was the machine (the up-front checks have passed since)."""
    return cause(record) is not None


def note(record: dict) -> str:
    """What the retried run's record says about the one it replaces."""
    return f"retried on resume: the earlier run failed for {cause(record)} ({record.get('reason')})"


def drop_retried(records: list, key) -> list:
    """The records without each retried failure that a later record of the same key(record) replaced."""
    later = {key(r): i for i, r in enumerate(records)}
    return [r for i, r in enumerate(records) if not (should_retry(r) and later[key(r)] > i)]
