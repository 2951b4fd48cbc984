"""What only the model and data packages can answer, asked by the signature cache
(:mod:`sweeps.spec.signatures`) on a question it has not seen: their constructor signatures,
whether a mechanism takes some options, the longest source it covers, its cost per decoder step,
whether a model has a fused form, whether a mechanism can distil. Importing this module imports
torch and Lightning, which is why the cache imports it only on a miss: a launch or a
``--dry-run`` of a sweep it has seen never does."""

from __future__ import annotations

import inspect
import typing
from typing import Any

from datamodules import TASKS as TASK_CLASSES
from datamodules import datamodule_class
from lightning_modules.attention import ATTENTION_REGISTRY, build_attention, headline_options
from lightning_modules.attention import step_cost as mechanism_cost
from lightning_modules.distill import check_distillation
from lightning_modules.fused import unfusable_reason
from lightning_modules.module import Seq2SeqModule


def read_packages() -> dict[str, Any]:
    """The datamodules', Seq2SeqModule's and every mechanism's constructor settings, and the
    mechanisms' headline options, read from the packages."""
    datamodules: dict[str, Any] = {}
    for task in TASK_CLASSES:
        try:
            datamodules[task] = params(datamodule_class(task).__init__)
        except ImportError as exc:  # a task whose extra dependencies are not installed
            datamodules[task] = f"{type(exc).__name__}: {exc}"
    attention = {}
    for name, cls in ATTENTION_REGISTRY.items():
        attention[name] = {
            k: v for k, v in params(cls.__init__).items() if k not in ("query_dim", "memory_dim")
        }
    headlines = {
        name: (option, meaning) for name, (option, meaning, _) in headline_options().items()
    }
    return {
        "datamodules": datamodules,
        "module": params(Seq2SeqModule.__init__),
        "attention": attention,
        "headlines": headlines,
    }


def attention_problem(attention: str, options: dict[str, Any], dims: tuple[int, int]) -> str | None:
    """The mechanism's own refusal of ``options`` at (query, memory) sizes ``dims``, or None."""
    try:
        build_attention(attention, query_dim=dims[0], memory_dim=dims[1], **options)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def longest_source(attention: str, options: dict[str, Any], dims: tuple[int, int]) -> int | None:
    """The mechanism's ``longest_source`` as built with ``options``, or None (any length, or it
    does not build)."""
    try:
        built = build_attention(attention, query_dim=dims[0], memory_dim=dims[1], **options)
    except (ValueError, TypeError):
        return None
    return built.longest_source


def step_cost(attention: str, options: dict[str, Any]) -> float:
    """The mechanism's cost per decoder step with ``options``."""
    return mechanism_cost(attention, options)


def fusion_problem(model: dict[str, Any], module_params: dict[str, Any]) -> str | None:
    """Why a model section has no fused form (the fused model's own answer), or None."""
    args = {k: v for k, v in model.items() if k in module_params}
    args["attention_kwargs"] = {k: v for k, v in model.items() if k not in module_params} or None
    return unfusable_reason({**args, "src_vocab_size": 1, "tgt_vocab_size": 1})


def distill_problem(attention: str, weight: float) -> str | None:
    """The model's own refusal of a mechanism's students at ``weight``, or None."""
    try:
        check_distillation(attention, weight, "the teacher cell's", "none")
    except ValueError as exc:
        return str(exc)
    return None


def params(fn) -> dict[str, tuple[Any, Any]]:
    """A constructor's keyword settings: name -> (annotation with its ``Annotated`` range markers,
    default or None)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        out[name] = (
            hints.get(name, Any),
            None if p.default is inspect.Parameter.empty else p.default,
        )
    return out
