"""Pydantic's validation errors of a sweep file as one line per mistake: the key's dotted path
and what is allowed there (an unknown key lists the keys its section accepts, a value where a
section's mapping goes says so and shows the section's keys)."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from sweeps.spec.dotted import key_path
from sweeps.spec.placement import belongs_elsewhere
from sweeps.spec.scalars import did_you_mean
from sweeps.spec.schema import SweepSpec

#: what a mapping of one value per key looks like, where a single value is the likely mistake
MAPPING_EXAMPLES = {
    "early_terminate.tolerance": (
        "one fraction per objective, e.g. early_terminate.tolerance: {decode_seconds: 0.2}"
    ),
    "constraints.of": (
        "the settings of the baseline model to be within `within` of, e.g. "
        "{name: val/bleu, within: 1.0, of: {attention: bahdanau}}"
    ),
}


#: pydantic's range errors: the comparison and the name of its bound in the error's context
BOUNDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}

#: the other way to say "none" where a list may not be empty
EMPTY_LIST_HINTS = {"timing.measure": "or timing.enabled: false to time nothing"}


def format_validation(exc: ValidationError, under: tuple = ()) -> str:
    """The errors of a model validated at ``under`` (``("trainer",)``: a cell's trainer section,
    validated alone) in the sweep file, one line each."""
    lines = []
    for err in exc.errors():
        full = (*under, *err["loc"])
        # a tagged union's branch name (seeds' "list" / "mapping") is not a key the user wrote
        loc = key_path(p for p in full if p not in ("list", "mapping"))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            parent = full[:-1]
            allowed = allowed_keys(parent)
            key, here = str(full[-1]), key_path(parent)
            hint = belongs_elsewhere(key, here) or did_you_mean(key, allowed)
            msg = f"unknown key{hint}; allowed here: {', '.join(allowed)}"
        elif err["type"] == "model_type":  # pydantic names the section's class
            msg = _not_a_mapping(loc, full, err.get("input"))
        elif err["type"] == "dict_type":  # task: 5, profiles.fast: 5
            msg = f"must be a mapping, not {err.get('input')!r}"
            section = ".".join(str(p) for p in full if not isinstance(p, int))  # any item's
            if example := MAPPING_EXAMPLES.get(section):
                msg += f" ({example})"
        elif err["type"] == "invalid_key":  # {off: ...}: YAML's off is false, pydantic's 0
            loc = key_path(p for p in full[:-1] if p not in ("list", "mapping"))
            msg = _key_not_text(err.get("input"))
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif err["type"] == "string_type":  # name: 5
            value = err.get("input")
            msg = f"must be text, not {'null' if value is None else repr(value)}"
        elif err["type"] == "finite_number":  # once for an int | float union, not per member
            loc = loc.removesuffix(".int").removesuffix(".float")
            msg = f"{err.get('input')!r} is not a finite number; give a number, not .inf or .nan"
        elif (
            err["type"] == "value_error"
        ):  # our own validators' messages, without pydantic's prefix
            msg = str(err.get("ctx", {}).get("error", msg))
        elif err["type"] in BOUNDS:  # said as the constructor settings' ranges are
            bound = err.get("ctx", {}).get(BOUNDS[err["type"]][1])
            if isinstance(bound, float) and bound.is_integer():
                bound = int(bound)  # > 0, as the constructor settings' ranges say it
            msg = f"{err.get('input')!r} is out of range; allowed: {BOUNDS[err['type']][0]} {bound}"
        elif err["type"] == "too_short":  # an empty list where one item at least goes
            least = err.get("ctx", {}).get("min_length", 1)
            msg = f"an empty list; give at least {least} item(s)"
            if hint := EMPTY_LIST_HINTS.get(loc):
                msg += f" ({hint})"
        elif err["type"] in (
            "literal_error",
            "int_parsing",
            "int_type",
            "int_from_float",
            "float_parsing",
            "float_type",
            "bool_parsing",
            "bool_type",
        ):
            value = err.get("input")
            msg = f"{msg} (got {'nothing' if value is None else repr(value)})"
        if f"{loc}: {msg}" not in lines:
            lines.append(f"{loc}: {msg}")
    return "; ".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines)


def _key_not_text(key: Any) -> str:
    """A mapping's key that YAML read as something other than text."""
    if isinstance(key, bool):  # yes, no, on, off (any case) are YAML's true and false
        return (
            f"a key here reads as {str(key).lower()} (YAML takes an unquoted yes, no, on or off "
            "for true or false): quote it, e.g. 'off'"
        )
    return f"a key here reads as {key!r}, not text: quote it, e.g. '{key}'"


def _not_a_mapping(where: str, loc: tuple, value: Any) -> str:
    """``timing: false``, ``fusion: 4``, ``--set trainer=5``: a section given one value."""
    model = section_model(loc)
    keys = sorted(model.model_fields)
    if isinstance(value, bool) and "enabled" in keys:
        return f"must be a mapping, not {value!r}; write {where}: {{enabled: {str(value).lower()}}}"
    # the usual form: the key that takes the word given (early_terminate: asha -> {type: asha}),
    # else the section's first key with its default (trainer: {max_steps: 1000})
    first, field = next(iter(model.model_fields.items()))
    worded = [k for k, f in model.model_fields.items() if _takes_word(f.annotation, value)]
    if worded:
        example = f" (e.g. {where}: {{{worded[0]}: {value}}})"
    elif isinstance(field.default, int | float | str):
        default = str(field.default).lower() if isinstance(field.default, bool) else field.default
        example = f" (e.g. {where}: {{{first}: {default}}})"
    else:
        example = ""
    return f"must be a mapping of its keys{example}, not {value!r}; allowed keys: {', '.join(keys)}"


def _takes_word(annotation: Any, value: Any) -> bool:
    """Whether ``annotation`` is a choice of words (a Literal, also optional) that has ``value``."""
    if typing.get_origin(annotation) is typing.Literal:
        return isinstance(value, str) and value in typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return any(_takes_word(a, value) for a in typing.get_args(annotation))
    return False


def _model_inside(ann: Any) -> type[BaseModel] | None:
    for a in typing.get_args(ann):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        found = _model_inside(a)
        if found is not None:
            return found
    return None


def allowed_keys(loc: tuple) -> list[str]:
    """The keys the section at ``loc`` accepts."""
    return sorted(section_model(loc).model_fields)


def section_model(loc: tuple) -> type[BaseModel]:
    """The model of the section at ``loc`` (a key path from the top of the sweep file)."""
    model: type[BaseModel] = SweepSpec
    for part in loc:
        fld = model.model_fields.get(str(part))
        ann = getattr(fld, "annotation", None)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            # dict[str, ParamSpec], a list | SeedsSpec union and friends: look through to the model
            nxt = _model_inside(ann)
            if nxt is None:
                continue
            model = nxt
    return model
