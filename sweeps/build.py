"""From a trial's resolved config to the objects it trains: datamodule and Seq2SeqModule.

Kept free of Ray, Optuna and W&B, and of the spec's validation (and its signature cache), so a
trial's objects can be rebuilt from its resolved sections alone, e.g. from a results row.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from datamodules import datamodule_class

if TYPE_CHECKING:
    import lightning.pytorch as pl


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
    # torch and Lightning (seconds): the launcher builds datamodules only
    from lightning_modules.module import Seq2SeqModule

    module_params = set(inspect.signature(Seq2SeqModule.__init__).parameters) - {"self"}
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


def trainer_kwargs(trainer_cfg: dict[str, Any]) -> dict[str, Any]:
    """Lightning Trainer arguments from the trainer section (the project's own keys left out)."""
    kw = {k: v for k, v in trainer_cfg.items() if v is not None}
    kw.pop("cuda_graphs", None)  # not a Trainer argument: fit_trial applies it to the module
    if isinstance(kw.get("val_check_interval"), int):
        # count validation intervals in global steps across epochs, not batches within one epoch
        kw.setdefault("check_val_every_n_epoch", None)
    if "max_epochs" not in kw:
        kw["max_epochs"] = -1  # max_steps bounds the run
    return kw
