"""Where a key given in the wrong section belongs: ``trainer.lr`` is a model setting
(``model.lr``), a top-level ``max_steps`` the trainer's. An unknown key's message names the place
that takes it rather than the nearest spelling of this section (``search.num_samples`` was asked
"did you mean sampler?")."""

from __future__ import annotations

import functools

from pydantic import BaseModel

from datamodules import TASKS
from sweeps.spec.schema import SweepSpec
from sweeps.spec.signatures import datamodule_param_types, signatures


def belongs_elsewhere(key: str, here: str) -> str:
    """`` (a trainer setting: trainer.max_steps)`` where ``key``, unknown at ``here`` (a section's
    dotted path, "" for the top level), is a key of other sections; "" where none takes it."""
    places = [p for p in _places().get(key, ()) if p != here]
    if not places:
        return ""
    said = [f"{p}.{key}" if p else f"{key} (top level)" for p in places[:3]]
    return f" (it belongs elsewhere: {', '.join(said)})"


@functools.cache
def _places() -> dict[str, tuple[str, ...]]:
    """Each key the sweep file takes -> the sections that take it ("" for the top level)."""
    found: dict[str, list[str]] = {}

    def add(section: str, keys: object) -> None:
        for key in keys:  # type: ignore[attr-defined]
            found.setdefault(str(key), []).append(section)

    add("", SweepSpec.model_fields)
    for name, field in SweepSpec.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            add(name, field.annotation.model_fields)
    sig = signatures()
    add("model", {*sig.module, *(k for options in sig.attention.values() for k in options)})
    task_keys: set[str] = set()
    for task in TASKS:
        try:
            task_keys |= set(datamodule_param_types(task))
        except ValueError:  # a task whose package is not installed here
            continue
    add("task", task_keys)
    return {k: tuple(dict.fromkeys(v)) for k, v in found.items()}
