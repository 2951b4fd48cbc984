"""The ``--set`` overrides of a sweep file: read (YAML, as the file is), applied to the raw spec
(dotted keys, into a grid variant or a parameter's range), refused where they would do nothing
(a profile's setting, a key the grid or the search sets in every trial) or drop settings, and an
error at a key they gave said as theirs (``--set model.lrr: ...``)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from sweeps.assignments import AssignmentError, parse_assignments, yaml_problem
from sweeps.spec.dotted import dotted_key, get_dotted, holding_key, set_dotted
from sweeps.spec.objectives import baseline_of
from sweeps.spec.schema import SpecError
from sweeps.spec.search_schema import ParamSpec
from sweeps.spec.yaml_read import KEEP_ONE, KeyGivenTwice, read_yaml


def said_as_set(exc: SpecError, set_keys: dict[str, Any]) -> SpecError:
    """``exc`` at a key a ``--set`` gave (or inside one it gave) said as that ``--set``'s, not
    the file's: ``--set model.lrr: ...``, ``--set constraints: constraints[0]: ...``."""
    if not exc.path or exc.path.startswith("--set ") or " " in exc.path:
        return exc
    held = holding_key(dotted_key(exc.path), set_keys)
    if held is None:
        return exc
    said = exc.message if held == exc.path else f"{exc.path}: {exc.message}"
    return SpecError(f"--set {held}", said, exc.source)


def check_no_profile_sets(
    overrides: list[str], set_keys: dict[str, Any], profile: str | None, source: str
) -> None:
    """``--set profiles.cpu.trainer.max_steps=5``: the profile is applied before the ``--set``
    overrides, so a change to it was neither used nor checked; refused, with the form that
    works."""
    for key in set_keys:
        if key.split(".")[0] != "profiles":
            continue
        parts = key.split(".", 2)
        if len(parts) < 3:
            raise SpecError(
                f"--set {key}",
                "--set applies after the chosen profile, so it cannot change profiles; edit "
                "the file's profiles: block, or pick one with --profile NAME and --set its "
                "settings (--profile NAME --set trainer.max_steps=...)",
                source,
            )
        name, setting = parts[1], parts[2]
        text = next(
            (o.partition("=")[2].strip() for o in overrides if o.partition("=")[0].strip() == key),
            "...",
        )
        chosen = "--smoke" if name == "smoke" else f"--profile {name}"
        also = "" if profile in (None, name) else f" (this launch picks --profile {profile})"
        raise SpecError(
            f"--set {key}",
            f"--set applies after the chosen profile, so a profile's setting set here would "
            f"never be used{also}; write {chosen} --set '{setting}={text}'",
            source,
        )


def check_sets_are_used(set_keys: dict[str, Any], cells: list, spec: Any, source: str) -> None:
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


def parse_overrides(items: list[str], source: str = "<spec>") -> dict[str, Any]:
    """``["trainer.max_steps=100", ...]`` -> ``{"trainer.max_steps": 100}`` (values are YAML, a
    key given twice in one of their mappings refused as in the file)."""
    try:
        parsed = parse_assignments(items, value=_override_value)
    except AssignmentError as exc:
        if exc.value is None or not exc.key:
            raise SpecError(
                f"--set {exc.item}",
                "expected dotted.key=value, e.g. --set trainer.max_steps=100",
                source,
            ) from None
        text = exc.value.strip()
        if exc.problem.endswith(KEEP_ONE):  # a key given twice: the value parsed, YAML-wise
            raise SpecError(f"--set {exc.key}", f"{text!r}: {exc.problem}", source) from None
        raise SpecError(
            f"--set {exc.key}",
            f"cannot parse the value {text!r} as YAML: {exc.problem}{_shell_split_hint(exc.key, text)}",
            source,
        ) from None
    return {dotted_key(key): value for key, value in parsed.items()}


def _override_value(text: str) -> Any:
    """A ``--set`` value, read as the sweep file is (:class:`_OneKeyOnceLoader`)."""
    try:
        return read_yaml(text, "--set")
    except KeyGivenTwice as exc:  # "line 1: ..." says nothing of a one-line value
        raise ValueError(
            re.sub(r"^line \d+: ", "", str(exc)).replace(" (first on line 1)", "")
        ) from None
    except yaml.YAMLError as exc:
        raise ValueError(yaml_problem(exc, lines="\n" in text)) from None


def _shell_split_hint(key: str, text: str) -> str:
    """How to quote a value the shell seems to have cut at a space (``--set x=[1, 2]`` unquoted
    gives ``[1,``): brackets opened and not closed, and no space in what arrived; "" otherwise."""
    opened = text.count("[") + text.count("{") > text.count("]") + text.count("}")
    if not opened or any(c.isspace() for c in text):
        return ""
    return f'; the shell split it at a space: quote it, e.g. --set "{key}=[1, 2]"'


def check_whole_mapping(
    raw: dict, key: str, value: Any, source: str, origin: str | None = None
) -> None:
    """``--set model={preset: tiny}`` replaces the whole section: refused where that would drop
    settings the file (or its profile) gives, naming them and the one-key form. ``origin``: the
    profile entry that sets it (``profiles.fast.model``), where it is not a ``--set``."""
    if key.split(".")[0] in ("grid", "parameters"):
        return  # a grid axis or a search space (or all of one) is given as such
    current = get_dotted(raw, key)
    if not (isinstance(value, dict) and isinstance(current, dict)):
        return
    if any(":" in str(k) for k in value):
        return  # `{name:copy}`, misread by YAML: _check_colon_keys says how to write it
    dropped = sorted(set(current) - set(value))
    if dropped:
        one = f"{key}.{sorted(value)[0] if value else dropped[0]}"
        raise SpecError(
            origin or f"--set {key}",
            f"replaces the whole mapping, which drops {', '.join(dropped)}; set one key at a "
            + (
                f"time (--set {one}=VALUE)"
                if origin is None
                else f"time, a profile's keys dotted ({one}: VALUE)"
            )
            + ", or give every key to keep",
            source,
        )


def set_override(raw: dict, key: str, value: Any, origin: str, source: str) -> None:
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
