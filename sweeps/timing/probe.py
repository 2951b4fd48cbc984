"""``decode_seconds`` while a multi-objective study runs: an architecture-keyed decode probe.

The timing stage (:mod:`sweeps.timing`) times a trained checkpoint after every trial has
finished, so its figure comes too late for the search and for early stopping. Decode time depends
on the architecture (mechanism, K, sizes, the sequence length, the beam), hardly on the weights,
once the model decodes as many steps as a trained one. So before Tune starts, while nothing else
runs, the probe builds each architecture the search may sample with random weights and times its
decoding of the same split the timing stage decodes, the way the stage does it
(``measure_decode_time``: one fresh process pinned to one core, one thread, a warm-up, repeats of
>= 50 ms until the median is known to 2 %), with one difference: every batch decodes exactly as
many steps as its longest reference (EOS masked until then, ``min_len = max_len``), the steps a
model that has learnt the task takes. A random model would otherwise stop at a random EOS or run
to the length limit.

K is searched as an integer range (``int_log_uniform``), so the probe measures anchors (every
power of two in the range, and its ends) and interpolates linearly in K between them (the step
cost of memory attention is linear in K). Every other architecture setting is measured as it is.

Decode time never falls as K grows (a larger K is more work at every step), but where K hardly
changes it (a small model, K below the per-step overhead) the measured anchors go up and down by
the probe's noise, and that noise would decide which architecture looks fastest: on a tiny copy
model K = 2..16 measured 4.52-4.80 ms in no order. So the estimates use the anchors' **isotonic
fit** in K (pool-adjacent-violators, per architecture key): an anchor measured faster than a
smaller K is pooled with it, and both get their mean. Where the cost grows with K the fit is
the measurement; where it does not, the architectures get one figure and the trained objective
decides between them. ``decode_probe.json`` keeps the measured figures; the fit is made on load.
Settings that only change training (``lr``, ``dropout``, ``weight_decay``) are not part of the key.

The table is kept in ``<output>/<name>/decode_probe.json`` (``--resume`` reuses it; so does any run
started with ``SWEEPS_DECODE_PROBE_TABLE=<a decode_probe.json>``, as ``benchmarks/moo_search.py``
does so that the grid and every search share one set of figures) and each trial's estimate goes into results.md beside the timing stage's figure, with how far
apart they are (``sweeps.report.moo``), and into results.csv (``decode_seconds_estimate``: what
its Optuna trial was told).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sweeps.layout import PROBE_FILE, write_atomic
from sweeps.spec import resolve_sections
from sweeps.spec.objectives import baseline_of
from sweeps.spec.search_schema import PROBED, estimate_column
from sweeps.timing.devices import highest_cpus, run_child

#: model settings that change how a model trains, not what it computes when it decodes
TRAINING_ONLY = frozenset({"lr", "weight_decay", "dropout", "val_decode"})
#: the setting the probe interpolates along (measured at anchors)
INTERPOLATED = "K"
#: a decode_probe.json whose entries a run takes before measuring what they lack
SHARED_TABLE_ENV = "SWEEPS_DECODE_PROBE_TABLE"
#: timed decoding per architecture and round at most (the timing stage's max_seconds when lower): the
#: probe times every architecture of the space twice, before any training starts
PROBE_MAX_SECONDS = 5.0
#: the pinned process (:mod:`sweeps.timing.probe_child`) and the prefix of each line it prints
CHILD_MODULE = "sweeps.timing.probe_child"
PREFIX = "PROBE "
#: each probed figure (sweeps.spec.search_schema.PROBED) and its name in decode_probe.json
FIELDS = {
    "decode_seconds": "seconds",
    "train_step_seconds": "train_step_seconds",
    "train_peak_mb": "train_peak_mb",
}


def probed_fields(spec: Any) -> list[str]:
    """The probe's figures a study's objectives and constraints name (decode time always)."""
    names = {o.name for o in spec.objectives} | {c.name for c in spec.constraints}
    return ["seconds", *(FIELDS[n] for n in FIELDS if n in names and n != "decode_seconds")]


def arch_key(task: dict[str, Any], model: dict[str, Any], seed: int) -> str:
    """The probe table's key: the data (task, seed) and the architecture without K and without
    the training-only settings."""
    arch = {k: v for k, v in model.items() if k not in TRAINING_ONLY and k != INTERPOLATED}
    return json.dumps({"task": task, "model": arch, "seed": seed}, sort_keys=True, default=str)


def k_anchors(low: int, high: int) -> list[int]:
    """Every power of two in [low, high], and both ends."""
    out = {int(low), int(high)}
    p = 1
    while p <= high:
        if p >= low:
            out.add(p)
        p *= 2
    return sorted(out)


def probe_models(spec: Any, plan: Any, baseline: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The model sections to time for one (cell, seed) plan: every combination of the searched
    architecture settings (K at its anchors), and the baseline model of the relative constraints."""

    choices: list[tuple[str, list[Any]]] = []
    for key, p in spec.parameters.items():
        if not key.startswith("model.") or key.split(".", 1)[1] in TRAINING_ONLY:
            continue
        if p.values is not None:
            choices.append((key, list(p.values)))
        elif p.resolved_distribution() in ("int_uniform", "int_log_uniform"):
            choices.append((key, k_anchors(int(p.min), int(p.max))))
        else:  # a float architecture setting: its ends (rare; estimates take the nearer one)
            choices.append((key, [p.min, p.max]))
    base = {"task": plan.task, "model": plan.model, "trainer": plan.trainer}
    models = []
    for combo in itertools.product(*(values for _, values in choices)):
        models.append(resolve_sections(base, dict(zip((k for k, _ in choices), combo)))[1])
    if baseline:
        models.append(resolve_sections(base, baseline)[1])
    return models


class DecodeEstimates:
    """The probe's table: per figure (:data:`FIELDS`: decode seconds, and the training step's
    seconds and peak when a study asks for them) and architecture key, the value by K (None for
    mechanisms without K)."""

    def __init__(self, entries: list[dict[str, Any]] | None = None) -> None:
        self.entries: list[dict[str, Any]] = []
        self._by: dict[str, dict[str, dict[int | None, float]]] = {}  # field -> key -> K -> value
        self._fitted: dict[tuple[str, str], dict[int | None, float]] = {}
        for e in entries or []:
            self.add(e)

    def has(self, key: str, k: int | None, fields: Iterable[str] = ("seconds",)) -> bool:
        return all(k in self._by.get(f, {}).get(key, {}) for f in fields)

    def add(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)
        for f in FIELDS.values():
            if entry.get(f) is not None:
                self._by.setdefault(f, {}).setdefault(entry["key"], {})[entry.get("K")] = float(
                    entry[f]
                )
        self._fitted = {fk: v for fk, v in self._fitted.items() if fk[1] != entry["key"]}

    def fitted(self, key: str, field: str = "seconds") -> dict[int | None, float]:
        """One key's figures by K, made non-decreasing in K (:func:`isotonic`); K None as measured."""
        if (field, key) not in self._fitted:
            measured = self._by.get(field, {}).get(key, {})
            ks = sorted(k for k in measured if k is not None)
            out = dict(zip(ks, isotonic([measured[k] for k in ks])))
            if None in measured:
                out[None] = measured[None]
            self._fitted[field, key] = out
        return self._fitted[field, key]

    def estimate(
        self, task: dict[str, Any], model: dict[str, Any], seed: int, name: str = "decode_seconds"
    ) -> float | None:
        """The figure ``name`` (:data:`FIELDS`; seconds to decode the split by default) for this
        architecture: the isotonic fit of the measured anchors at its K, interpolated linearly
        between the nearest anchors (extrapolated along the end segment past them)."""
        table = self.fitted(arch_key(task, model, seed), FIELDS[name])
        if not table:
            return None
        k = model.get(INTERPOLATED)
        k = int(k) if k is not None else None
        if k in table:
            return table[k]
        ks = sorted(x for x in table if x is not None)
        if k is None or not ks:
            return None
        if len(ks) == 1:
            return table[ks[0]]
        lo = max([x for x in ks if x < k] or ks[:1])
        hi = min([x for x in ks if x > k] or ks[-1:])
        if lo == hi:  # outside the anchors: the end segment
            lo, hi = (ks[0], ks[1]) if k < ks[0] else (ks[-2], ks[-1])
        return table[lo] + (table[hi] - table[lo]) * (k - lo) / (hi - lo)

    def save(self, path: Path) -> Path:

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(path, json.dumps({"entries": self.entries}, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> DecodeEstimates:
        try:
            return cls(json.loads(Path(path).read_text())["entries"])
        except (OSError, ValueError, KeyError):
            return cls()


def isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence nearest ``values`` in least squares (pool-adjacent-violators:
    a value below the one before it is pooled with it, and the pool gets its mean)."""
    pools: list[list[float]] = []  # [sum, count]
    for v in values:
        pools.append([float(v), 1.0])
        while len(pools) > 1 and pools[-2][0] / pools[-2][1] > pools[-1][0] / pools[-1][1]:
            total, count = pools.pop()
            pools[-1][0] += total
            pools[-1][1] += count
    return [total / count for total, count in pools for _ in range(int(count))]


def add_estimates(rows: list[dict[str, Any]], plans: dict[str, Any], out_dir: Path) -> None:
    """Each row's probe figures, where the sweep keeps a probe table (``decode_probe.json``: a
    multi-objective sweep whose objectives or constraints name them), as the columns
    :func:`estimate_column` names: the values its Optuna trial was told, beside the timing
    stage's. ``plans``: {trial id: (its plan, its folder)}."""
    path = Path(out_dir) / PROBE_FILE
    if not path.exists():
        return
    table = DecodeEstimates.load(path)
    for row in rows:
        held = plans.get(str(row.get("trial_id")))
        if held is None:
            continue
        plan = held[0]
        for name in PROBED:  # as the Optuna trial's attributes (sweeps.search.moo)
            value = table.estimate(plan.task, plan.model, plan.seed, name=name)
            if value is not None:
                row[estimate_column(name)] = value


def build_estimates(
    sweep: Any, out_dir: Path, say: Callable[[str], None] = print
) -> DecodeEstimates:
    """The probe stage: every architecture the sweep may sample, timed alone before Tune starts;
    ``decode_probe.json`` in ``out_dir`` is read first and only what it lacks is measured."""

    path = Path(out_dir) / PROBE_FILE
    table = DecodeEstimates.load(path)
    fields = probed_fields(sweep.spec)
    shared = os.environ.get(
        SHARED_TABLE_ENV
    )  # another run's table (the benchmark: one table for all runs)
    if shared:
        for entry in DecodeEstimates.load(Path(shared)).entries:
            if not table.has(entry["key"], entry.get("K"), fields):
                table.add(entry)
    baseline = baseline_of(sweep.spec)
    groups: dict[str, dict[str, Any]] = {}
    for plan in sweep.plans:
        for model in probe_models(sweep.spec, plan, baseline):
            key = arch_key(plan.task, model, plan.seed)
            k = model.get(INTERPOLATED)
            if table.has(key, k, fields):
                continue
            g = groups.setdefault(
                json.dumps([plan.task, plan.seed], sort_keys=True, default=str),
                {"task": plan.task, "seed": plan.seed, "models": []},
            )
            if not any(
                arch_key(plan.task, m, plan.seed) == key and m.get(INTERPOLATED) == k
                for m in g["models"]
            ):
                g["models"].append(model)
    todo = sum(len(g["models"]) for g in groups.values())
    if todo:
        say(
            f"decode probe: timing {todo} architecture(s) alone, before training (random weights, each batch "
            f"decoding its reference's length; median of repeats, one pinned process) -> {path}"
        )
    for g in groups.values():
        for entry in run_probe_process(
            g["task"], g["seed"], g["models"], sweep.spec.timing, fields
        ):
            entry["key"] = arch_key(g["task"], entry.pop("model"), g["seed"])
            table.add(entry)
        table.save(path)
    return table


def run_probe_process(
    task: dict[str, Any],
    seed: int,
    models: list[dict[str, Any]],
    timing: Any,
    fields: Iterable[str] = ("seconds",),
) -> list[dict]:
    """:func:`~sweeps.timing.probe_measure.time_models` in a fresh Python process (:mod:`sweeps.timing.probe_child`) pinned to the
    highest-numbered CPUs, as the timing stage's processes are."""

    kwargs = {
        "threads": timing.threads,
        "repeats": timing.repeats,
        "precision": timing.precision,
        "max_seconds": min(timing.max_seconds, PROBE_MAX_SECONDS),
        "warmup": timing.warmup,
        "calibration_seconds": timing.calibration_seconds,
        "train": [f for f in fields if f != "seconds"],
        "train_steps": timing.train_steps,
    }
    request = {
        "cpus": highest_cpus(int(timing.threads)),
        "task": task,
        "seed": seed,
        "models": models,
        "kwargs": kwargs,
    }
    code, found, error = run_child(CHILD_MODULE, request, PREFIX)
    if code != 0 or len(found) != len(models):
        raise RuntimeError(f"the decode probe failed (exit {code}): {error}")
    return [json.loads(line) for line in found]
