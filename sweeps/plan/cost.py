"""Longest first: the order the sweep's searcher hands out its (cell, seed) units.

Trials of unequal length packed in grid order leave the longest cell running alone at the end
(the cpu profile of k_vs_length ran its L=40 Bahdanau trial alone for its last ~4 minutes). The
searcher (:class:`sweeps.search.base.SweepSearcher`) instead starts, among the units with the fewest
trials started, the one expected to take longest: Graham's LPT rule, within 4/3 of the best
makespan for independent jobs on identical slots.

The estimate only has to order trials, not predict seconds: training steps x the decoder's steps
per sentence (the task's ``max_length``; 1 without one) x the mechanism's cost per decoder step,
each mechanism declares beside its code (``Attention.step_cost``, measured on the committed cpu
run of k_vs_length): this module names no mechanism.
"""

from __future__ import annotations

from typing import Any

from sweeps.spec.signatures import default_attention, step_cost


def estimated_cost(task: dict[str, Any], model: dict[str, Any], trainer: dict[str, Any]) -> float:
    """A trial's relative cost from its resolved sections (larger: longer)."""
    steps = float(trainer.get("max_steps") or 1)
    length = float(task.get("max_length") or 1)
    per_step = step_cost(str(model.get("attention", default_attention())), model)
    return steps * length * per_step
