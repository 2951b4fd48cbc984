"""Loading a sweep file: YAML -> overrides (``--smoke``, ``--set``) -> schema -> grid -> validated
trial plans. :func:`load_spec` is what the launcher calls."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .dotted import set_dotted
from .grid import Cell, Sweep, TrialPlan, base_sections, expand_grid, resolve_sections
from .schema import SpecError, SweepSpec, format_validation
from .validate import check_sections, validate_cell


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
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise SpecError(
                f"--set {key.strip()}", f"cannot parse the value {text!r} (YAML, e.g. 100, 0.5, [1, 2], "
                f"'text'); quote it for the shell, e.g. --set \"{key.strip()}=[1, 2]\"", source,
            ) from None
        _set_dotted(raw, key.strip(), value, f"--set {key.strip()}", source)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError("", format_validation(exc), source) from None
    for pname, p in spec.parameters.items():
        try:
            p.resolved_distribution()
        except ValueError as exc:
            raise SpecError(f"parameters.{pname}", str(exc), source) from None
    check_sections(spec, source)
    cells = expand_grid(spec.grid, source)
    plans = []
    base = base_sections(spec)
    for cell in cells:
        task, model, trainer = resolve_sections(base, cell.values)
        validate_cell(task, model, trainer, cell, source)
        _validate_search_bounds(spec, task, model, trainer, cell, source)
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




def _validate_search_bounds(spec: SweepSpec, task: dict, model: dict, trainer: dict, cell, source: str) -> None:
    """Every value Optuna may sample in this cell (each categorical value, a range's both ends)
    passes the same checks as a fixed setting, reported at ``parameters.<key>``."""
    for key, p in spec.parameters.items():
        candidates = p.values if p.values is not None else [p.min, p.max]
        if p.values is None and p.resolved_distribution() == "int_uniform":
            candidates = [int(p.min), int(p.max)]
        for value in candidates:
            sections = {"task": copy.deepcopy(task), "model": copy.deepcopy(model), "trainer": copy.deepcopy(trainer)}
            try:
                set_dotted(sections, key, value)
            except ValueError as exc:
                raise SpecError(f"parameters.{key}", str(exc), source) from None
            probe = Cell(cell.values, {**cell.origins, key: f"parameters.{key}"})
            validate_cell(sections["task"], sections["model"], sections["trainer"], probe, source)


def _set_dotted(raw: dict, key: str, value: Any, origin: str, source: str) -> None:
    """An override of the raw spec. ``grid`` and ``parameters`` keys are themselves dotted:
    ``grid.task.max_length`` sets ``raw["grid"]["task.max_length"]``."""
    parts = key.split(".")
    if parts[0] in ("grid", "parameters") and len(parts) > 1 and all(parts):
        if not isinstance(raw.get(parts[0]), dict):
            raw[parts[0]] = {}
        raw[parts[0]][".".join(parts[1:])] = value
        return
    try:
        set_dotted(raw, key, value)
    except ValueError as exc:
        raise SpecError(origin, str(exc), source) from None
