"""The multi-objective part of a sweep file: ``objectives`` and ``constraints``.

```yaml
objectives:                                   # instead of `metric`: two, each {name, goal}
  - {name: val/bleu, goal: maximize}
  - {name: decode_seconds, goal: minimize}    # the decode probe's figure while the sweep runs
constraints:                                  # (train_step_seconds, train_peak_mb: probed too)
  - {name: val/bleu, min: 95}                 # absolute: val/bleu >= 95
  - {name: train_peak_mb, max: 2000}          # a training step's peak memory, from the probe
  - {name: val/bleu, within: 1.0, of: {attention: bahdanau}}   # relative: at most 1.0 worse than
                                              # a bahdanau model trained in the same (cell, seed)
early_terminate: {type: pareto, grace_period: 1, reduction_factor: 3}
                                              # tolerance: {decode_seconds: 0.10} (the default)
search: {sampler: tpe}                         # or nsga2
```

:func:`check_objectives` runs at ``--dry-run`` (from :func:`sweeps.spec.load.build_sweep`) and
raises :class:`SpecError` with one line for each of these mistakes: ``metric`` and
``objectives`` together, an unknown objective, a constraint on a metric the sweep never produces,
and the search settings a single-metric sweep would not use (``search.sampler: nsga2``;
``num_samples`` above 1 with no ``parameters:``).
"""

from __future__ import annotations

from typing import Any

from lightning_modules.metric_names import DECODE_SECONDS, FIT_METRICS, VAL_SACREBLEU  # noqa: F401
from sweeps.spec.grid import Cell, base_sections, resolve_sections
from sweeps.spec.schema import SpecError
from sweeps.spec.search_schema import (  # noqa: F401 (re-exported)
    BOUNDS,
    NATURAL_GOALS,
    PROBED,
    ConstraintSpec,
    ObjectiveSpec,
)
from sweeps.spec.validate import validate_cell


def produced_metrics(spec: Any) -> tuple[str, ...]:
    """What a sweep's trials produce: the metrics the module logs while training (val/sacrebleu
    only on a task that detokenizes: WMT), and the cost figures of the probe and the timing stage
    (decode_seconds, train_step_seconds, train_peak_mb: :data:`PROBED`)."""
    names = [m for m in FIT_METRICS if m != VAL_SACREBLEU or spec.task.get("name") == "wmt17"]
    return (*names, *PROBED)


def _not_produced(name: str, valid: tuple[str, ...]) -> str:
    """The refusal of a metric no trial of this sweep produces, naming the ones it does."""
    why = " (val/sacrebleu needs a task that detokenizes: wmt17)" if name == VAL_SACREBLEU else ""
    return f"{name!r} is a metric this sweep never produces{why}; valid: {', '.join(valid)}"


def _pareto_or_remove(spec: Any) -> str:
    """The fix of a Pareto-only setting on another scheduler: the Pareto rule where the sweep
    has the objectives it ranks, else only to remove it."""
    if spec.objectives:
        return "set early_terminate.type: pareto, or remove it"
    return "remove it (the Pareto rule ranks trials on `objectives:`, which this sweep has not)"


def check_reported_metrics(spec: Any, source: str) -> None:
    """``metric`` and ``stop_when.metric`` name a metric this sweep's trials report (the schema
    knows every task's metrics; this knows the task's: val/sacrebleu only on WMT)."""
    fit = tuple(m for m in produced_metrics(spec) if m in FIT_METRICS)
    named = [("metric.name", spec.metric.name)]
    if spec.stop_when is not None:
        named.append(("stop_when.metric", spec.stop_when.metric))
    for key, name in named:
        if name not in fit:
            raise SpecError(key, _not_produced(name, fit), source)


def check_objectives(spec: Any, source: str) -> None:
    """The dry-run checks of ``objectives``, ``constraints`` and what depends on them; one line each."""
    check_reported_metrics(spec, source)
    if spec.early_terminate.promotion is not None and spec.early_terminate.type != "pareto":
        raise SpecError(
            "early_terminate.promotion",
            "promotion (wait or immediate) is read by the Pareto rung rule only; "
            + _pareto_or_remove(spec),
            source,
        )
    if not spec.objectives:
        if spec.num_samples > 1 and not spec.parameters:
            raise SpecError(
                "num_samples",
                f"{spec.num_samples} is Optuna's budget of trials per cell and seed, and this "
                "sweep has no `parameters:` to search, so each cell trains once per seed: "
                "remove num_samples, or add parameters (e.g. model.lr: {min: 1.0e-4, max: "
                "1.0e-2, distribution: log_uniform_values}); for repeats, give more seeds",
                source,
            )
        if spec.search.sampler == "nsga2":
            raise SpecError(
                "search.sampler",
                "nsga2 (Optuna's NSGAIISampler) ranks trials on several objectives; this sweep "
                "has one metric: use tpe or random, or declare `objectives:`",
                source,
            )
        if spec.constraints:
            raise SpecError(
                "constraints",
                "constraints go with `objectives:` (a multi-objective study); "
                "add objectives, e.g. [{name: val/bleu, goal: maximize}, "
                "{name: decode_seconds, goal: minimize}]",
                source,
            )
        if spec.early_terminate.type == "pareto":
            raise SpecError(
                "early_terminate.type",
                "pareto ranks trials on several objectives; this sweep has one "
                "metric: use asha, or declare `objectives:`",
                source,
            )
        if spec.early_terminate.tolerance is not None:
            raise SpecError(
                "early_terminate.tolerance",
                f"type {spec.early_terminate.type} does not read a tolerance (the Pareto rung "
                "rule of a multi-objective study does, per objective); remove it",
                source,
            )
        return
    if "metric" in spec.model_fields_set:
        raise SpecError(
            "objectives",
            "a sweep declares either `metric` (one objective) or `objectives` "
            "(several), not both: remove `metric`",
            source,
        )
    valid = produced_metrics(spec)
    for i, obj in enumerate(spec.objectives):
        if obj.name not in valid:
            raise SpecError(
                f"objectives[{i}].name",
                f"{obj.name!r} is not a metric this sweep produces; valid: {', '.join(valid)}",
                source,
            )
    names = [o.name for o in spec.objectives]
    if len(names) != 2 or len(set(names)) != 2:
        raise SpecError(
            "objectives",
            f"give two different objectives (got {len(names)}: {', '.join(names)}); the "
            f"search, its hypervolume and its report handle two",
            source,
        )
    for i, c in enumerate(spec.constraints):
        if c.name not in valid:
            raise SpecError(f"constraints[{i}].name", _not_produced(c.name, valid), source)
    if len({repr(sorted(c.of.items())) for c in spec.constraints if c.of}) > 1:
        raise SpecError(
            "constraints",
            "relative constraints name one baseline model per study; give every "
            "`of:` the same settings",
            source,
        )
    if spec.early_terminate.tolerance is not None and spec.early_terminate.type != "pareto":
        raise SpecError(
            "early_terminate.tolerance",
            "a tolerance is read by the Pareto rung rule only; " + _pareto_or_remove(spec),
            source,
        )
    for name in spec.early_terminate.tolerance or {}:
        if name not in names:
            raise SpecError(
                f"early_terminate.tolerance.{name}",
                f"{name!r} is not an objective of this sweep; "
                f"tolerances are per objective: {', '.join(names)}",
                source,
            )
    if spec.early_terminate.type == "asha":
        raise SpecError(
            "early_terminate.type",
            "asha ranks trials on one metric; with `objectives:` use "
            "type: pareto (the Pareto rung rule) or none",
            source,
        )
    if not spec.parameters:
        raise SpecError(
            "objectives",
            "a multi-objective study searches `parameters:` inside each grid cell "
            "(e.g. model.K: {min: 1, max: 64, distribution: int_log_uniform}); "
            "give at least one",
            source,
        )


def baseline_of(spec: Any) -> dict[str, Any] | None:
    """The baseline model's settings (``of:`` of the relative constraints) as dotted keys, or None."""
    for c in spec.constraints:
        if c.of:
            return {(k if "." in k else f"model.{k}"): v for k, v in c.of.items()}
    return None


def check_baseline(spec: Any, cells: list, source: str) -> None:
    """The baseline model of the relative constraints, in every cell: the sweep's fixed settings,
    the cell's grid values, then ``of:`` (no searched value), checked like any cell."""
    of = baseline_of(spec)
    if of is None:
        return

    base = base_sections(spec)
    for cell in cells:
        values = {**cell.values, **of}
        at = next(i for i, c in enumerate(spec.constraints) if c.of)
        origins = {**cell.origins, **{k: f"constraints[{at}].of.{k.split('.', 1)[1]}" for k in of}}
        task, model, trainer = resolve_sections(base, values)
        validate_cell(task, model, trainer, Cell(values, origins), source)
