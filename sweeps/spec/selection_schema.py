"""The sweep-file keys of choosing on validation and reporting on held-out data: the held-out
evaluation after selection (``heldout``, run by :mod:`sweeps.heldout`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from sweeps.errors import SpecError
from sweeps.spec.search_schema import _Strict


class HeldoutSpec(_Strict):
    """The held-out evaluation after training (:mod:`sweeps.heldout`): once the sweep's metric has
    chosen each cell's configuration on validation, the final checkpoints of the chosen trials are
    evaluated once on the task's test split (the copy task's own held-out draw; WMT's
    ``test_prefix``: newstest2016) and results.csv gains ``test/bleu`` (and ``test/sacrebleu``)."""

    enabled: bool = Field(
        True,
        description="Evaluate the chosen trials on the test split after training (results.csv's "
        "test/bleu, results.md's held-out table).",
    )
    trials: Literal["chosen", "all"] = Field(
        "chosen",
        description="`chosen`: only the trials the summary rule picks on validation (per cell "
        "and seed); `all`: every finished trial (costs more, and invites choosing on test).",
    )


#: the largest seed: Lightning's ``seed_everything`` takes 0 to 2**32 - 1 (numpy's seeds) and raises
#: on any other, in the trial, after the sweep has started
SEED_MAX = 2**32 - 1
Seed = Annotated[int, Field(ge=0, le=SEED_MAX)]


def seeds_problem(values: Any, example: str, empty: bool = False) -> str | None:
    """Why a list of seeds as written cannot be trained (``empty``: an empty list is allowed), or
    None: a seed that is a yes/no value (pydantic would read ``true`` as 1) or outside 0 to
    :data:`SEED_MAX`, an empty list. ``example`` is how to write the key (``seeds: [0, 1, 2]``)."""
    if not isinstance(values, list | tuple):
        return None
    if not values and not empty:
        return f"an empty list trains nothing; give at least one seed, e.g. {example}"
    whole = f"a seed is a whole number from 0 to {SEED_MAX}"
    for value in values:
        if isinstance(value, bool):
            return f"{value!r} is a yes/no value; {whole}, e.g. {example}"
        if isinstance(value, str):  # pydantic would read "1" as 1: [1, "1"] trained one seed twice
            return f"{value!r} is text; {whole}, written without quotes, e.g. {example}"
        if isinstance(value, int | float) and not 0 <= value <= SEED_MAX:
            return (
                f"{value!r} is out of range; {whole} (Lightning's seed_everything refuses "
                f"others), e.g. {example}"
            )
    return None


class SeedsSpec(_Strict):
    """``seeds:`` as a mapping: the seeds, and whether a sampled configuration is judged over all
    of them (``per_configuration: true``: one Optuna study per cell, each configuration trained
    once per seed, Optuna told the ``objective`` over its seeds; :mod:`sweeps.search.over_seeds`) rather
    than each (cell, seed) being its own Optuna study (the list form ``seeds: [0, 1]``)."""

    values: list[Seed] = Field(
        default_factory=lambda: [0],
        min_length=1,
        description="The seeds; each configuration runs once per seed.",
    )
    per_configuration: bool = Field(
        False,
        description="true: one Optuna study per cell; a sampled configuration is trained once per "
        "seed and judged on its aggregate (and early-stopped as one); false: one study per (cell, seed).",
    )
    objective: Literal["mean", "lcb"] = Field(
        "mean",
        description="What Optuna is told per configuration: the mean over its seeds, or `lcb`, the "
        "pessimistic end of the 95% t-interval over seeds (mean - t*sd/sqrt(n) when maximizing).",
    )

    confirm: list[Seed] = Field(
        default_factory=list,
        description="Fresh seeds (none of `values`) on which each cell's chosen configuration is "
        "trained again after selection (`role: confirm` in results.csv) and evaluated by the held-out "
        "stage: results.md reports their validation and test figures as the ones free of selection.",
    )

    @field_validator("values", "confirm", mode="before")
    @classmethod
    def _trainable(cls, value: Any, info: ValidationInfo) -> Any:
        example = "values: [0, 1, 2]" if info.field_name == "values" else "confirm: [3, 4]"
        problem = seeds_problem(value, example, empty=info.field_name == "confirm")
        if problem:
            raise ValueError(problem)
        return value

    def model_post_init(self, __context) -> None:
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"seeds.values repeats a seed: {self.values}; list each seed once")
        if len(set(self.confirm)) != len(self.confirm):
            raise ValueError(f"seeds.confirm repeats a seed: {self.confirm}; list each seed once")
        if both := sorted(set(self.values) & set(self.confirm)):
            raise ValueError(
                f"seeds.confirm must be fresh seeds, but {both} are also in seeds.values; "
                "pick seeds the search never trained on"
            )


def check_seeds(spec: Any, source: str | None = None) -> None:
    """``seeds: {per_configuration: true}`` needs something to judge: Optuna ``parameters``; with
    ``objectives`` (:mod:`sweeps.search.over_seeds`) no early stopping and no baseline constraints yet."""

    if isinstance(spec.seeds, SeedsSpec) and spec.seeds.confirm and spec.objectives:
        raise SpecError(
            "seeds.confirm",
            "retrains the configuration a single `metric` chose; a multi-objective study chooses a "
            "front, not one configuration: drop seeds.confirm or use a single `metric`",
            source,
        )
    if isinstance(spec.seeds, SeedsSpec) and spec.seeds.objective == "lcb":
        if not spec.seeds.per_configuration:  # each (cell, seed) its own study: no seeds to pool
            raise SpecError(
                "seeds.objective",
                "lcb is what Optuna is told of a configuration over its seeds, which only "
                "per_configuration: true trains; without it each (cell, seed) is its own study "
                "and the choice is by the mean: add per_configuration: true, or drop objective",
                source,
            )
        if len(spec.seeds.values) < 2:
            raise SpecError(
                "seeds.objective",
                "lcb over one seed has no interval (it is that seed's value): give two seeds or "
                "more in seeds.values, or drop objective",
                source,
            )
    if not isinstance(spec.seeds, SeedsSpec) or not spec.seeds.per_configuration:
        return
    if not spec.parameters:
        raise SpecError(
            "seeds.per_configuration",
            "judges Optuna's sampled configurations over seeds, but the sweep has no `parameters`; "
            "add parameters (and num_samples), or use the list form seeds: [..]",
            source,
        )
    if spec.objectives:  # sweeps.search.over_seeds: a vector of aggregates, no early stopping yet
        if spec.early_terminate.type != "none":
            raise SpecError(
                "seeds.per_configuration",
                f"with `objectives`, early_terminate {spec.early_terminate.type} is not supported yet "
                "(the Pareto rung rule compares single trials per cell and seed); use "
                "early_terminate: {type: none}, or drop per_configuration",
                source,
            )
        if any(c.of for c in spec.constraints):
            raise SpecError(
                "seeds.per_configuration",
                "with `objectives`, constraints relative to a baseline (`of:`) are not supported yet; "
                "use absolute bounds, or drop per_configuration",
                source,
            )
        return
    if spec.early_terminate.type not in ("none", "asha"):
        raise SpecError(
            "seeds.per_configuration",
            f"early_terminate {spec.early_terminate.type} is not supported here; use asha or none",
            source,
        )
