"""One finished trial's checkpoint evaluated on its task's held-out test split: the module's own
test step (``Seq2SeqModule.test_step``: ``test/bleu``, ``test/sacrebleu`` where the data can
detokenize, ``test/loss``, ``test/token_acc``) under a quiet Lightning Trainer. Ray-free: the stage
(:mod:`sweeps.heldout.stage`) runs it inside a Ray task.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_modules.metric_names import TEST_BLEU, TEST_LOSS, TEST_SACREBLEU, TEST_TOKEN_ACC

#: the figures the stage writes into results.csv, in this order
TEST_COLUMNS = [TEST_BLEU, TEST_SACREBLEU, TEST_LOSS, TEST_TOKEN_ACC]


class HeldoutError(RuntimeError):
    """A checkpoint that cannot be evaluated on a test split (none configured, wrong data)."""


def split_name(task: Mapping[str, Any]) -> str:
    """What the test split of a plan's task is, in words, for the report and the console:
    ``newstest2016`` (WMT's test prefix), ``copy test draw`` (the copy task's own held-out draw)."""
    if task.get("name") == "copy":
        return "copy test draw"
    if task.get("test_prefix"):
        return str(task["test_prefix"])
    # torch (seconds): the heldout stage's driver side names splits without it
    from datamodules.wmt17 import PAIR_DEFAULTS

    pair = str(task.get("pair", "en-de"))
    other = next((lang for lang in pair.split("-") if lang != "en"), "de")
    return PAIR_DEFAULTS.get(other, {}).get("test", "test")


def evaluate_checkpoint(
    checkpoint: str | Path, task: Mapping[str, Any], seed: int, device: str = "cpu"
) -> dict[str, float]:
    """Load ``checkpoint``, build the plan's datamodule (``task``, ``seed``: the trial's own) and run
    the module's test step over the whole test split once. Returns the :data:`TEST_COLUMNS` the
    module logged. ``HeldoutError`` when the data has no test split (WMT with ``test_prefix: ""``)."""
    import lightning.pytorch as pl

    # torch and Lightning (seconds): only the Ray task that evaluates loads them
    from sweeps.build import build_datamodule
    from sweeps.timing.checkpoint import check_vocabulary, load_module

    module = load_module(checkpoint)
    dm = build_datamodule(dict(task), seed)
    if "test" not in getattr(dm, "splits", ("test",)):
        raise HeldoutError(
            f"task {task.get('name')!r} has no test split (test_prefix is empty): set task.test_prefix "
            "(e.g. newstest2016) or heldout.enabled: false"
        )
    if getattr(dm, "sizes", {}).get("test", 1) == 0:
        raise HeldoutError(
            "the copy task's test_size is 0: set task.test_size or heldout.enabled: false"
        )
    trainer = pl.Trainer(
        accelerator="gpu" if device.startswith("cuda") else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    dm.prepare_data()
    dm.setup("test")
    check_vocabulary(module, dm)
    (logged,) = trainer.test(module, datamodule=dm, verbose=False)
    return {k: float(logged[k]) for k in TEST_COLUMNS if k in logged}
