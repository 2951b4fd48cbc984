"""The timing stage on a sweep with fused trials: every member is timed as the model it is alone
(its own K, scoring, position encoding and length), not as the group it trained in. What depends
only on a model's shapes -- a training step's seconds and tokens/s, the peaks of memory -- is
measured once per shape within a group (the first finished member of each: members of one cell
share it, members of different cells do not) and copied to that shape's other members; decode
time depends on the trained weights (how long each hypothesis runs), so every member's model is
still timed decoding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lightning_modules.fused.axes import EVALUATION_SETTINGS, MEMBER_SETTINGS

#: sampled values that change nothing a training step's cost or memory depends on
UNTIMED_SETTINGS = frozenset(MEMBER_SETTINGS + EVALUATION_SETTINGS)


def shape_of(row: dict[str, Any]) -> tuple | None:
    """A fused member's shape as the timing stage sees it: its group, its cell (every grid value:
    K, scoring, length ...) and the values Optuna sampled that change a step's cost (not the
    learning rate, weight decay or dropout); None for a trial that trained alone."""
    group = row.get("fused_with")
    if not group:
        return None
    sampled = sorted(
        (k, str(v))
        for k, v in row.items()
        if k.startswith("param:") and k.rsplit(".", 1)[-1] not in UNTIMED_SETTINGS
    )
    return (group, row.get("cell"), tuple(sampled))


def time_once_per_group(
    jobs: Sequence[Any],
    rows: Sequence[dict[str, Any]],
    spec: Any,
    log: Callable[[str], None] | None,
    run_stage: Callable[..., list[Any]],
) -> list[tuple[Any, Any]]:
    """Per job (``rows[i]`` is job i's results row): its own outcome (decode time; all measures
    for the first member of each shape in a group, and an unfused trial) and the record its
    training step and peaks come from (its own, or its shape's first member's). ``run_stage``: the stage's
    :func:`~sweeps.timing.stage.run_timing_stage`."""
    first: dict[tuple, int] = {}
    copy_from: dict[int, int] = {}
    for i, row in enumerate(rows):
        shape = shape_of(row)
        if shape is not None and shape in first:
            copy_from[i] = first[shape]
        elif shape is not None:
            first[shape] = i
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
