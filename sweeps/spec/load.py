"""Loading a sweep file: YAML -> overrides (``--smoke``, ``--set``) -> schema -> grid -> validated
trial plans. :func:`load_spec` is what the launcher calls."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .dotted import set_dotted
from .grid import Sweep, TrialPlan, base_sections, expand_grid, resolve_sections
from .schema import SpecError, SweepSpec, format_validation
from .validate import check_sections, validate_cell


def load_spec(
    path: str | Path, overrides: list[str] | None = None, smoke: bool = False, profile: str | None = None
) -> Sweep:
    """Read, override (a named profile, then ``--set`` overrides), validate and expand a sweep
    file. ``smoke`` is ``profile="smoke"``. Raises SpecError with the key path."""
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
    return build_sweep(raw, source=source, overrides=overrides, smoke=smoke, profile=profile)


def build_sweep(
    raw: dict[str, Any],
    source: str = "<spec>",
    overrides: list[str] | None = None,
    smoke: bool = False,
    profile: str | None = None,
) -> Sweep:
    raw = copy.deepcopy(raw)
    if smoke:
        profile = "smoke"
    if profile is not None:
        for key, (value, origin) in profile_overrides(raw, profile, source).items():
            _set_dotted(raw, key, value, origin, source)
    for item in overrides or []:
        if "=" not in item:
            raise SpecError(f"--set {item}", "expected dotted.key=value, e.g. --set trainer.max_steps=100", source)
        key, text = item.split("=", 1)
        _set_dotted(raw, key.strip(), yaml.safe_load(text), f"--set {key.strip()}", source)
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
        for seed in spec.seeds:
            plans.append(TrialPlan(cell, seed, task, model, trainer))
    return Sweep(spec=spec, source=source, cells=cells, plans=plans)


def profile_overrides(raw: dict[str, Any], name: str, source: str) -> dict[str, tuple[Any, str]]:
    """The dotted overrides of profile ``name`` -> (value, where it was written). Profiles live in
    the study's ``profiles: {NAME: {dotted.key: value}}`` block; ``smoke`` (the plumbing profile)
    always exists: :data:`SMOKE_DEFAULTS`, then the study's older ``smoke:`` block, then
    ``profiles.smoke``."""
    blocks: list[tuple[str, Any]] = []
    if name == "smoke":
        blocks += [("smoke", raw.get("smoke") or {})]
    profiles = raw.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise SpecError("profiles", "must be a mapping of profile names to mappings of dotted keys", source)
    if name in profiles:
        blocks.append((f"profiles.{name}", profiles[name] or {}))
    elif name != "smoke":
        have = ", ".join(["smoke", *sorted(profiles)])
        raise SpecError(f"--profile {name}", f"this study has no such profile; it has: {have}", source)
    out: dict[str, tuple[Any, str]] = {}
    if name == "smoke":
        out.update({k: (v, f"smoke defaults: {k}") for k, v in SMOKE_DEFAULTS.items()})
    for where, block in blocks:
        if not isinstance(block, dict):
            raise SpecError(where, "must be a mapping of dotted keys to values", source)
        out.update({k: (v, f"{where}.{k}") for k, v in block.items()})
    return out


# What --smoke (the `smoke` profile) does to every study: the same grid shape, scaled down to
# finish in minutes on a CPU. A study's own `smoke:` block and `profiles.smoke` are applied after
# these (e.g. to shorten its sequence lengths).
SMOKE_DEFAULTS: dict[str, Any] = {
    "model.preset": "tiny",
    "trainer.max_steps": 60,
    "trainer.val_check_interval": 30,
    "trainer.limit_val_batches": 2,
    "num_samples": 1,
    "early_terminate.grace_period": 1,
    "early_terminate.max_t": 2,
}




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
