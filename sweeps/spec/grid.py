"""The grid: expansion of the ``grid`` block into cells, and each cell into resolved trial plans.

```yaml
grid:
  task.max_length: [10, 50]            # a dotted key with a list: one axis of the cross product
  model:                               # a section with a list of dicts: variants, concatenated
    - {attention: none}
    - {attention: memory, K: [1, 4]}   # lists inside a variant expand within that variant
```

gives 2 x (1 + 2) = 6 cells.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from sweeps.spec.dotted import key_path, set_dotted
from sweeps.spec.schema import SpecError, SweepSpec, TeacherSpec
from sweeps.spec.search_schema import configuration_rungs, reports_per_trial, tolerances

#: where a setting of the smoke defaults (:data:`sweeps.spec.load.SMOKE_DEFAULTS`) says it came
#: from (errors, :func:`sweeps.spec.load.profile_line`)
SMOKE_ORIGIN = "smoke defaults"

SECTIONS = ("task", "model", "trainer")
#: one variant of each section's list, as the errors show it
SECTION_EXAMPLES = {
    "task": "{max_length: 20}",
    "model": "{attention: memory, K: 4}",
    "trainer": "{max_steps: 2000}",
}
# Column names in results for well-known keys.
COLUMN_NAMES = {"task.max_length": "length"}


@dataclass
class Cell:
    """One point of the scientific grid: the dotted values that vary, and where each was written."""

    values: dict[str, Any]
    origins: dict[str, str] = field(default_factory=dict)
    #: the grid variant's ``teacher:`` (:mod:`sweeps.spec.teachers`), and where it was written
    teacher: TeacherSpec | None = None
    variant: str = ""

    @property
    def name(self) -> str:
        """Human-readable, e.g. ``length=10 attention=memory K=16``."""
        return " ".join(f"{column_name(k)}={_fmt(v)}" for k, v in self.values.items()) or "default"

    @property
    def slug(self) -> str:
        """Filesystem- and URL-safe, e.g. ``length-10_attention-memory_K-16``."""
        s = "_".join(f"{column_name(k)}-{_fmt(v)}" for k, v in self.values.items()) or "default"
        return re.sub(r"[^A-Za-z0-9_.=-]+", "-", s)


@dataclass(frozen=True)
class TrialPlan:
    """A fully resolved trial (or, with nuisance parameters, an Optuna study of ``num_samples``):
    the one record of a trial from the spec to its results row. The spec makes it once per (cell,
    seed); Tune carries its flat view (:meth:`trial_config`, plus Optuna's samples); the trainable
    gets it back from that view with :meth:`sweeps.trial.settings.TrialSettings.plan`, which only writes
    the samples in (``params``, dotted keys); the results row is made from it.
    """

    cell: Cell
    seed: int
    task: dict[str, Any]
    model: dict[str, Any]
    trainer: dict[str, Any]
    params: dict[str, Any] = field(
        default_factory=dict
    )  # Optuna's samples, under their dotted keys
    config: dict[str, Any] = field(
        default_factory=dict
    )  # the flat view Tune held (empty before Tune)

    @property
    def grid(self) -> dict[str, Any]:
        """The cell's values, under their dotted keys."""
        return self.cell.values

    @property
    def sections(self) -> dict[str, dict[str, Any]]:
        return {"task": self.task, "model": self.model, "trainer": self.trainer}

    def value(self, dotted: str) -> Any:
        """A setting by its dotted key (``model.lr``), or None."""
        section, _, key = dotted.partition(".")
        return self.sections.get(section, {}).get(key)

    def with_values(
        self, seed: int, values: dict[str, Any], params: dict[str, Any], config: dict[str, Any]
    ) -> TrialPlan:
        """This cell's plan for one Tune trial: its seed, ``values`` (dotted: Optuna's samples and
        any other per-trial setting) written into the sections, and the config Tune held."""
        task, model, trainer = (
            resolve_sections(self.sections, values)
            if values
            else (self.task, self.model, self.trainer)
        )
        return TrialPlan(self.cell, seed, task, model, trainer, params=params, config=config)

    @property
    def unit(self) -> str:
        """The (cell, seed) unit: an Optuna study's name suffix, early stopping's bracket."""
        return f"{self.cell.slug}-seed{self.seed}"

    def trial_config(self, columns: dict[str, str]) -> dict[str, Any]:
        """What Tune stores for a trial of this plan: the cell's name, the seed and the grid values
        under their flat column names (``columns``: flat name -> dotted key)."""
        flat = {
            name: self.cell.values[key] for name, key in columns.items() if key in self.cell.values
        }
        return {"cell": self.cell.name, "seed": self.seed, **flat}


@dataclass
class Sweep:
    spec: SweepSpec
    source: str
    cells: list[Cell]
    plans: list[TrialPlan]
    #: student cell slug -> teacher cell slug, for cells that use a teacher (sweeps.spec.teachers)
    teachers: dict[str, str] = field(default_factory=dict)
    #: the sweep file's sections that plan the trials (``sweeps.spec.load.PLAN_KEYS``), with its
    #: profile, before ``--set``: what ``--resume`` compares with the first run's
    planned: dict[str, Any] = field(default_factory=dict)
    #: what the profile set and no ``--set`` replaced, key -> (value, where: ``smoke defaults:
    #: ...`` or ``profiles.<name>.<key>``)
    profile_settings: dict[str, tuple[Any, str]] = field(default_factory=dict)
    #: the launch's ``--set`` overrides, as given (``KEY=VALUE``), applied after the profile
    set_overrides: list[str] = field(default_factory=list)

    def teacher_index(self, i: int) -> int | None:
        """The index in :attr:`plans` of the unit that teaches plan ``i`` (its teacher cell, the
        same seed), or None for a plan without a teacher."""
        plan = self.plans[i]
        slug = self.teachers.get(plan.cell.slug)
        if slug is None:
            return None
        return next(
            j for j, p in enumerate(self.plans) if p.cell.slug == slug and p.seed == plan.seed
        )

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def has_search(self) -> bool:
        return bool(self.spec.parameters)

    @property
    def num_trials(self) -> int:
        per_plan = self.spec.num_samples
        if any(
            c.of for c in self.spec.constraints
        ):  # a baseline model per (cell, seed) (sweeps.search.baselines)
            per_plan += 1
        return len(self.plans) * per_plan

    @cached_property
    def grid_columns(self) -> dict[str, str]:
        """Flat trial-config name -> dotted key, for every grid key (``attention`` -> ``model.attention``)."""
        return self._columns()[0]

    @cached_property
    def param_columns(self) -> dict[str, str]:
        """Flat trial-config name -> dotted key, for every Optuna parameter (``lr`` -> ``model.lr``)."""
        return self._columns()[1]

    def early_stopping_note(self) -> str | None:
        """What ``--dry-run`` says about early stopping (which runs per (cell, seed), see
        :mod:`sweeps.schedulers.per_unit`), or None without it (or what of it goes unused)."""
        if self.spec.early_terminate.type == "none":
            et = self.spec.early_terminate
            unused = [
                f"{k} {getattr(et, k)}"
                for k in sorted(et.model_fields_set - {"type"})
                # (the smoke defaults set a rung for every sweep, with or without a rule)
                if not self.profile_settings.get(f"early_terminate.{k}", (0, ""))[1].startswith(
                    SMOKE_ORIGIN
                )
            ]
            return (
                f"early_terminate none: {', '.join(unused)} not used, no trial is stopped early "
                "(set early_terminate.type asha or pareto to use it, or remove it)"
                if unused
                else None
            )
        if self.spec.per_configuration and not configuration_rungs(self.spec):
            return (
                f"early_terminate {self.spec.early_terminate.type}: no rung to compare "
                "configurations at (fewer than 2 configurations, or the first rung at or past "
                "max_t, a whole trial's reports where not given): there is nothing to stop; every "
                "configuration's seeds run to the end"
            )
        if self.spec.per_configuration:  # sweeps.schedulers.config_rungs
            return (
                f"early_terminate {self.spec.early_terminate.type}: compares the {self.spec.num_samples} "
                f"configurations of each cell on their mean over seeds at each rung (a seed waits, paused, "
                f"until its configuration's other seeds reach the rung); a stopped configuration has all "
                f"its seeds stopped at that rung; no cell is stopped because another scores higher"
            )
        n = self.spec.num_samples if self.has_search else 1
        if n < 2:
            why = "num_samples is 1" if self.has_search else "there are no Optuna parameters"
            return (
                f"early_terminate {self.spec.early_terminate.type}: it compares trials only within one (cell, seed), "
                f"and each holds a single trial ({why}): there is nothing to stop; every trial runs to the end"
            )
        et, reports = self.spec.early_terminate, reports_per_trial(self.spec)
        if et.max_t is None and et.grace_period >= reports:
            return (
                f"early_terminate {et.type}: its first rung (grace_period {et.grace_period}) is at "
                f"or past a trial's last report (a trial makes {reports}: trainer.max_steps over "
                "val_check_interval): there is nothing to stop; every trial runs to the end (lower "
                "grace_period)"
            )
        ties = ""
        if self.spec.early_terminate.type == "pareto":
            named = [
                f"{o.name} by more than {t:.0%}"
                for o, t in zip(self.spec.objectives, tolerances(self.spec))
                if t
            ]
            rf = f"{self.spec.early_terminate.reduction_factor:g}"
            ties = (
                f"; a trial waits (paused) at a rung until it ranks in the top 1/{rf} of at least {rf} arrivals "
                f"or the rung is complete"
                if self.spec.early_terminate.waits_at_rungs
                else "; a trial goes on or stops at a rung at once, against those that reached it before"
            )
            ties += (
                f"; a running trial is hopeless only when a finished one is no worse and better in "
                f"{' or '.join(named)}"
                if named
                else ""
            )
        return (
            f"early_terminate {self.spec.early_terminate.type}: compares the {n} trials of each (cell, seed) "
            f"among themselves only; no cell is stopped because another scores higher{ties}"
        )

    def _columns(self) -> tuple[dict[str, str], dict[str, str]]:
        grid_keys = list(dict.fromkeys(k for c in self.cells for k in c.values))
        names = flat_columns(grid_keys + list(self.spec.parameters))
        return {n: k for n, k in names.items() if k in grid_keys}, {
            n: k for n, k in names.items() if k not in grid_keys
        }


#: what a student trial's config adds: its teacher's trial id and checkpoint, or why it has none
TEACHER_CONFIG = ("teacher", "teacher_checkpoint", "teacher_error")
# Keys every trial config has besides its grid and sampled values.
RESERVED_COLUMNS = ("cell", "seed", *TEACHER_CONFIG)


def unit_key(config: dict[str, Any]) -> tuple[str, Any]:
    """The (cell, seed) a trial belongs to, from its config: the unit early stopping compares within
    (:mod:`sweeps.schedulers.per_unit`) and one Optuna study searches."""
    return config.get("cell"), config.get("seed")


def flat_columns(keys: list[str]) -> dict[str, str]:
    """Readable, unique config names for dotted keys: ``model.K`` -> ``K``, ``task.max_length`` ->
    ``length``; a key whose short name is taken (two sections' ``dropout``, or ``task.seed``)
    keeps its dotted name."""
    short = [column_name(k) for k in keys]
    out = {}
    for key, name in zip(keys, short):
        unique = short.count(name) == 1 and name not in RESERVED_COLUMNS
        out[name if unique else key] = key
    return out


def column_name(key: str) -> str:
    return COLUMN_NAMES.get(key, key.split(".")[-1])


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def expand_grid(grid: dict[str, Any], source: str) -> list[Cell]:
    """Expand ``grid`` into cells: axes cross, section variant lists concatenate."""
    axes: list[list[tuple[dict[str, Any], dict[str, str]]]] = []
    for key, spec in grid.items():
        path = f"grid.{key}"
        if key in SECTIONS and isinstance(spec, list) and all(isinstance(v, dict) for v in spec):
            options = []
            for i, variant in enumerate(spec):
                variant, teacher = _teacher_of(variant, f"{path}[{i}]", source)
                vkeys = list(variant)
                lists = [
                    variant[k] if isinstance(variant[k], list) else [variant[k]] for k in vkeys
                ]
                for j, k in enumerate(vkeys):
                    if not lists[j]:
                        raise SpecError(f"{path}[{i}].{k}", "empty list of values", source)
                for combo in itertools.product(*lists):
                    vals = {f"{key}.{k}": v for k, v in zip(vkeys, combo)}
                    origins = {f"{key}.{k}": f"{path}[{i}].{k}" for k in vkeys}
                    if teacher is not None:
                        origins[TEACHER] = f"{path}[{i}]"
                        vals[TEACHER] = teacher
                    options.append((vals, origins))
            if not options:
                raise SpecError(path, "empty list of variants", source)
            axes.append(options)
            continue
        if key in SECTIONS and isinstance(spec, list):
            i, bad = next((i, v) for i, v in enumerate(spec) if not isinstance(v, dict))
            raise SpecError(
                f"{path}[{i}]",
                f"a variant is a mapping of {key} settings (e.g. {SECTION_EXAMPLES[key]}), not "
                f"{bad!r}; an axis over one setting is written {path}.<setting>: [values]",
                source,
            )
        section, _, rest = key.partition(".")
        variants, number = grid.get(section), rest.split(".")[0]
        if isinstance(variants, list) and number.lstrip("-").isdigit():
            raise SpecError(
                path,
                f"grid.{section} is a list of {len(variants)} variant(s), numbered 0 to "
                f"{len(variants) - 1}: {number} names none of them",
                source,
            )
        if isinstance(spec, dict) and set(spec) == {"values"}:
            spec = spec["values"]
        if "." not in key or key.split(".")[0] not in SECTIONS:
            raise SpecError(
                path,
                f"grid keys are dotted paths into {', '.join(SECTIONS)} (e.g. task.max_length, model.K), "
                "or a section name with a list of variant mappings",
                source,
            )
        if not isinstance(spec, list) or not spec:
            raise SpecError(
                path,
                "must be a non-empty list of values (fixed settings go in task/model/trainer)",
                source,
            )
        axes.append([({key: v}, {key: path}) for v in spec])
    cells = []
    for combo in itertools.product(*axes):
        vals: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for v, o in combo:
            for k in v:
                if k in vals:
                    raise SpecError(
                        o[k],
                        f"{k} is set by two grid entries ({origins[k]} and {o[k]}): keep it in "
                        "one of them",
                        source,
                    )
            vals.update(v)
            origins.update(o)
        teacher, variant = vals.pop(TEACHER, None), origins.pop(TEACHER, "")
        cells.append(Cell(vals, origins, teacher, variant))
    if not cells:
        cells = [Cell({}, {})]
    seen = set()
    for c in cells:
        if c.slug in seen:
            raise SpecError(
                "grid",
                f"two cells share the name {c.name!r}; make the grid values distinct",
                source,
            )
        seen.add(c.slug)
    return cells


#: the key of a grid variant that names the variant's teacher cell (not a setting of the cell)
TEACHER = "teacher"


def _teacher_of(
    variant: dict[str, Any], where: str, source: str
) -> tuple[dict[str, Any], TeacherSpec | None]:
    """A grid variant without its ``teacher:`` key, and that key validated."""
    if TEACHER not in variant:
        return variant, None
    from pydantic import ValidationError

    rest = {k: v for k, v in variant.items() if k != TEACHER}
    try:
        return rest, TeacherSpec.model_validate(variant[TEACHER])
    except ValidationError as exc:
        err = exc.errors()[0]
        key = key_path((TEACHER, *err["loc"]))
        if err["type"] == "extra_forbidden":
            message = f"unknown key; allowed here: {', '.join(TeacherSpec.model_fields)}"
        elif err["type"] == "missing":
            message = "required key is missing (e.g. teacher: {cell: {attention: bahdanau}})"
        elif err["type"] == "model_type":  # "a valid dictionary or instance of TeacherSpec"
            message = (
                f"must be a mapping, not {err.get('input')!r} (e.g. teacher: {{cell: "
                "{attention: bahdanau}})"
            )
        else:
            message = f"{err['msg']} (got {err.get('input')!r})"
        raise SpecError(f"{where}.{key}", message, source) from None


def base_sections(spec: SweepSpec) -> dict[str, dict[str, Any]]:
    """The sweep's fixed task, model and trainer settings, before any grid or sampled value."""
    return {"task": spec.task, "model": spec.model, "trainer": spec.trainer.model_dump()}


def resolve_sections(
    base: dict[str, dict[str, Any]], values: dict[str, Any]
) -> tuple[dict, dict, dict]:
    """The task, model and trainer sections of a trial: ``base`` (:func:`base_sections`) with
    ``values`` (dotted keys: a cell's grid values, Optuna's samples) written in, ``*_dir`` paths
    resolved."""
    sections = _copy(base)
    for key, value in values.items():
        set_dotted(sections, key, value)
    _resolve_paths(sections["task"])
    checkpoint = sections["model"].get("teacher_checkpoint")
    if isinstance(checkpoint, str) and checkpoint and "://" not in checkpoint:
        sections["model"]["teacher_checkpoint"] = os.path.abspath(os.path.expanduser(checkpoint))
    return sections["task"], sections["model"], sections["trainer"]


def _copy(value: Any) -> Any:
    """A deep copy of plain YAML data (mappings, lists, scalars); ``copy.deepcopy`` is the slowest
    step of expanding a 10,000-cell grid."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _resolve_paths(task: dict[str, Any]) -> None:
    """``*_dir`` settings: fill in ``{pair}``-style fields from the task's own values, and make
    local paths absolute (trials run in their own working directories)."""
    fields = {k: v for k, v in task.items() if isinstance(v, (str, int, float))}
    for key, value in list(task.items()):
        if key.endswith("_dir") and isinstance(value, str) and value:
            try:
                value = value.format(**fields)
            except (KeyError, IndexError, ValueError):
                pass  # left as written; the datamodule reports a missing path clearly
            if "://" not in value:
                value = os.path.abspath(os.path.expanduser(value))
            task[key] = value
