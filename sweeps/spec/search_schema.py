"""The sweep file's search keys: Optuna's ``parameters`` (:class:`ParamSpec`), the
multi-objective ``objectives`` and ``constraints``, ``early_terminate`` (ASHA or the Pareto rung
rule) and ``stop_when`` (a trial whose metric arrived stops). The rest of the schema, and the
sweep file as a whole (:class:`~sweeps.spec.schema.SweepSpec`), is in :mod:`sweeps.spec.schema`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lightning_modules.metric_names import (
    DECODE_SECONDS,
    FIT_METRICS,
    TRAIN_LOSS,
    VAL_BLEU,
    VAL_DECODE_SECONDS,
    VAL_LOSS,
    VAL_SACREBLEU,
    VAL_TOKEN_ACC,
)
from sweeps.spec.scalars import schema_value_problem


class _Strict(BaseModel):
    """A section of the sweep file: unknown keys are refused, and so are ``true`` for a number
    (pydantic would read it as 1) and a whole number YAML read as text (``max_steps: 1e5``), each
    in the words the constructor settings' checks use (:mod:`sweeps.spec.scalars`)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _yaml_scalar(cls, value: Any, info: ValidationInfo) -> Any:
        problem = schema_value_problem(cls.model_fields[info.field_name].annotation, value)
        if problem:
            raise ValueError(problem)
        return value


class EarlyTerminateSpec(_Strict):
    """ASHA in Ray's vocabulary. One unit of ``grace_period``/``max_t`` is one validation report."""

    # none: every trial runs its steps; asha: Ray's ASHA; pareto: the multi-objective rung rule
    type: Literal["none", "asha", "pareto"] = "none"
    # validation reports a trial makes before it can be stopped (the first rung)
    grace_period: int = Field(1, ge=1)
    # each rung keeps the best 1/reduction_factor of the trials that reach it
    reduction_factor: float = Field(2.0, gt=1)
    # reports at which the rungs end; null: the reports of a whole trial (trainer.max_steps over
    # an int val_check_interval; 100 otherwise)
    max_t: int | None = Field(None, ge=1)
    # pareto only: per objective, the relative difference a finished trial must be better by to make
    # a running one hopeless (default: decode_seconds 0.10, the decode probe's noise)
    tolerance: dict[str, Annotated[float, Field(ge=0, lt=1)]] | None = None
    # pareto only: "wait" (a trial waits at a rung, paused, until it ranks in the top 1/rf of at least
    # rf arrivals or the rung is complete: ASHA's promotion) or "immediate" (it goes on or stops at
    # once, against those that came before it, as Ray's ASHA)
    promotion: Literal["wait", "immediate"] | None = None

    @property
    def waits_at_rungs(self) -> bool:
        """The Pareto rule with ``promotion: wait``, its default."""
        return self.type == "pareto" and (self.promotion or "wait") == "wait"

    @model_validator(mode="after")
    def _first_rung_before_the_last(self) -> EarlyTerminateSpec:
        if self.max_t is not None and self.grace_period > self.max_t:
            raise ValueError(
                f"grace_period {self.grace_period} is above max_t {self.max_t}: the first rung "
                "would come after the rungs end; give a grace_period up to max_t"
            )
        return self


def reports_per_trial(spec: Any) -> int:
    """The validation reports a whole trial makes: ``trainer.max_steps`` over an int
    ``val_check_interval`` (at least 1); 100 where the interval is a fraction of an epoch."""
    t = spec.trainer
    if isinstance(t.val_check_interval, int) and t.val_check_interval > 0:
        return max(1, t.max_steps // t.val_check_interval)
    return 100


def milestones(grace_period: int, reduction_factor: float, max_t: int) -> list[int]:
    """Report counts at which a trial is compared: grace, grace*rf, ... below ``max_t``."""
    out, t = [], float(grace_period)
    while round(t) < max_t:
        if not out or round(t) > out[-1]:
            out.append(int(round(t)))
        t *= reduction_factor
    return out


def configuration_rungs(spec: Any) -> list[int]:
    """The rungs at which configurations judged over seeds are compared
    (:class:`sweeps.schedulers.config_rungs.ConfigRungs`: ASHA's ``grace_period``,
    ``reduction_factor`` and ``max_t``, the last a whole trial's reports when not given); [] where
    there is none (a first rung at or past ``max_t``), or fewer than 2 configurations to compare."""
    et = spec.early_terminate
    if et.type == "none" or spec.num_samples < 2:
        return []
    max_t = et.max_t or max(et.grace_period, reports_per_trial(spec))
    return milestones(min(et.grace_period, max_t), et.reduction_factor, max_t)


# decode_seconds better only by more than 10%: the probe's figures for same-cost architectures
# differ by up to 8% (docs/moo_early_stopping.md, "The tolerance")
DEFAULT_TOLERANCE = {DECODE_SECONDS: 0.10}


def tolerances(spec: Any) -> list[float]:
    """The rung rule's tolerance per objective, in ``spec.objectives``' order (0: exact)."""
    given = spec.early_terminate.tolerance
    table = DEFAULT_TOLERANCE if given is None else given
    return [float(table.get(o.name, 0.0)) for o in spec.objectives]


class ParamSpec(_Strict):
    """A nuisance parameter in W&B Sweeps' shape."""

    values: list[Any] | None = None  # the choices (a categorical parameter)
    # the range's ends, as the file writes them: 0 is an integer, 0.0 a float (what a missing
    # distribution is inferred from)
    min: int | float | None = None  # the range's lower end (with max)
    max: int | float | None = None  # the range's upper end (with min)
    # how values are drawn; null: categorical with values, else int_uniform when min and max are
    # both written as integers (0, 64), uniform otherwise (0.0, 1.0; log_uniform_values: log
    # scale, min > 0)
    distribution: (
        Literal["categorical", "uniform", "log_uniform_values", "int_uniform", "int_log_uniform"]
        | None
    ) = None

    def resolved_distribution(self) -> str:
        if self.values is not None:
            if self.min is not None or self.max is not None:
                raise ValueError(
                    "give either `values: [...]` (the choices) or `min` and `max` (a range), "
                    "not both"
                )
            if self.distribution not in (None, "categorical"):
                raise ValueError("`values` goes with distribution categorical (or none)")
            if not self.values:
                raise ValueError("`values` is empty")
            return "categorical"
        if self.min is None or self.max is None:
            raise ValueError("give either `values: [...]` or both `min` and `max`")
        if not self.min < self.max:
            raise ValueError(f"min ({self.min}) must be below max ({self.max}): swap them")
        dist = self.distribution or (
            "int_uniform" if isinstance(self.min, int) and isinstance(self.max, int) else "uniform"
        )
        if dist == "int_uniform" and not (
            float(self.min).is_integer() and float(self.max).is_integer()
        ):  # int() would cut 0.5 to 0, below the range
            raise ValueError(
                "int_uniform needs whole numbers for min and max (e.g. {min: 1, max: 8}); for a "
                "real-valued range leave distribution out or give uniform"
            )
        if dist == "log_uniform_values" and self.min <= 0:
            raise ValueError("log_uniform_values needs min > 0")
        if dist == "categorical":
            raise ValueError("distribution categorical needs `values`")
        if dist == "int_log_uniform" and (
            self.min < 1 or not float(self.min).is_integer() or not float(self.max).is_integer()
        ):
            raise ValueError(
                "int_log_uniform needs whole numbers with min >= 1 (e.g. K: {min: 1, max: 64})"
            )
        return dist


# ---- multi-objective studies: the checks are in sweeps.spec.objectives

#: the natural direction of each metric a sweep can produce: "within" constraints read "no worse
#: than the baseline by more than", in this direction
NATURAL_GOALS = {
    VAL_BLEU: "maximize",
    VAL_SACREBLEU: "maximize",
    VAL_TOKEN_ACC: "maximize",
    VAL_LOSS: "minimize",
    TRAIN_LOSS: "minimize",
    VAL_DECODE_SECONDS: "minimize",
    DECODE_SECONDS: "minimize",
    "train_step_seconds": "minimize",
    "train_peak_mb": "minimize",
}
#: figures of a model's cost the probe (sweeps.timing.probe) measures before training, for every
#: architecture the search may sample: objectives and constraints know them before a trial trains
PROBED = (DECODE_SECONDS, "train_step_seconds", "train_peak_mb")


def reported_metrics_text() -> str:
    """The metrics a trial can report, for a refusal's ``valid:`` list: val/sacrebleu says that
    only a task that detokenizes (wmt17) reports it."""
    return ", ".join(f"{m} (wmt17 only)" if m == VAL_SACREBLEU else m for m in FIT_METRICS)


def estimate_column(figure: str) -> str:
    """Where a trial's probe figure (one of :data:`PROBED`) is kept, what its Optuna trial was
    told: results.csv's column and the Optuna trial's user attribute, ``decode_seconds_estimate``."""
    return f"{figure}_estimate"


#: upper or lower bounds a trained metric cannot pass (BLEU <= 100, token accuracy <= 1): the
#: rung rule stops a trial that could not reach the front even at its bound
BOUNDS = {VAL_BLEU: 100.0, VAL_SACREBLEU: 100.0, VAL_TOKEN_ACC: 1.0, VAL_LOSS: 0.0, TRAIN_LOSS: 0.0}


def goal_problem(name: str, goal: str) -> str | None:
    """Why ``goal`` for the metric ``name`` would select the worst trials, or None (a metric of
    no known direction takes either)."""
    natural = NATURAL_GOALS.get(name)
    if natural is None or natural == goal:
        return None
    better = "higher" if natural == "maximize" else "lower"
    return (
        f"goal {goal} for {name} would pick the worst trials (a {better} {name} is better); "
        f"write goal: {natural}"
    )


#: the values each metric can take (BLEU and token accuracy both ways; losses, seconds and MB at
#: least 0): a bound outside them is never met
RANGES = {
    **{name: (0.0, BOUNDS[name]) for name in (VAL_BLEU, VAL_SACREBLEU, VAL_TOKEN_ACC)},
    **{name: (0.0, math.inf) for name, goal in NATURAL_GOALS.items() if goal == "minimize"},
}


def beyond_bound(name: str, value: float | None, side: str) -> str | None:
    """Why ``value`` as a ``side`` (``at least`` / ``at most``) of the metric ``name`` can never be
    met (BLEU above 100 or below 0, token accuracy above 1, a loss or a time below 0), or None."""
    low, high = RANGES.get(name, (-math.inf, math.inf))
    if value is None:
        return None
    if side == "at least" and value > high:
        return f"{name} is at most {high:g}, so {side} {value:g} is never met"
    if side == "at most" and value < low:
        return f"{name} is at least {low:g}, so {side} {value:g} is never met"
    return None


def finite_bound(value: float | None) -> float | None:
    """A bound as given, where it is a number (NaN compares false both ways, and a trial would
    count whatever its value; an infinite one bounds nothing or everything)."""
    if value is not None and not math.isfinite(value):
        raise ValueError(f"a bound is a finite number, not {value}")
    return value


class _Goal(_Strict):
    """A section that names a metric (``name``) and a direction (``goal``): the direction is the
    metric's own (:func:`goal_problem`)."""

    @model_validator(mode="after")
    def _natural_goal(self) -> _Goal:
        problem = goal_problem(self.name, self.goal)  # type: ignore[attr-defined]
        if problem:
            raise ValueError(problem)
        return self


class ObjectiveSpec(_Goal):
    name: str  # a metric the trials report, or a figure the probe measures (decode_seconds)
    goal: Literal["maximize", "minimize"]  # whether a higher or a lower value is better


class ConstraintSpec(_Strict):
    """``min``/``max``: an absolute bound; ``within`` + ``of``: at most ``within`` worse (in the
    metric's natural direction) than the baseline model ``of`` (model settings replacing the
    searched model's, e.g. ``{attention: bahdanau}``), trained in the same cell and seed."""

    name: str  # the metric or measured figure bounded (as in objectives)
    min: float | None = None  # a trial counts only with at least this value
    max: float | None = None  # a trial counts only with at most this value
    # how much worse than the baseline a trial may be, in the metric's units
    within: float | None = Field(None, ge=0)
    of: dict[str, Any] | None = None  # the baseline: model settings, e.g. {attention: bahdanau}

    _finite = field_validator("min", "max")(finite_bound)

    @model_validator(mode="after")
    def _one_kind(self) -> ConstraintSpec:
        absolute = self.min is not None or self.max is not None
        relative = self.within is not None or self.of is not None
        if absolute == relative:
            raise ValueError(
                "give either min/max (an absolute bound) or within + of (relative to a baseline model)"
            )
        if relative and (self.within is None or not self.of):
            raise ValueError(
                "a relative constraint needs both `within` (how much worse) and `of` (the baseline's "
                "model settings, e.g. {attention: bahdanau})"
            )
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(
                f"no trial could count: min {self.min:g} is above max {self.max:g}; swap them "
                f"(min: {self.max:g}, max: {self.min:g})"
            )
        problem = beyond_bound(self.name, self.min, "at least") or beyond_bound(
            self.name, self.max, "at most"
        )
        if problem:
            raise ValueError(f"no trial could count: {problem}")
        return self

    @property
    def label(self) -> str:
        if self.of:
            who = " ".join(f"{k}={v}" for k, v in self.of.items())
            return f"{self.name} within {self.within:g} of {who}"
        parts = ([f"{self.name} >= {self.min:g}"] if self.min is not None else []) + (
            [f"{self.name} <= {self.max:g}"] if self.max is not None else []
        )
        return " and ".join(parts)

    def violation(self, value: float, baseline: float | None = None) -> float:
        """Optuna's convention: <= 0 feasible, > 0 by how much it is violated."""
        if self.of:
            if baseline is None:
                return float("inf")
            if NATURAL_GOALS.get(self.name, "maximize") == "maximize":
                return (baseline - self.within) - value
            return value - (baseline + self.within)
        out = -float("inf")
        if self.min is not None:
            out = max(out, self.min - value)
        if self.max is not None:
            out = max(out, value - self.max)
        return out


# ---- a trial whose metric converged stops: the callback is sweeps.trial.stop_when


def stop_direction_problem(
    metric: str, at_least: float | None, at_most: float | None
) -> str | None:
    """Why a ``stop_when`` bound against ``metric``'s direction would stop every trial at once, or
    None: an untrained model's BLEU is already at most 90, its loss already at least 0.1, so the
    trial would stop as converged at its first report (a metric of no known direction takes
    either)."""
    natural = NATURAL_GOALS.get(metric)
    if natural == "maximize" and at_most is not None:
        given, bound, better = "at_most", at_most, "higher"
    elif natural == "minimize" and at_least is not None:
        given, bound, better = "at_least", at_least, "lower"
    else:
        return None
    fix = "at_least" if given == "at_most" else "at_most"
    return (
        f"{given} {bound:g} for {metric} would stop every trial as converged at its first "
        f"report (a {better} {metric} is better, and an untrained model's is {given.replace('_', ' ')} "
        f"{bound:g} already); write {fix}: {bound:g}"
    )


class StopWhenSpec(_Strict):
    """Stop a trial once ``metric`` is at least ``at_least`` (or at most ``at_most``) at
    ``reports`` validation reports in a row."""

    metric: str  # a metric the trials report (e.g. val/bleu)
    at_least: float | None = None  # stop once the metric is at least this (a rising metric)
    at_most: float | None = None  # stop once the metric is at most this (a falling one, a loss)
    reports: int = Field(2, ge=1)  # validation reports in a row the bound must hold at

    _finite = field_validator("at_least", "at_most")(finite_bound)

    @field_validator("metric")
    @classmethod
    def _reported(cls, value: str) -> str:
        if value not in FIT_METRICS:
            raise ValueError(
                f"{value!r} is not a metric the trials report; valid: {reported_metrics_text()}"
            )
        return value

    @model_validator(mode="after")
    def _one_bound(self) -> StopWhenSpec:
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError(
                "give exactly one of at_least (a metric that rises, e.g. val/bleu) "
                "and at_most (one that falls, e.g. val/loss)"
            )
        problem = beyond_bound(self.metric, self.at_least, "at least") or beyond_bound(
            self.metric, self.at_most, "at most"
        )
        if problem:
            raise ValueError(f"no trial would stop: {problem}")
        problem = stop_direction_problem(self.metric, self.at_least, self.at_most)
        if problem:
            raise ValueError(problem)
        return self

    def reached(self, value: float) -> bool:
        return value >= self.at_least if self.at_least is not None else value <= self.at_most  # type: ignore[operator]

    def describe(self) -> str:
        bound = f">= {self.at_least:g}" if self.at_least is not None else f"<= {self.at_most:g}"
        return f"{self.metric} {bound} at {self.reports} report(s) in a row"
