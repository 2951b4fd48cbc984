"""The sweep file: schema, validation and expansion into trials.

A sweep file is one study. ``load_spec(path)`` parses and validates it completely -- every key,
every grid cell's resolved model and data settings, every nuisance distribution -- before Ray is
started, and raises :class:`SpecError` naming the key's path and what is allowed.

The grid is the *scientific* comparison; it is expanded here, not by Ray:

```yaml
grid:
  task.max_length: [10, 50]            # a dotted key with a list: one axis of the cross product
  model:                               # a section with a list of dicts: variants, concatenated
    - {attention: none}
    - {attention: memory, K: [1, 4]}   # lists inside a variant expand within that variant
```

gives 2 x (1 + 2) = 6 cells. ``parameters`` (W&B Sweeps' shape) are *nuisance* parameters that
Optuna tunes inside each cell with a budget of ``num_samples`` trials.
"""
from __future__ import annotations

import copy
import inspect
import itertools
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

SECTIONS = ("task", "model", "trainer")
TASKS = ("copy", "wmt17")
# Module arguments the trial fills in from the datamodule; a spec may not set them.
DERIVED_MODEL_KEYS = ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id")
# Column names in results for well-known keys.
COLUMN_NAMES = {"task.max_length": "length", "task.max_len": "length"}


class SpecError(ValueError):
    """A problem in a sweep file. ``str(err)`` is a complete, user-facing message."""

    def __init__(self, path: str, message: str, source: str | None = None) -> None:
        self.path = path
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {message}" if path else f"{where}{message}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricSpec(_Strict):
    name: str = "val/bleu"
    goal: Literal["maximize", "minimize"] = "maximize"

    @property
    def mode(self) -> str:
        return "max" if self.goal == "maximize" else "min"


class EarlyTerminateSpec(_Strict):
    """ASHA in Ray's vocabulary. One unit of ``grace_period``/``max_t`` is one validation report."""

    type: Literal["none", "asha"] = "none"
    grace_period: int = Field(1, ge=1)
    reduction_factor: float = Field(2.0, gt=1)
    max_t: Optional[int] = Field(None, ge=1)


class ResourcesSpec(_Strict):
    """Per trial. ``gpu`` may be fractional (several trials packed on one GPU); ``workers`` > 1
    runs the trial as a DDP job of that many Ray Train workers, each with ``cpu``/``gpu``."""

    cpu: float = Field(1.0, gt=0)
    gpu: float = Field(0.0, ge=0)
    workers: int = Field(1, ge=1)

    @field_validator("gpu")
    @classmethod
    def _whole_or_fraction(cls, v: float) -> float:
        if v > 1 and v != int(v):
            raise ValueError("gpu above 1 must be a whole number (fractions only pack several trials on one GPU)")
        return v


class TrainerSpec(_Strict):
    """The Lightning Trainer settings a sweep may set (the rest are fixed by the trial)."""

    max_steps: int = Field(1000, ge=1)
    max_epochs: Optional[int] = Field(None, ge=1)
    val_check_interval: Optional[Union[int, float]] = None
    check_val_every_n_epoch: Optional[int] = Field(None, ge=1)
    limit_train_batches: Optional[Union[int, float]] = None
    limit_val_batches: Optional[Union[int, float]] = None
    gradient_clip_val: Optional[float] = Field(1.0, ge=0)
    accumulate_grad_batches: int = Field(1, ge=1)
    precision: str = "32-true"
    log_every_n_steps: int = Field(50, ge=1)
    deterministic: bool = False


class StorageSpec(_Strict):
    """Where Ray keeps trial directories and checkpoints: a local path (default: the --output
    folder) or shared storage (``s3://...``, ``gs://...``, an NFS path) for multi-node clusters."""

    path: Optional[str] = None
    keep_checkpoints: int = Field(2, ge=1)


class FailureSpec(_Strict):
    max_failures: int = Field(2, ge=0)


class WandbSpec(_Strict):
    project: str = "memory-attention"
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: list[str] = Field(default_factory=list)
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    log_heatmaps: bool = True


class SearchSpec(_Strict):
    sampler: Literal["tpe", "random"] = "tpe"
    seed: int = 0


class ChaosSpec(_Strict):
    """Fault injection for testing recovery: each trial raises once at this global step."""

    fail_once_at_step: Optional[int] = Field(None, ge=1)


class ParamSpec(_Strict):
    """A nuisance parameter in W&B Sweeps' shape."""

    values: Optional[list[Any]] = None
    min: Optional[float] = None
    max: Optional[float] = None
    distribution: Optional[Literal["categorical", "uniform", "log_uniform_values", "int_uniform"]] = None

    def resolved_distribution(self) -> str:
        if self.values is not None:
            if self.distribution not in (None, "categorical"):
                raise ValueError("`values` goes with distribution categorical (or none)")
            if not self.values:
                raise ValueError("`values` is empty")
            return "categorical"
        if self.min is None or self.max is None:
            raise ValueError("give either `values: [...]` or both `min` and `max`")
        if not self.min < self.max:
            raise ValueError(f"min ({self.min}) must be below max ({self.max})")
        dist = self.distribution or (
            "int_uniform" if float(self.min).is_integer() and float(self.max).is_integer() else "uniform"
        )
        if dist == "log_uniform_values" and self.min <= 0:
            raise ValueError("log_uniform_values needs min > 0")
        if dist == "categorical":
            raise ValueError("distribution categorical needs `values`")
        return dist


class SweepSpec(_Strict):
    name: str
    description: str = ""
    task: dict[str, Any]
    model: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, Any] = Field(default_factory=dict)
    parameters: dict[str, ParamSpec] = Field(default_factory=dict)
    num_samples: int = Field(1, ge=1)
    search: SearchSpec = Field(default_factory=SearchSpec)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    metric: MetricSpec = Field(default_factory=MetricSpec)
    early_terminate: EarlyTerminateSpec = Field(default_factory=EarlyTerminateSpec)
    trainer: TrainerSpec = Field(default_factory=TrainerSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    max_concurrent_trials: Optional[int] = Field(None, ge=1)
    storage: StorageSpec = Field(default_factory=StorageSpec)
    failure: FailureSpec = Field(default_factory=FailureSpec)
    wandb: WandbSpec = Field(default_factory=WandbSpec)
    chaos: ChaosSpec = Field(default_factory=ChaosSpec)
    smoke: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError("use letters, digits, '_', '-', '.' only (it names folders and W&B groups)")
        return v


# ----------------------------------------------------------------------------------------------
# Trials


@dataclass
class Cell:
    """One point of the scientific grid: the dotted values that vary, and where each was written."""

    values: dict[str, Any]
    origins: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Human-readable, e.g. ``length=10 attention=memory K=16``."""
        return " ".join(f"{column_name(k)}={_fmt(v)}" for k, v in self.values.items()) or "default"

    @property
    def slug(self) -> str:
        """Filesystem- and URL-safe, e.g. ``length-10_attention-memory_K-16``."""
        s = "_".join(f"{column_name(k)}-{_fmt(v)}" for k, v in self.values.items()) or "default"
        return re.sub(r"[^A-Za-z0-9_.=-]+", "-", s)


@dataclass
class TrialPlan:
    """A fully resolved trial (or, with nuisance parameters, an Optuna study of ``num_samples``)."""

    cell: Cell
    seed: int
    task: dict[str, Any]
    model: dict[str, Any]
    trainer: dict[str, Any]

    def config(self) -> dict[str, Any]:
        return {
            "cell": self.cell.name,
            "cell_slug": self.cell.slug,
            "grid": dict(self.cell.values),
            "seed": self.seed,
            "task": copy.deepcopy(self.task),
            "model": copy.deepcopy(self.model),
            "trainer": copy.deepcopy(self.trainer),
        }


@dataclass
class Sweep:
    spec: SweepSpec
    source: str
    cells: list[Cell]
    plans: list[TrialPlan]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def has_search(self) -> bool:
        return bool(self.spec.parameters)

    @property
    def num_trials(self) -> int:
        per_plan = self.spec.num_samples
        return len(self.plans) * per_plan


def column_name(key: str) -> str:
    return COLUMN_NAMES.get(key, key.split(".")[-1])


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


# ----------------------------------------------------------------------------------------------
# Loading


def load_spec(path: str | Path, overrides: list[str] | None = None, smoke: bool = False) -> Sweep:
    """Read, override, validate and expand a sweep file. Raises SpecError with the key path."""
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise SpecError("", "no such sweep file; the shipped ones are in sweeps/*.yaml", source)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError("", f"not valid YAML: {exc}", source) from None
    if not isinstance(raw, dict):
        raise SpecError("", "the file must be a mapping (name:, task:, model:, grid:, ...)", source)
    return build_sweep(raw, source=source, overrides=overrides, smoke=smoke)


def build_sweep(
    raw: dict[str, Any], source: str = "<spec>", overrides: list[str] | None = None, smoke: bool = False
) -> Sweep:
    raw = copy.deepcopy(raw)
    if smoke:
        smoke_over = raw.get("smoke") or {}
        if not isinstance(smoke_over, dict):
            raise SpecError("smoke", "must be a mapping of dotted keys to values", source)
        for key, value in {**SMOKE_DEFAULTS, **smoke_over}.items():
            _set_dotted(raw, key, value, f"smoke.{key}", source)
    for item in overrides or []:
        if "=" not in item:
            raise SpecError(f"--set {item}", "expected dotted.key=value, e.g. --set trainer.max_steps=100", source)
        key, text = item.split("=", 1)
        _set_dotted(raw, key.strip(), yaml.safe_load(text), f"--set {key.strip()}", source)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError("", _format_validation(exc), source) from None
    for pname, p in spec.parameters.items():
        try:
            p.resolved_distribution()
        except ValueError as exc:
            raise SpecError(f"parameters.{pname}", str(exc), source) from None
    _check_sections(spec, source)
    cells = expand_grid(spec.grid, source)
    plans = []
    for cell in cells:
        task, model, trainer = _resolve(spec, cell)
        _validate_cell(task, model, trainer, cell, source)
        for seed in spec.seeds:
            plans.append(TrialPlan(cell, seed, task, model, trainer))
    return Sweep(spec=spec, source=source, cells=cells, plans=plans)


# What --smoke does to every study: the same grid shape, scaled down to finish in minutes on a CPU.
# A study's own `smoke:` block is applied after these (e.g. to shorten its sequence lengths).
SMOKE_DEFAULTS: dict[str, Any] = {
    "model.preset": "tiny",
    "trainer.max_steps": 60,
    "trainer.val_check_interval": 30,
    "trainer.limit_val_batches": 2,
    "num_samples": 1,
    "early_terminate.grace_period": 1,
    "early_terminate.max_t": 2,
}


def _format_validation(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            parent = err["loc"][:-1]
            allowed = _allowed_keys(parent)
            msg = f"unknown key; allowed here: {', '.join(allowed)}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif err["type"] == "literal_error":
            msg = f"{msg} (got {err.get('input')!r})"
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines)


def _allowed_keys(loc: tuple) -> list[str]:
    model: type[BaseModel] = SweepSpec
    for part in loc:
        fld = model.model_fields.get(str(part))
        ann = getattr(fld, "annotation", None)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            # dict[str, ParamSpec] and friends: look through the dict to the value model
            args = getattr(ann, "__args__", ())
            nxt = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
            if nxt is None:
                continue
            model = nxt
    return sorted(model.model_fields)


def _set_dotted(raw: dict, key: str, value: Any, origin: str, source: str) -> None:
    parts = key.split(".")
    if not all(parts):
        raise SpecError(origin, "empty part in dotted key", source)
    if parts[0] in ("grid", "parameters") and len(parts) > 1:
        # their keys are themselves dotted: grid.task.max_length -> raw["grid"]["task.max_length"]
        if not isinstance(raw.get(parts[0]), dict):
            raw[parts[0]] = {}
        raw[parts[0]][".".join(parts[1:])] = value
        return
    node = raw
    for p in parts[:-1]:
        if node.get(p) is None:
            node[p] = {}
        if not isinstance(node[p], dict):
            raise SpecError(origin, f"{p!r} is not a mapping, cannot set {key}", source)
        node = node[p]
    node[parts[-1]] = value


def _check_sections(spec: SweepSpec, source: str) -> None:
    name = spec.task.get("name")
    if name not in TASKS:
        raise SpecError("task.name", f"must be one of {', '.join(TASKS)} (got {name!r})", source)


def expand_grid(grid: dict[str, Any], source: str) -> list[Cell]:
    """Expand ``grid`` into cells: axes cross, section variant lists concatenate."""
    axes: list[list[tuple[dict[str, Any], dict[str, str]]]] = []
    for key, spec in grid.items():
        path = f"grid.{key}"
        if key in SECTIONS and isinstance(spec, list) and all(isinstance(v, dict) for v in spec):
            options = []
            for i, variant in enumerate(spec):
                vkeys = list(variant)
                lists = [variant[k] if isinstance(variant[k], list) else [variant[k]] for k in vkeys]
                for j, k in enumerate(vkeys):
                    if not lists[j]:
                        raise SpecError(f"{path}[{i}].{k}", "empty list of values", source)
                for combo in itertools.product(*lists):
                    vals = {f"{key}.{k}": v for k, v in zip(vkeys, combo)}
                    origins = {f"{key}.{k}": f"{path}[{i}].{k}" for k in vkeys}
                    options.append((vals, origins))
            if not options:
                raise SpecError(path, "empty list of variants", source)
            axes.append(options)
            continue
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
            raise SpecError(path, "must be a non-empty list of values (fixed settings go in task/model/trainer)", source)
        axes.append([({key: v}, {key: path}) for v in spec])
    cells = []
    for combo in itertools.product(*axes):
        vals: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for v, o in combo:
            for k in v:
                if k in vals:
                    raise SpecError(o[k], f"{k} is set by two grid entries ({origins[k]} and {o[k]})", source)
            vals.update(v)
            origins.update(o)
        cells.append(Cell(vals, origins))
    if not cells:
        cells = [Cell({}, {})]
    seen = set()
    for c in cells:
        if c.slug in seen:
            raise SpecError("grid", f"two cells share the name {c.name!r}; make the grid values distinct", source)
        seen.add(c.slug)
    return cells


def _resolve(spec: SweepSpec, cell: Cell) -> tuple[dict, dict, dict]:
    task = copy.deepcopy(spec.task)
    model = copy.deepcopy(spec.model)
    trainer = spec.trainer.model_dump()
    sections = {"task": task, "model": model, "trainer": trainer}
    for key, value in cell.values.items():
        section, rest = key.split(".", 1)
        _nested_set(sections[section], rest, value)
    _resolve_paths(task)
    return task, model, trainer


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


def _nested_set(d: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


def _origin(cell: Cell, key: str, default: str) -> str:
    return cell.origins.get(key, default)


def _validate_cell(task: dict, model: dict, trainer: dict, cell: Cell, source: str) -> None:
    from .build import attention_param_types, datamodule_param_types, module_signature_params

    try:
        TrainerSpec.model_validate(trainer)
    except ValidationError as exc:
        raise SpecError("", "trainer." + _format_validation(exc).lstrip(), source) from None

    dm_params = datamodule_param_types(task["name"])
    for key, value in task.items():
        if key == "name":
            continue
        where = _origin(cell, f"task.{key}", f"task.{key}")
        if key not in dm_params:
            raise SpecError(where, f"unknown {task['name']} task setting; allowed: {', '.join(sorted(dm_params))}", source)
        _check_type(dm_params[key], value, where, source)

    mod_params = module_signature_params()
    attention = model.get("attention", mod_params["attention"][1])
    try:
        att_params = attention_param_types(attention)
    except ValueError as exc:
        raise SpecError(_origin(cell, "model.attention", "model.attention"), str(exc), source) from None
    for key, value in model.items():
        where = _origin(cell, f"model.{key}", f"model.{key}")
        if key in DERIVED_MODEL_KEYS:
            raise SpecError(where, "is derived from the data (the trial fills it in); remove it", source)
        if key == "attention_kwargs":
            raise SpecError(where, "put attention options straight under model (e.g. model.K: 16)", source)
        if key in mod_params:
            _check_type(mod_params[key][0], value, where, source)
        elif key in att_params:
            _check_type(att_params[key], value, where, source)
        else:
            raise SpecError(
                where,
                f"not a model setting nor an option of attention {attention!r}. Model settings: "
                f"{', '.join(sorted(k for k in mod_params if k not in DERIVED_MODEL_KEYS))}; "
                f"{attention} options: {', '.join(sorted(att_params)) or '(none)'}",
                source,
            )
    att_opts = {k: v for k, v in model.items() if k not in mod_params}
    try:  # values the mechanism itself rejects (e.g. encoder_scoring: tanh); tiny dims, cheap
        from lightning_modules.attention import build_attention

        build_attention(attention, query_dim=8, memory_dim=8, **att_opts)
    except (ValueError, TypeError) as exc:
        key = next((k for k in att_opts if k in str(exc)), None)
        where = _origin(cell, f"model.{key}", f"model.{key}") if key else _origin(cell, "model.attention", "model")
        raise SpecError(where, str(exc), source) from None
    from lightning_modules.seq2seq import PRESETS

    preset = model.get("preset", mod_params["preset"][1])
    if preset not in PRESETS:
        raise SpecError(_origin(cell, "model.preset", "model.preset"), f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}", source)


def _check_type(annotation: Any, value: Any, where: str, source: str) -> None:
    if annotation is Any or annotation is inspect.Parameter.empty:
        return
    try:
        TypeAdapter(annotation).validate_python(value, strict=False)
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"]
        raise SpecError(where, f"{msg} (got {value!r}; expected {_type_name(annotation)})", source) from None
    except Exception:
        return
    if isinstance(value, float) and math.isnan(value):
        raise SpecError(where, "NaN is not a valid setting", source)


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
