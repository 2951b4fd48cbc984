"""Pydantic's validation errors of a sweep file as one line per mistake: the key's dotted path
and what is allowed there (an unknown key lists the keys its section accepts)."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from sweeps.spec.schema import SweepSpec


def format_validation(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        # a tagged union's branch name (seeds' "list" / "mapping") is not a key the user wrote
        loc = ".".join(str(p) for p in err["loc"] if p not in ("list", "mapping"))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            parent = err["loc"][:-1]
            allowed = allowed_keys(parent)
            msg = f"unknown key; allowed here: {', '.join(allowed)}"
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif (
            err["type"] == "value_error"
        ):  # our own validators' messages, without pydantic's prefix
            msg = str(err.get("ctx", {}).get("error", msg))
        elif err["type"] in (
            "literal_error",
            "greater_than",
            "greater_than_equal",
            "less_than",
            "less_than_equal",
        ):
            msg = f"{msg} (got {err.get('input')!r})"
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines)


def _model_inside(ann: Any) -> type[BaseModel] | None:
    for a in typing.get_args(ann):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        found = _model_inside(a)
        if found is not None:
            return found
    return None


def allowed_keys(loc: tuple) -> list[str]:
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
    return sorted(model.model_fields)
