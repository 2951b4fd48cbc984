"""The timing stage on a sweep with fused trials: what depends only on a model's shapes -- a
training step's seconds and tokens/s, the peaks of memory -- is measured once per fused group, on
its first finished member, and copied to every member's row; decode time depends on the trained
weights (how long each hypothesis runs), so every member's model is still timed decoding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def time_once_per_group(
    jobs: Sequence[Any],
    rows: Sequence[dict[str, Any]],
    spec: Any,
    log: Callable[[str], None] | None,
    run_stage: Callable[..., list[Any]],
) -> list[tuple[Any, Any]]:
    """Per job (``rows[i]`` is job i's results row): its own outcome (decode time; all measures
    for a group's first member and an unfused trial) and the record its training step and peaks
    come from (its own, or its group's first member's). ``run_stage``: the stage's
    :func:`~sweeps.timing.stage.run_timing_stage`."""
    first: dict[str, int] = {}
    copy_from: dict[int, int] = {}
    for i, row in enumerate(rows):
        group = row.get("fused_with")
        if group and group in first:
            copy_from[i] = first[group]
        elif group:
            first[group] = i
    outcomes: list[Any] = [None] * len(jobs)
    full = [i for i in range(len(jobs)) if i not in copy_from]
    for i, outcome in zip(full, run_stage([jobs[i] for i in full], spec, log)):
        outcomes[i] = outcome
    others = sorted(copy_from)
    stopped = any(o is not None and o.status == "stopped" for o in outcomes)
    if others and "decode" in spec.measure and not stopped:  # a stop leaves them untimed
        decode_only = spec.model_copy(update={"measure": ["decode"]})
        for i, outcome in zip(others, run_stage([jobs[i] for i in others], decode_only, log)):
            outcomes[i] = outcome
    out = []
    for i in range(len(jobs)):
        source = outcomes[copy_from.get(i, i)]
        out.append((outcomes[i], source.record if source is not None else None))
    return out
