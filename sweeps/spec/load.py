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

from sweeps.assignments import AssignmentError, parse_assignments
from sweeps.spec.dotted import get_dotted, holding_key, set_dotted
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
from sweeps.spec.objectives import baseline_of, check_baseline, check_objectives
from sweeps.spec.schema import SpecError, SweepSpec
from sweeps.spec.search_schema import ParamSpec
from sweeps.spec.selection_schema import check_seeds
from sweeps.spec.signatures import save as save_signatures
from sweeps.spec.teachers import resolve_teachers
from sweeps.spec.validate import check_sections, validate_cell
from sweeps.spec.warm_start import check_warm_start


def load_spec(
    path: str | Path, overrides: list[str] | None = None, profile: str | None = None
) -> Sweep:
    """Read, override (a named profile, then ``--set`` overrides), validate and expand a sweep
    file. Raises SpecError with the key path."""
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
        raise SpecError("", f"not valid YAML: {exc}", source) from None
    if not isinstance(raw, dict):
        raise SpecError("", "the file must be a mapping (name:, task:, model:, grid:, ...)", source)
    return build_sweep(raw, source=source, overrides=overrides, profile=profile)


class KeyGivenTwice(ValueError):
    """A mapping of the file names one key twice."""


class _OneKeyOnceLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is refused: PyYAML keeps the last
    value without a word, so a pasted line would quietly replace a setting (merges, ``<<:``,
    still override)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: YAML's own error follows
                continue
            if first is not None:
                where = "" if first == line else f" (first on line {first})"
                raise KeyGivenTwice(
                    f"line {line}: {key} is given twice in one mapping{where}; keep one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(text: str, source: str) -> Any:
    """A sweep file's YAML (:class:`_OneKeyOnceLoader`); its errors' marks name ``source``."""
    loader = _OneKeyOnceLoader(text)
    loader.name = source  # marks say the file, not "<unicode string>"
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def build_sweep(
    raw: dict[str, Any],
    source: str = "<spec>",
    overrides: list[str] | None = None,
    profile: str | None = None,
) -> Sweep:
    """The sweep of ``raw`` with ``profile`` and the ``--set`` ``overrides`` applied, validated
    and expanded. Every profile the file declares is checked too, each applied alone to the
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
        sweep = _build(raw, source, overrides, profile)
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
) -> Sweep:
    """:func:`build_sweep` of one profile (``used``: the one the launch runs with)."""
    raw = copy.deepcopy(raw)
    profiled = profile_overrides(raw, profile, source) if profile is not None else {}
    for key, (value, origin) in profiled.items():
        _set_dotted(raw, key, value, origin, source)
    planned = {k: copy.deepcopy(raw[k]) for k in PLAN_KEYS if k in raw}  # what --resume compares
    set_keys = parse_overrides(overrides or [], source)
    for key, value in set_keys.items():
        _check_whole_mapping(raw, key, value, source)
        _set_dotted(raw, key, value, f"--set {key}", source)
    # what the profile set and a --set then replaced is not what the run used: not said as its
    profiled = {k: v for k, v in profiled.items() if holding_key(k, set_keys) is None}
    _check_colon_keys(raw, "", source)
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        said = format_validation(exc)
        key = next((k for k in set_keys if said.startswith(f"{k}: ")), None)
        if key is not None:  # the value came from the command line, not the file: say so
            empty = (
                " (nothing after '=': YAML reads that as null)"
                if set_keys[key] is None and "(got nothing)" not in said
                else ""
            )
            raise SpecError(f"--set {key}", said[len(key) + 2 :] + empty, source) from None
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
        check_warm_start(spec, source)
    check_gpu_settings(spec, source, _cpu_profile(spec, profiled, set_keys))
    cells = expand_grid(spec.grid, source)
    check_baseline(spec, cells, source)
    _check_sets_are_used(set_keys, cells, spec, source)
    plans = []
    base = base_sections(spec)
    try:
        for cell in cells:
            task, model, trainer = resolve_sections(base, cell.values)
            validate_cell(task, model, trainer, cell, source)
            _validate_search_bounds(spec, task, model, trainer, cell, source)
            for seed in spec.seed_values:
                plans.append(TrialPlan(cell, seed, task, model, trainer))
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


def _check_sets_are_used(set_keys: dict[str, Any], cells: list, spec: Any, source: str) -> None:
    """A ``--set`` of a key the grid or the search sets in every trial would do nothing: refused,
    also for a key inside one set whole (``model.attention.k`` where the cells set
    ``model.attention``)."""
    by_grid = {key for cell in cells for key in cell.values}
    for key in set_keys:
        if (held := holding_key(key, by_grid)) is not None:
            fix = "the grid entry that holds it: grid.<entry>=[...]"
            raise SpecError(
                f"--set {key}",
                f"the grid sets {held} in its cells, so a fixed value would never be used; "
                f"change the grid instead (edit it, or --set {fix})",
                source,
            )
        # (a baseline model of relative constraints trains with the fixed value: not refused)
        if (held := holding_key(key, spec.parameters)) is not None and baseline_of(spec) is None:
            raise SpecError(
                f"--set {key}",
                f"the search samples {held} (parameters.{held}) in every trial, so a fixed value "
                f"would never be used; change its range instead (edit it, or --set "
                f"parameters.{held}=...), or remove it from parameters: to fix it",
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
        parts.append(("then " if parts else "") + "--set " + ", ".join(overrides))
    return "; ".join(parts)


def parse_overrides(items: list[str], source: str = "<spec>") -> dict[str, Any]:
    """``["trainer.max_steps=100", ...]`` -> ``{"trainer.max_steps": 100}`` (values are YAML)."""
    try:
        return parse_assignments(items)
    except AssignmentError as exc:
        if exc.value is None or not exc.key:
            raise SpecError(
                f"--set {exc.item}",
                "expected dotted.key=value, e.g. --set trainer.max_steps=100",
                source,
            ) from None
        raise SpecError(
            f"--set {exc.key}",
            f"cannot parse the value {exc.value.strip()!r} (YAML, e.g. 100, 0.5, [1, 2], 'text'); "
            f'quote it for the shell, e.g. --set "{exc.key}=[1, 2]"',
            source,
        ) from None


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


def _check_whole_mapping(raw: dict, key: str, value: Any, source: str) -> None:
    """``--set model={preset: tiny}`` replaces the whole section: refused where that would drop
    settings the file (or its profile) gives, naming them and the one-key form."""
    if key.split(".")[0] in ("grid", "parameters"):
        return  # a grid axis or a search space (or all of one) is given as such
    current = get_dotted(raw, key)
    if not (isinstance(value, dict) and isinstance(current, dict)):
        return
    if any(":" in str(k) for k in value):
        return  # `{name:copy}`, misread by YAML: _check_colon_keys says how to write it
    dropped = sorted(set(current) - set(value))
    if dropped:
        raise SpecError(
            f"--set {key}",
            f"replaces the whole mapping, which drops {', '.join(dropped)}; set one key at a "
            f"time (--set {key}.{sorted(value)[0] if value else dropped[0]}=VALUE), or give "
            f"every key to keep",
            source,
        )


def _set_dotted(raw: dict, key: str, value: Any, origin: str, source: str) -> None:
    """An override of the raw spec. ``grid`` and ``parameters`` keys are themselves dotted:
    ``grid.task.max_length`` sets ``raw["grid"]["task.max_length"]``; but a key that goes on past
    an entry they have walks into it: ``grid.model.1.K`` sets ``K`` in the second variant of
    ``grid.model``, ``parameters.model.lr.max`` the range's ``max``."""
    parts = key.split(".")
    if parts[0] in ("grid", "parameters") and len(parts) > 1 and all(parts):
        if not isinstance(raw.get(parts[0]), dict):
            raw[parts[0]] = {}
        if _set_inside_entry(raw[parts[0]], parts[0], parts[1:], value, origin, source):
            return
        if parts[0] == "parameters" and len(parts) > 2 and parts[-1] in ParamSpec.model_fields:
            # a new parameter by one of its keys (parameters.model.wd.values=[0, 0.1])
            raw["parameters"][".".join(parts[1:-1])] = {parts[-1]: value}
        else:
            raw[parts[0]][".".join(parts[1:])] = value
        return
    try:
        set_dotted(raw, key, value)
    except ValueError as exc:
        raise SpecError(origin, str(exc), source) from None


def _set_inside_entry(
    block: dict, section: str, parts: list[str], value: Any, origin: str, source: str
) -> bool:
    """Sets ``value`` inside an entry of ``block`` (the grid or the parameters) that ``parts``
    goes on past (the longest such entry's name first): into a list's item by its number (a grid
    variant, one value of an axis), or a mapping's key (a parameter's ``max``). False where no
    entry is named so, or where the grid's list is followed by a name, not a number
    (``grid.model.dropout``: a new axis, as it always was)."""
    for cut in range(len(parts) - 1, 0, -1):
        name, rest = ".".join(parts[:cut]), parts[cut:]
        entry = block.get(name)
        if isinstance(entry, list) and rest[0].isdigit():
            break
        if isinstance(entry, dict):
            break
    else:
        return False
    where = f"{section}.{name}"
    if isinstance(entry, list) and int(rest[0]) >= len(entry):
        last = f"0 to {len(entry) - 1}" if entry else "none"
        raise SpecError(
            origin,
            f"{where} is a list of {len(entry)} item(s) (numbered {last}), cannot set "
            f"{section}.{'.'.join(parts)}",
            source,
        )
    if isinstance(entry, list) and len(rest) == 1:
        entry[int(rest[0])] = value
        return True
    inner = entry[int(rest[0])] if isinstance(entry, list) else entry
    below = rest[1:] if isinstance(entry, list) else rest
    if not isinstance(inner, dict):
        raise SpecError(
            origin,
            f"{where}.{rest[0]} is {inner!r}, not a mapping, cannot set {section}."
            f"{'.'.join(parts)}",
            source,
        )
    try:
        set_dotted(inner, ".".join(below), value)
    except ValueError as exc:
        inside = f"{where}.{rest[0]}" if isinstance(entry, list) else where
        raise SpecError(origin, f"in {inside}: {exc}", source) from None
    return True
