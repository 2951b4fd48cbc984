"""Cell validation: a cell's resolved task, model and trainer settings checked against the
datamodule's, Seq2SeqModule's and the attention mechanism's constructor signatures (and the
ranges they declare), so a bad value fails before Ray starts, naming where it was written."""

from __future__ import annotations

import functools
import inspect
import math
import string
from typing import Any

from pydantic import TypeAdapter, ValidationError

from datamodules.ranges import allowed_range, bounds, number_kind, range_markers
from lightning_modules.presets import PRESETS, attention_dims
from sweeps.spec.data_fit import check_data_fit
from sweeps.spec.grid import Cell
from sweeps.spec.messages import format_validation
from sweeps.spec.placement import belongs_elsewhere
from sweeps.spec.scalars import (
    accepts_bool,
    bool_text_problem,
    did_you_mean,
    is_number_text,
    text_problem,
    type_name,
    yes_no_problem,
)
from sweeps.spec.schema import SpecError, SweepSpec, TrainerSpec
from sweeps.spec.signatures import (
    TASK_CLASSES,
    attention_param_types,
    attention_problem,
    datamodule_param_types,
    frozen,
    module_signature_params,
)

TASKS = tuple(TASK_CLASSES)
# Module arguments the trial fills in from the datamodule; a spec may not set them.
DERIVED_MODEL_KEYS = ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id")
#: the module's arguments a model section does not take: the derived ones, and attention_kwargs
#: (its options go straight under model)
NOT_LISTED_MODEL_KEYS = (*DERIVED_MODEL_KEYS, "attention_kwargs")


def check_sections(spec: SweepSpec, source: str) -> None:
    name = spec.task.get("name")
    if name not in TASKS:
        raise SpecError("task.name", f"must be one of {', '.join(TASKS)} (got {name!r})", source)


def _origin(cell: Cell, key: str, default: str) -> str:
    return cell.origins.get(key, default)


def validate_cell(task: dict, model: dict, trainer: dict, cell: Cell, source: str) -> None:
    problem = _trainer_problem(trainer)
    if problem:
        # the cell's own trainer values (a grid's, a searched range's end), where they were written
        here = [
            f"{origin} = {trainer[key[8:]]!r}"
            for key, origin in cell.origins.items()
            if key.startswith("trainer.") and key[8:] in trainer and origin != key
        ]
        raise SpecError("", problem + (f" (where {', '.join(here)})" if here else ""), source)

    dm_params = datamodule_param_types(task["name"])
    for key, value in task.items():
        if key == "name":
            continue
        where = _origin(cell, f"task.{key}", f"task.{key}")
        if key not in dm_params:
            raise SpecError(
                where,
                f"unknown {task['name']} task setting"
                f"{belongs_elsewhere(key, 'task') or did_you_mean(key, dm_params)}; "
                f"allowed: {', '.join(sorted(dm_params))}",
                source,
            )
        _check_type(dm_params[key], value, where, source)
        if task["name"] == "wmt17" and key == "pair":
            from datamodules.wmt_checks import check_pair  # no torch: its spelling checks only

            try:
                check_pair(value)
            except ValueError as exc:
                raise SpecError(where, str(exc), source) from None
    _check_placeholders(task, dm_params, lambda k: _origin(cell, k, k), source)

    check_bounds_pairs("task", task, lambda k: _origin(cell, k, k), source)

    mod_params = module_signature_params()
    attention = model.get("attention", mod_params["attention"][1])
    try:
        att_params = attention_param_types(attention)
    except ValueError as exc:
        raise SpecError(
            _origin(cell, "model.attention", "model.attention"), str(exc), source
        ) from None
    for key, value in model.items():
        where = _origin(cell, f"model.{key}", f"model.{key}")
        if key in DERIVED_MODEL_KEYS:
            raise SpecError(
                where, "is derived from the data (the trial fills it in); remove it", source
            )
        if key == "teacher":
            raise SpecError(
                where,
                "a teacher is named by a grid variant: grid.model: [..., {attention: memory, "
                "distill_weight: 1, teacher: {cell: {attention: bahdanau}}}]",
                source,
            )
        if key == "attention_kwargs":
            raise SpecError(
                where, "put attention options straight under model (e.g. model.K: 16)", source
            )
        if key in mod_params:
            _check_type(mod_params[key][0], value, where, source)
        elif key in att_params:
            _check_type(att_params[key], value, where, source)
        elif (by := _origin(cell, "model.attention", "")).startswith(
            "constraints["
        ) and not where.startswith("constraints["):  # a fixed setting the baseline takes too
            raise SpecError(
                where,
                f"not an option of attention {attention!r}, the baseline model of the relative "
                f"constraints ({by}), which trains with the sweep's fixed model settings too; "
                f"give {key} to the searched models only: through parameters: (--set "
                f"'parameters.model.{key}={{values: [{value}]}}') or a grid.model variant",
                source,
            )
        else:
            raise SpecError(
                where,
                f"not a model setting nor an option of attention {attention!r}"
                f"{belongs_elsewhere(key, 'model') or did_you_mean(key, [*mod_params, *att_params])}"
                ". Model settings: "
                f"{', '.join(sorted(k for k in mod_params if k not in NOT_LISTED_MODEL_KEYS))}; "
                f"{attention} options: {', '.join(sorted(att_params)) or '(none)'}",
                source,
            )
    preset = model.get("preset", mod_params["preset"][1])
    if preset not in PRESETS:
        raise SpecError(
            _origin(cell, "model.preset", "model.preset"),
            f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}",
            source,
        )
    # the sizes the trial's model will give the mechanism, so e.g. luong_dot's H == D fails here
    dims = attention_dims(preset, model.get("hidden_size"), model.get("bidirectional"))
    att_opts = {k: v for k, v in model.items() if k not in mod_params}
    problem = attention_problem(attention, att_opts, dims)
    if problem:
        key = next((k for k in att_opts if k in problem), None)
        where = (
            _origin(cell, f"model.{key}", f"model.{key}")
            if key
            else _origin(cell, "model.attention", "model")
        )
        raise SpecError(where, problem, source)
    if "max_source_len" in att_params and model.get("max_source_len") is not None:
        # the module passes its own on to the mechanism, as the trial builds it
        att_opts = {**att_opts, "max_source_len": model["max_source_len"]}

    def where_of(key: str) -> str:
        return _origin(cell, key, key)

    check_data_fit(task, model, trainer, where_of, source, (attention, att_opts, dims))


def _check_type(annotation: Any, value: Any, where: str, source: str) -> None:
    """``value`` against a constructor parameter's annotation, including the range its
    ``Annotated[..., Ge(1)]`` markers declare."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return
    try:
        problem = _type_problem(annotation, type(value), value)  # cached: grids repeat their values
    except TypeError:  # an unhashable value (a list, a dict)
        problem = _type_problem.__wrapped__(annotation, type(value), value)
    if problem and isinstance(value, list) and where.startswith(("model.", "task.")):
        # a list in the base section: values to sweep, which the grid takes
        shown = ", ".join(map(str, value))
        problem += f"; to sweep these values, put them under grid: (grid: {{{where}: [{shown}]}})"
    if problem:
        raise SpecError(where, problem, source)


# A large grid holds the same settings in many cells: each distinct check runs once (10,000 cells
# would otherwise build 10,000 attention modules and 90,000 pydantic validators). The attention
# checks are also kept on disk with the signatures (.signatures), across runs.


@functools.cache
def _type_adapter(annotation: Any) -> TypeAdapter:
    return TypeAdapter(annotation)


@functools.lru_cache(maxsize=4096)
def _type_problem(annotation: Any, kind: type, value: Any) -> str | None:
    """Why ``value`` does not fit ``annotation`` (message), or None. ``kind`` keeps 1 and True apart."""
    if kind is bool and not accepts_bool(annotation):  # pydantic's lax mode would take True for 1
        return yes_no_problem(annotation, value)
    # pydantic's lax mode takes "64" and 64.0 for 64, and "false" for False (and refuses "1e5" in
    # words of its own), but the constructors are given the value itself: the model's checks
    # refuse the first, and a bool setting given the text "false" is on
    bool_text = bool_text_problem(annotation, value)
    if bool_text:
        return bool_text
    number = number_kind(annotation)
    if isinstance(value, str) and number is not None and is_number_text(value):
        return text_problem(annotation, value)
    try:
        try:
            adapter = _type_adapter(annotation)
        except TypeError:  # an unhashable annotation
            adapter = TypeAdapter(annotation)
        adapter.validate_python(value, strict=False)
    except ValidationError as exc:
        err = exc.errors()[0]
        allowed = allowed_range(annotation)
        if allowed and err["type"] in _RANGE_ERRORS:
            return f"{value!r} is out of range; allowed: {allowed}"
        if err["type"] == "literal_error":  # pydantic's "Input should be 'a' or 'b'"
            return f"{value!r} is not a choice of this setting; give {type_name(annotation)}"
        return f"{err['msg']} (got {value!r}; expected {type_name(annotation)})"
    except Exception as exc:  # noqa: BLE001 -- a check that cannot run is a problem, never a pass
        return (
            f"could not be checked against {type_name(annotation)} ({type(exc).__name__}: {exc}); "
            f"this setting cannot come from a sweep file"
        )
    if isinstance(value, float) and math.isnan(value):
        return "NaN is not a valid setting"
    allowed = allowed_range(annotation)
    if isinstance(value, float) and math.isinf(value) and allowed and not _allows_inf(annotation):
        return f"{value!r} is out of range; allowed: {allowed}, a finite number"
    if isinstance(value, float) and number is int:
        write = f" (write {int(value)})" if value.is_integer() else ""
        return f"{value!r} is not a whole number; expected {type_name(annotation)}{write}"
    return None


def check_task_combination(task: dict, cell: Cell, searched: Any, source: str) -> None:
    """A WMT task whose settings together leave a batch without a size or a split without files
    (``batch_tokens: null`` without ``batch_size``, an empty ``train_prefix``), which the
    datamodule would refuse only when the plan builds it; a searched setting counts as given."""
    if task.get("name") != "wmt17":
        return
    from datamodules.wmt_checks import settings_problem  # no torch

    names = [key[len("task.") :] for key in searched if key.startswith("task.")]
    if problem := settings_problem(task, names):
        key, said = problem
        raise SpecError(_origin(cell, f"task.{key}", f"task.{key}"), said, source)


def _check_placeholders(task: dict, dm_params: dict, where_of: Any, source: str) -> None:
    """A ``{...}`` field left in a resolved ``*_dir`` path (:func:`~sweeps.spec.grid.resolve_sections`
    fills in ``{pair}`` from the task's settings): a misspelt one (``{pari}``), or one naming a
    setting this sweep does not give, was kept literally as part of the folder's name."""
    for key, value in task.items():
        if not (key.endswith("_dir") and isinstance(value, str) and "{" in value):
            continue
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
        except ValueError as exc:
            raise SpecError(
                where_of(f"task.{key}"),
                f"{exc} in {value!r}; write a placeholder as {{pair}}",
                source,
            ) from None
        if not fields:
            continue
        name = fields[0]
        where = where_of(f"task.{key}")
        if name in dm_params:
            raise SpecError(
                where,
                f"{{{name}}} is not filled in: it comes from task.{name}, which this sweep does "
                f"not set; set it (--set task.{name}=...) or give a grid axis grid.task.{name}",
                source,
            )
        known = [k for k in ("pair",) if k in dm_params]
        takes = (
            ", ".join(f"{{{k}}} (filled in from task.{k})" for k in known)
            or "a task setting's name"
        )
        close = f" (did you mean {{{known[0]}}}?)" if did_you_mean(name, known) else ""
        raise SpecError(
            where, f"unknown placeholder {{{name}}}{close}; a path here takes {takes}", source
        )


def _allows_inf(annotation: Any) -> bool:
    """Whether a ranged setting's range takes infinity explicitly: a bound that is itself infinite
    (``Le(math.inf)``), or pydantic's ``AllowInfNan(True)``."""
    if any(isinstance(limit, float) and math.isinf(limit) for _, limit in bounds(annotation)):
        return True
    return any(getattr(m, "allow_inf_nan", None) is True for m in range_markers(annotation))


def check_bounds_pairs(section: str, values: dict[str, Any], where_of: Any, source: str) -> None:
    """Settings named ``min_X`` and ``max_X`` in one section: min <= max (e.g. the copy task's
    ``min_length``/``max_length``), caught at --dry-run rather than when the datamodule is built."""
    for key, low in values.items():
        high = values.get("max_" + key[4:]) if key.startswith("min_") else None
        if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
            raise SpecError(
                where_of(f"{section}.{key}"),
                f"{low!r} is above {section}.max_{key[4:]} ({high!r}); need {key} <= max_{key[4:]}",
                source,
            )


_TRAINER_CHECKS: dict[tuple, str | None] = {}


def _trainer_problem(trainer: dict[str, Any]) -> str | None:
    key = frozen(trainer)
    if key not in _TRAINER_CHECKS:
        try:
            TrainerSpec.model_validate(trainer)
            _TRAINER_CHECKS[key] = None
        except ValidationError as exc:
            _TRAINER_CHECKS[key] = format_validation(exc, under=("trainer",)).lstrip()
    return _TRAINER_CHECKS[key]


_RANGE_ERRORS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "multiple_of",
}
