"""From a trial's resolved config to the objects it trains: datamodule and Seq2SeqModule.

Kept free of Ray, Optuna and W&B so the spec can be validated (and a trial's objects rebuilt, e.g.
from a results row) without the orchestration stack.
"""
from __future__ import annotations

import functools
import inspect
import typing
from typing import Any

import lightning.pytorch as pl


def datamodule_class(task_name: str) -> type[pl.LightningDataModule]:
    if task_name == "copy":
        from datamodules.copy_task import CopyTaskDataModule

        return CopyTaskDataModule
    if task_name == "wmt17":
        from datamodules.wmt17 import WMT17DataModule

        return WMT17DataModule
    raise ValueError(f"unknown task {task_name!r}; valid: copy, wmt17")


@functools.cache
def datamodule_param_types(task_name: str) -> dict[str, Any]:
    """The task's datamodule settings: name -> annotation (with its ``Annotated`` range markers).
    Cached (as are the two below): a large grid validates thousands of cells against the same
    signatures; callers must not mutate it."""
    return {k: ann for k, (ann, _) in _params(datamodule_class(task_name).__init__).items()}


@functools.cache
def module_signature_params() -> dict[str, tuple[Any, Any]]:
    """Seq2SeqModule's constructor arguments: name -> (annotation, default)."""
    from lightning_modules.module import Seq2SeqModule

    return _params(Seq2SeqModule.__init__)


@functools.cache
def attention_param_types(attention: str) -> dict[str, Any]:
    """The options of one attention mechanism: name -> annotation. Raises ValueError if unknown."""
    from lightning_modules.attention import ATTENTION_REGISTRY, attention_options

    attention_options(attention)  # raises listing the valid names
    params = _params(ATTENTION_REGISTRY[attention].__init__)
    return {k: ann for k, (ann, _) in params.items() if k not in ("query_dim", "memory_dim")}


def _params(fn) -> dict[str, tuple[Any, Any]]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)  # keep Annotated range markers
    except Exception:
        hints = {}
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        out[name] = (hints.get(name, Any), None if p.default is inspect.Parameter.empty else p.default)
    return out


def build_datamodule(task: dict[str, Any], seed: int) -> pl.LightningDataModule:
    """Instantiate the task's datamodule; the trial seed seeds generated data unless the spec fixes it."""
    kwargs = {k: v for k, v in task.items() if k != "name"}
    cls = datamodule_class(task["name"])
    if "seed" in inspect.signature(cls.__init__).parameters:
        kwargs.setdefault("seed", seed)
    return cls(**kwargs)


def build_module(model: dict[str, Any], dm: pl.LightningDataModule):
    """Seq2SeqModule from the model section: module arguments go straight in, everything else is an
    option of the chosen attention mechanism (``attention_kwargs``). ``dm`` must be set up."""
    from lightning_modules.module import Seq2SeqModule

    module_params = module_signature_params()
    kwargs = {k: v for k, v in model.items() if k in module_params}
    attention_kwargs = {k: v for k, v in model.items() if k not in module_params}
    kwargs.update(
        src_vocab_size=dm.src_vocab_size,
        tgt_vocab_size=dm.tgt_vocab_size,
        pad_id=dm.pad_id,
        bos_id=dm.bos_id,
        eos_id=dm.eos_id,
        attention_kwargs=attention_kwargs or None,
    )
    if "max_source_len" not in model and getattr(dm, "max_source_len", None):
        kwargs["max_source_len"] = int(dm.max_source_len)
    return Seq2SeqModule(**kwargs)


def prepare_data(tasks: list[dict[str, Any]], seed: int = 0) -> None:
    """Run each distinct task's ``prepare_data`` once, in the driver, before any trial starts:
    WMT'17 trains its shared BPE model and token caches here, never once per trial. A missing or
    malformed data file fails here, before Ray schedules anything."""
    seen = set()
    for task in tasks:
        key = repr(sorted(task.items()))
        if key in seen or task["name"] == "copy":  # generated in memory: nothing to prepare
            continue
        seen.add(key)
        build_datamodule(task, seed).prepare_data()
