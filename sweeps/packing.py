"""Longest first: the order the study's searcher hands out its (cell, seed) units.

Trials of unequal length packed in grid order leave the longest cell running alone at the end
(the cpu profile of k_vs_length ran its L=40 Bahdanau trial alone for its last ~4 minutes). The
searcher (:class:`sweeps.search.StudySearcher`) instead starts, among the units with the fewest
trials started, the one expected to take longest: Graham's LPT rule, within 4/3 of the best
makespan for independent jobs on identical slots.

The estimate only has to order trials, not predict seconds: training steps x the decoder's steps
per sentence (the task's ``max_length``; 1 without one) x the mechanism's cost per decoder step,
measured on the committed cpu run of k_vs_length (docs/results/, seconds per trial at L=40:
none 216, memory 266-299, Bahdanau 385). Mechanisms that score every source position at each
step cost as Bahdanau; memory attention grows slowly with K.
"""

from __future__ import annotations

import math
from typing import Any

#: cost of one decoder step relative to memory attention's, by mechanism (others: SOURCE_SCAN)
STEP_COST = {"none": 0.8, "memory": 1.0}
SOURCE_SCAN = 1.4  # Bahdanau, Luong, key-value, local, monotonic: O(source length) per step


def estimated_cost(task: dict[str, Any], model: dict[str, Any], trainer: dict[str, Any]) -> float:
    """A trial's relative cost from its resolved sections (larger: longer)."""
    steps = float(trainer.get("max_steps") or 1)
    length = float(task.get("max_length") or 1)
    attention = str(model.get("attention", "bahdanau"))
    per_step = STEP_COST.get(attention, SOURCE_SCAN)
    if attention == "memory":
        per_step += 0.02 * math.log2(max(1, int(model.get("K", 32) or 1)))  # K=32: +10% over K=1
    return steps * length * per_step
