"""Loading a sweep file: YAML -> overrides (``--smoke``, ``--set``) -> schema -> grid -> validated
trial plans. :func:`load_spec` is what the launcher calls."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sweeps.assignments import yaml_problem
from sweeps.spec.dotted import dotted_key, holding_key, set_dotted
from sweeps.spec.gpu import check_gpu_settings, check_graphed_students
from sweeps.spec.grid import (
    SMOKE_ORIGIN,
    Cell,
    Sweep,
    TrialPlan,
    base_sections,
    expand_grid,
    resolve_sections,
)
from sweeps.spec.messages import format_validation
from sweeps.spec.objectives import check_baseline, check_objectives
from sweeps.spec.overrides import (
    check_no_profile_sets,
    check_sets_are_used,
    check_whole_mapping,
    parse_overrides,
    said_as_set,
    set_override,
)
from sweeps.spec.schema import SpecError, SweepSpec
from sweeps.spec.selection_schema import check_seeds
from sweeps.spec.signatures import save as save_signatures
from sweeps.spec.teachers import resolve_teachers
from sweeps.spec.validate import check_sections, check_task_combination, validate_cell
from sweeps.spec.warm_start import check_warm_start
from sweeps.spec.yaml_read import KeyGivenTwice, read_yaml


def load_spec(
    path: str | Path,
    overrides: list[str] | None = None,
    profile: str | None = None,
    resumed: Path | None = None,
) -> Sweep:
    """Read, override (a named profile, then ``--set`` overrides), validate and expand a sweep
    file. Raises SpecError with the key path. ``resumed``: the ``--output`` of a resume, whose
    sweep's first launch may have recorded its warm start (then the earlier folder need not be
    where it was)."""
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise SpecError("", "no such sweep file; the shipped ones are in sweeps/*.yaml", source)
    if path.is_dir():
        found = ", ".join(sorted(p.name for p in path.glob("*.yaml"))) or "none"
        raise SpecError(
            "", f"is a folder, not a sweep file; pass one of its .yaml files ({found})", source
        )
    try:
        raw = read_yaml(path.read_text(encoding="utf-8"), source)
    except KeyGivenTwice as exc:
        raise SpecError("", str(exc), source) from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            "",
            f"not UTF-8 text (byte {exc.start} is {exc.object[exc.start : exc.start + 1]!r}); "
            f"save the file as UTF-8",
            source,
        ) from None
    except OSError as exc:
        raise SpecError("", f"cannot read it ({exc.strerror or exc})", source) from None
    except yaml.YAMLError as exc:
        raise SpecError(
            "", f"not valid YAML: {yaml_problem(exc)}; correct the file", source
        ) from None
    if not isinstance(raw, dict):
        raise SpecError("", "the file must be a mapping (name:, task:, model:, grid:, ...)", source)
    return build_sweep(raw, source=source, overrides=overrides, profile=profile, resumed=resumed)


def build_sweep(
    raw: dict[str, Any],
    source: str = "<spec>",
    overrides: list[str] | None = None,
    profile: str | None = None,
    resumed: Path | None = None,
) -> Sweep:
    """The sweep of ``raw`` with ``profile`` and the ``--set`` ``overrides`` applied, validated
    and expanded (``resumed``: :func:`load_spec`'s). Every profile the file declares is checked too, each applied alone to the
    file, so a mistake in one fails whichever profile (or none) the launch uses; an error that
    comes with a profile names it (``profiles.fast: trainer.max_stepz: unknown key; ...``)."""
    if "smoke" in raw:
        raise SpecError(
            "smoke",
            "the top-level smoke: block is now the profile profiles.smoke; move it under "
            "`profiles:` as `smoke:` (its keys stay as they are)",
            source,
        )
    try:
        sweep = _build(raw, source, overrides, profile, resumed=resumed)
    except SpecError as exc:
        raise _from_profile(exc, raw, source, overrides, profile) from None
    declared = raw.get("profiles")
    for name in declared if isinstance(declared, dict) else ():
        if name != profile:
            try:  # a warm_start folder a profile names may come with a later run: not required
                _build(raw, source, None, name, used=False)
            except SpecError as exc:
                raise _from_profile(exc, raw, source, None, name) from None
    return sweep


def _from_profile(
    exc: SpecError, raw: dict, source: str, overrides: list[str] | None, profile: str | None
) -> SpecError:
    """``exc``, raised with ``profile`` applied, said as that profile's (``profiles.NAME: ...``)
    unless it names its place already or the file without the profile fails alike."""
    if profile is None or exc.path.startswith(("profiles.", "--profile", SMOKE_ORIGIN)):
        return exc
    try:
        _build(raw, source, overrides, None)
    except SpecError as without:
        if str(without) == str(exc):
            return exc
    said = f"{exc.path}: {exc.message}" if exc.path else exc.message
    if overrides:  # the profile alone builds: the --set and the profile together do not
        try:
            _build(raw, source, None, profile)
        except SpecError:
            pass
        else:
            if exc.path.startswith("--set "):  # said as a --set's already
                return SpecError(f"{exc.path} (with --profile {profile})", exc.message, source)
            keys = list(parse_overrides(overrides, source))
            plain = re.sub(r"\[\d*\]", "", exc.path)
            held = holding_key(plain, keys)
            named = held or ", ".join(keys)
            return SpecError(f"--set {named} (with --profile {profile})", said, source)
    declared = raw.get("profiles") or {}
    where = f"profiles.{profile}" if profile in declared else "--smoke (the smoke defaults)"
    return SpecError(where, said, source)


def _build(
    raw: dict[str, Any],
    source: str,
    overrides: list[str] | None,
    profile: str | None,
    used: bool = True,
    resumed: Path | None = None,
) -> Sweep:
    """:func:`build_sweep` of one profile (``used``: the one the launch runs with)."""
    raw = copy.deepcopy(raw)
    set_keys = parse_overrides(overrides or [], source)
    check_no_profile_sets(overrides or [], set_keys, profile, source)
    profiled = profile_overrides(raw, profile, source) if profile is not None else {}
    for key, (value, origin) in profiled.items():
        check_whole_mapping(raw, key, value, source, origin)
        set_override(raw, key, value, origin, source)
    planned = {k: copy.deepcopy(raw[k]) for k in PLAN_KEYS if k in raw}  # what --resume compares
    for key, value in set_keys.items():
        check_whole_mapping(raw, key, value, source)
        set_override(raw, key, value, f"--set {key}", source)
    # what the profile set and a --set then replaced is not what the run used: not said as its
    profiled = {k: v for k, v in profiled.items() if holding_key(k, set_keys) is None}
    try:
        return _checked(raw, source, overrides, set_keys, profiled, planned, used, resumed)
    except SpecError as exc:
        raise said_as_set(exc, set_keys) from None


def _checked(
    raw: dict[str, Any],
    source: str,
    overrides: list[str] | None,
    set_keys: dict[str, Any],
    profiled: dict[str, tuple[Any, str]],
    planned: dict[str, Any],
    used: bool,
    resumed: Path | None = None,
) -> Sweep:
    """The rest of :func:`_build`: ``raw`` (the profile and the ``--set`` overrides applied)
    validated, its grid expanded and every cell checked."""
    _check_colon_keys(raw, "", source)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        said = format_validation(exc)
        written, _, rest = said.partition(": ")
        loc = dotted_key(written)  # the form of the --set keys
        if loc in set_keys:  # the value came from the command line, not the file: say so
            empty = (
                " (nothing after '=': YAML reads that as null)"
                if set_keys[loc] is None and "(got nothing)" not in said
                else ""
            )
            raise SpecError(f"--set {loc}", rest + empty, source) from None
        loc = dotted_key(said.lstrip().partition(": ")[0])  # the first, where several
        for key in set_keys:
            if holding_key(loc, [key]):  # inside the value: --set constraints, constraints.0
                raise SpecError(f"--set {key}", said, source) from None
            if holding_key(key, [loc]):  # above it: --set trainr.max_steps, trainr unknown
                raise SpecError(f"--set {key}", said, source) from None
        raise SpecError("", said, source) from None
    for pname, p in spec.parameters.items():
        try:
            p.resolved_distribution()
        except ValueError as exc:
            raise SpecError(f"parameters.{pname}", str(exc), source) from None
    check_sections(spec, source)
    check_objectives(spec, source)  # objectives/constraints
    check_seeds(spec, source)  # seeds: {per_configuration: true}
    if used:
        check_warm_start(spec, source, resumed)
    check_gpu_settings(spec, source, _cpu_profile(spec, profiled, set_keys))
    cells = expand_grid(spec.grid, source)
    _check_grid_and_search_apart(spec, cells, source)
    check_sets_are_used(set_keys, cells, spec, source)
    plans = []
    base = base_sections(spec)
    try:
        for cell in cells:
            task, model, trainer = resolve_sections(base, cell.values)
            validate_cell(task, model, trainer, cell, source)
            check_task_combination(task, cell, spec.parameters, source)
            _validate_search_bounds(spec, task, model, trainer, cell, source)
            for seed in spec.seed_values:
                plans.append(TrialPlan(cell, seed, task, model, trainer))
        check_baseline(spec, cells, source)  # after the cells: their own mistakes said first
        teachers = resolve_teachers(spec, cells, plans, source)  # dependent trials
        check_graphed_students(spec, plans, source)  # their teachers run outside a graph
    finally:
        save_signatures()  # the attention checks learnt here serve the next run too
    return Sweep(
        spec=spec,
        source=source,
        cells=cells,
        plans=plans,
        teachers=teachers,
        planned=planned,
        profile_settings=profiled,
        set_overrides=list(overrides or []),
    )


def _cpu_profile(
    spec: SweepSpec, profiled: dict[str, tuple[Any, str]], set_keys: dict[str, Any]
) -> str | None:
    """The profile (``profiles.smoke``) that set ``resources.gpu``, where the graphs the trials
    ask for are the file's own ``trainer.cuda_graphs`` (neither the profile's nor a ``--set``):
    for :func:`~sweeps.spec.gpu.check_gpu_settings`, whose fix is then to turn them off in it."""
    if not spec.trainer.cuda_graphs:
        return None
    if any(holding_key("trainer.cuda_graphs", keys) for keys in (profiled, set_keys)):
        return None
    held = holding_key("resources.gpu", profiled)
    origin = profiled[held][1] if held is not None else ""
    if not origin.startswith("profiles."):
        return None
    return origin.removesuffix(f".{held}")


def _check_grid_and_search_apart(spec: SweepSpec, cells: list, source: str) -> None:
    """A key both a grid axis and an Optuna parameter: the sample replaced the cell's value, so
    the cell's label named a value its trials never trained with; refused, naming both."""
    for pname in spec.parameters:
        for cell in cells:
            key = next(
                (k for k in cell.values if holding_key(k, [pname]) or holding_key(pname, [k])),
                None,
            )
            if key is None:
                continue
            origin = cell.origins.get(key, f"grid.{key}")
            raise SpecError(
                f"parameters.{pname}",
                f"the grid sets {key} too ({origin}), so the sampled value would replace the "
                f"cell's and its label would be wrong; keep it in one place: remove it from "
                f"parameters: or from grid:",
                source,
            )


def _check_colon_keys(value: Any, where: str, source: str) -> None:
    """YAML reads ``{attention:memory}`` (no space after the colon, as typed in ``--set
    "grid.model=[{attention:memory}]"`` or a file's flow mapping) as one key ``attention:memory``
    with no value; said as that, before any check finds the key unknown or the setting missing."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if item is None and isinstance(key, str) and ":" in key:
                name, _, text = key.partition(":")
                raise SpecError(
                    path,
                    f"YAML reads {key!r} as one key with no value; a value needs a space after "
                    f"the colon: {name}: {text}",
                    source,
                )
            _check_colon_keys(item, path, source)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_colon_keys(item, f"{where}[{i}]", source)


def profile_overrides(raw: dict[str, Any], name: str, source: str) -> dict[str, tuple[Any, str]]:
    """The dotted overrides of profile ``name`` -> (value, where it was written). Profiles live in
    the sweep's ``profiles: {NAME: {dotted.key: value}}`` block; ``smoke`` (the plumbing profile)
    always exists: :data:`SMOKE_DEFAULTS`, then the sweep's ``profiles.smoke``."""
    blocks: list[tuple[str, Any]] = []
    profiles = raw.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise SpecError(
            "profiles", "must be a mapping of profile names to mappings of dotted keys", source
        )
    if name in profiles:
        blocks.append((f"profiles.{name}", profiles[name] or {}))
    elif name != "smoke":
        have = ", ".join(["smoke", *sorted(set(profiles) - {"smoke"})])
        raise SpecError(
            f"--profile {name}", f"this sweep has no such profile; it has: {have}", source
        )
    out: dict[str, tuple[Any, str]] = {}
    if name == "smoke":
        out.update({k: (v, f"{SMOKE_ORIGIN}: {k}") for k, v in SMOKE_DEFAULTS.items()})
    for where, block in blocks:
        if not isinstance(block, dict):
            raise SpecError(where, "must be a mapping of dotted keys to values", source)
        out.update({k: (v, f"{where}.{k}") for k, v in block.items()})
    return out


# What --smoke (the `smoke` profile) does to every sweep: the same grid shape, scaled down to
# finish in minutes on a CPU. A sweep's own `profiles.smoke` is applied after
# these (e.g. to shorten its sequence lengths).
SMOKE_DEFAULTS: dict[str, Any] = {
    "model.preset": "tiny",
    "trainer.max_steps": 60,
    "trainer.val_check_interval": 30,
    "trainer.limit_val_batches": 2,
    "num_samples": 1,
    "early_terminate.grace_period": 1,
    "early_terminate.max_t": 2,
    "timing.processes": 1,  # each model timed in one fresh process, not three
    "timing.max_seconds": 5,  # per model and measure: the plumbing, not a speed figure
}


def profile_line(
    name: str | None, settings: dict[str, tuple[Any, str]], overrides: Sequence[str] = ()
) -> str:
    """``profile smoke sets: model.preset=tiny, ... (the smoke defaults); task.max_length=4
    (profiles.smoke); then --set trainer.max_steps=30``: what a profile and the ``--set``
    overrides changed, so a figure is never read as the full study's (a smoke run's validation
    covers its first ``trainer.limit_val_batches`` batches). ``settings``: the profile's, less
    those a ``--set`` replaced (:attr:`~sweeps.spec.grid.Sweep.profile_settings`); empty when
    neither changed anything."""
    groups: dict[str, list[str]] = {}
    for key, (value, origin) in settings.items():
        where = "the smoke defaults" if origin.startswith(SMOKE_ORIGIN) else f"profiles.{name}"
        groups.setdefault(where, []).append(
            f"{key}={json.dumps(value) if isinstance(value, (dict, list)) else value}"
        )
    parts = []
    if groups:
        parts.append(
            f"profile {name} sets: "
            + "; ".join(f"{', '.join(items)} ({where})" for where, items in groups.items())
        )
    if overrides:
        parts.append(
            ("then " if parts else "") + "--set " + ", ".join(overrides) + _set_twice(overrides)
        )
    return "; ".join(parts)


def _set_twice(overrides: Sequence[str]) -> str:
    """`` (trainer.max_steps given twice: the last holds)``, said for each ``--set`` key a later
    ``--set`` gives again or replaces with the mapping above it; later ones win (a wrapper's own
    overrides come first, its user's after), so the line says which were not used."""
    keys = [dotted_key(o.partition("=")[0].strip()) for o in overrides]
    said = []
    for i, key in enumerate(keys):
        later = [k for k in keys[i + 1 :] if k == key or key.startswith(k + ".")]
        if later and key not in said:
            said.append(key)
    notes = [
        f"{k} given twice: the last holds"
        if keys.count(k) > 1
        else f"{k} replaced by a later --set {next(x for x in keys if k.startswith(x + '.'))}"
        for k in said
    ]
    return f" ({'; '.join(notes)})" if notes else ""


#: the sweep file's sections that plan the trials and what they are judged by: a resume's, in the
#: file and in ``--set``, must be the first run's (the others, such as failure, budget,
#: max_concurrent_trials, timing, heldout, wandb and chaos, may change: a sweep stopped by a fault
#: is resumed with its cause removed, one whose budget ran out with a larger one)
PLAN_KEYS = (
    "task",
    "model",
    "grid",
    "parameters",
    "num_samples",
    "search",
    "seeds",
    "metric",
    "objectives",
    "constraints",
    "early_terminate",
    "stop_when",
    "trainer",
    "warm_start",
    "resources",  # with fusion: which trials train as one fused group, and the GPU arrangement
    "fusion",
)


def _validate_search_bounds(
    spec: SweepSpec, task: dict, model: dict, trainer: dict, cell, source: str
) -> None:
    """Every value Optuna may sample in this cell (each categorical value, a range's both ends)
    passes the same checks as a fixed setting, reported at ``parameters.<key>``."""
    for key, p in spec.parameters.items():
        candidates = p.values if p.values is not None else [p.min, p.max]
        if p.values is None and p.resolved_distribution() in ("int_uniform", "int_log_uniform"):
            candidates = [int(p.min), int(p.max)]
        for value in candidates:
            sections = {
                "task": copy.deepcopy(task),
                "model": copy.deepcopy(model),
                "trainer": copy.deepcopy(trainer),
            }
            try:
                set_dotted(sections, key, value)
            except ValueError as exc:
                raise SpecError(f"parameters.{key}", str(exc), source) from None
            probe = Cell(cell.values, {**cell.origins, key: f"parameters.{key}"})
            validate_cell(sections["task"], sections["model"], sections["trainer"], probe, source)
