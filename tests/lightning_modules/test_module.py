"""Seq2SeqModule: end-to-end training on the copy task, metrics, checkpoints, import hygiene."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from datamodules import CopyTaskDataModule
from lightning_modules import ATTENTION_REGISTRY, CheckpointError, Seq2SeqModule
from lightning_modules.module import (
    METRICS,
    TEST_BLEU,
    TRAIN_LOSS,
    VAL_BLEU,
    VAL_DECODE_SECONDS,
    VAL_LOSS,
    VAL_SACREBLEU,
    VAL_TOKEN_ACC,
    _EvalBuffer,
)

ROOT = Path(__file__).resolve().parents[2]
MECHANISMS = sorted(ATTENTION_REGISTRY)
VAL_METRICS = (VAL_LOSS, VAL_TOKEN_ACC, VAL_BLEU, VAL_DECODE_SECONDS)


def small_copy(**kwargs) -> CopyTaskDataModule:
    settings = dict(
        vocab_size=10, max_length=6, train_size=64, val_size=32, test_size=32, batch_size=16
    )
    settings.update(kwargs)
    return CopyTaskDataModule(**settings)


def module_for(dm: CopyTaskDataModule, attention: str, **kwargs) -> Seq2SeqModule:
    if ATTENTION_REGISTRY[
        attention
    ].equal_sizes:  # luong_dot needs D == H: a unidirectional encoder
        kwargs.setdefault("bidirectional", False)
    return Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention=attention,
        max_source_len=dm.max_source_len,
        **kwargs,
    )


def test_metric_names_match_the_contract():
    assert (TRAIN_LOSS, VAL_LOSS, VAL_TOKEN_ACC, VAL_BLEU, VAL_DECODE_SECONDS, VAL_SACREBLEU) == (
        "train/loss",
        "val/loss",
        "val/token_acc",
        "val/bleu",
        "val/decode_seconds",
        "val/sacrebleu",
    )
    assert METRICS["test"]["bleu"] == TEST_BLEU == "test/bleu"


def test_a_logger_receives_the_training_loss_under_lightnings_step_and_epoch_names(
    tmp_path, quiet_trainer
):
    """docs/CONTRACTS.md: ``train/loss`` in callback_metrics; a logger's ``train/loss_step`` and
    ``train/loss_epoch`` (the docs promised ``train/loss`` to a logger, which never saw it)."""
    import csv

    from lightning.pytorch.loggers import CSVLogger

    dm = small_copy()
    model = module_for(dm, "bahdanau")
    trainer = quiet_trainer(
        max_steps=2, limit_val_batches=0, logger=CSVLogger(tmp_path), log_every_n_steps=1
    )
    trainer.fit(model, datamodule=dm)
    assert TRAIN_LOSS in trainer.callback_metrics
    (metrics,) = tmp_path.glob("**/metrics.csv")
    logged = set(next(csv.reader(metrics.open())))
    assert {f"{TRAIN_LOSS}_step", f"{TRAIN_LOSS}_epoch"} <= logged
    assert TRAIN_LOSS not in logged


@pytest.mark.parametrize("attention", MECHANISMS)
def test_every_mechanism_trains_end_to_end(attention, quiet_trainer):
    dm = small_copy()
    model = module_for(dm, attention)
    trainer = quiet_trainer(fast_dev_run=True)
    trainer.fit(model, datamodule=dm)
    metrics = trainer.callback_metrics
    for name in (TRAIN_LOSS,) + VAL_METRICS:
        assert name in metrics, f"{name} not logged; got {sorted(metrics)}"
        assert torch.isfinite(metrics[name])
    assert 0.0 <= float(metrics[VAL_BLEU]) <= 100.0
    assert 0.0 <= float(metrics[VAL_TOKEN_ACC]) <= 1.0
    assert float(metrics[VAL_DECODE_SECONDS]) > 0.0


def test_beam_validation_and_test_stage(quiet_trainer):
    dm = small_copy()
    model = module_for(dm, "none", val_beam_size=3, length_penalty=0.6)
    trainer = quiet_trainer(fast_dev_run=True)
    trainer.fit(model, datamodule=dm)
    assert VAL_BLEU in trainer.callback_metrics
    results = trainer.test(model, datamodule=dm, verbose=False)[0]
    assert {"test/loss", "test/token_acc", "test/bleu", "test/decode_seconds"} <= set(results)


def test_val_decode_off_logs_no_bleu(quiet_trainer):
    dm = small_copy()
    model = module_for(dm, "none", val_decode=False)
    trainer = quiet_trainer(fast_dev_run=True)
    trainer.fit(model, datamodule=dm)
    assert VAL_LOSS in trainer.callback_metrics and VAL_BLEU not in trainer.callback_metrics


class DetokCopy(CopyTaskDataModule):
    """A copy task that can detokenize (as WMT does), and that ships its own references."""

    def detokenize(self, text: str) -> str:
        return text.replace(" ", "")


def test_detokenized_sacrebleu_and_signature(quiet_trainer):
    dm = DetokCopy(
        vocab_size=10, max_length=6, train_size=64, val_size=32, test_size=32, batch_size=16
    )
    model = module_for(dm, "none")
    trainer = quiet_trainer(fast_dev_run=True)
    trainer.fit(model, datamodule=dm)
    assert VAL_SACREBLEU in trainer.callback_metrics
    assert model.last_bleu_signature is not None and "nrefs:1" in model.last_bleu_signature


def test_a_perfect_copier_scores_bleu_100_and_batch_references_are_used(quiet_trainer):
    """Decoding that returns the sources (a perfect copier) gives val/bleu 100 through the module's
    own sacreBLEU path; a batch's ``references`` key replaces ids_to_text(tgt) as the reference."""
    dm = small_copy()
    model = module_for(dm, "none")
    model.decode = lambda src, src_lengths: src  # a perfect copier: hypotheses == sources
    results = quiet_trainer(fast_dev_run=True).validate(model, datamodule=dm, verbose=False)[0]
    assert results[VAL_BLEU] == pytest.approx(100.0)
    batch = next(iter(dm.val_dataloader()))
    buffer = _EvalBuffer()
    model._decode_into_buffer(batch, buffer)
    assert buffer.hyps == buffer.refs  # references from ids_to_text(tgt) when the key is absent
    batch["references"] = ["x"] * batch["src"].shape[0]
    model._decode_into_buffer(batch, buffer)
    assert buffer.refs[-1] == "x"


def test_configuration_errors_list_the_valid_choices():
    with pytest.raises(ValueError, match="valid presets: .*tiny"):
        Seq2SeqModule(24, 24, attention="none", preset="enormous")
    with pytest.raises(ValueError, match="valid names: .*none"):
        Seq2SeqModule(24, 24, attention="nope")


def test_paper_optimiser_is_the_default():
    """Britz et al.: Adam at 1e-4 (the module default; the sweeps set batch, steps and beam)."""
    model = Seq2SeqModule(24, 24, attention="none")
    optimiser = model.configure_optimizers()
    assert isinstance(optimiser, torch.optim.Adam) and optimiser.param_groups[0]["lr"] == 1e-4


def test_value_ranges_are_declared_in_the_signature():
    """Each setting's range is an annotated_types marker on the constructor, readable by pydantic."""
    import typing

    from pydantic import TypeAdapter, ValidationError

    hints = typing.get_type_hints(Seq2SeqModule.__init__, include_extras=True)
    bad = {"lr": 0.0, "dropout": 1.0, "val_beam_size": 0, "hidden_size": 0, "max_source_len": -1}
    good = {
        "lr": 1e-4,
        "dropout": 0.2,
        "val_beam_size": 10,
        "hidden_size": 256,
        "max_decode_len": None,
    }
    for name, value in bad.items():
        with pytest.raises(ValidationError):
            TypeAdapter(hints[name]).validate_python(value)
    for name, value in good.items():
        assert TypeAdapter(hints[name]).validate_python(value) == value
    from lightning_modules.attention.memory import MemoryAttention

    with pytest.raises(ValidationError):
        TypeAdapter(
            typing.get_type_hints(MemoryAttention.__init__, include_extras=True)["K"]
        ).validate_python(0)


def test_preset_overrides():
    model = Seq2SeqModule(24, 24, attention="none", preset="tiny", hidden_size=40, encoder_layers=2)
    assert model.model.decoder.hidden_size == 40
    assert model.model.encoder.num_layers == 2
    assert model.hparams.hidden_size == 40 and model.hparams.preset == "tiny"


@pytest.mark.parametrize(
    "attention, options",
    [("memory", {"position_encoding": True}), ("luong_location", {})],
    ids=["memory+pe", "luong_location"],
)
def test_sources_longer_than_max_source_len_fail_early(attention, options, quiet_trainer):
    dm = small_copy(max_length=20)
    model = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention=attention,
        attention_kwargs=options,
        max_source_len=10,
    )
    with pytest.raises(ValueError, match="max_source_len=21"):
        quiet_trainer(fast_dev_run=True).fit(model, datamodule=dm)


def test_position_encodings_built_far_longer_than_the_data_are_warned_of(quiet_trainer):
    """Built with the default max_source_len (256) for copy sources of 11 tokens, eq. 10's
    encodings hardly vary over the real positions (a slot's max/min 1.03 against 2.8 built for
    11): a different, weaker model than the paper's, trained without a word."""
    dm = small_copy(max_length=10)
    loose = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="memory",
        attention_kwargs={"K": 4, "position_encoding": True},
    )
    with pytest.warns(UserWarning, match=r"max_source_len=256, but the datamodule's sources are "
                      r"up to 11 tokens .* pass max_source_len=11"):  # fmt: skip
        quiet_trainer(fast_dev_run=True).fit(loose, datamodule=dm)
    fitted = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="memory",
        attention_kwargs={"K": 4, "position_encoding": True},
        max_source_len=dm.max_source_len,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*encodes positions.*")
        quiet_trainer(fast_dev_run=True).fit(fitted, datamodule=dm)


def test_a_limit_set_in_attention_kwargs_is_the_one_the_error_names(quiet_trainer):
    """attention_kwargs' max_source_len wins over the module's: the error told the user to raise
    the module's argument, which changes nothing."""
    dm = small_copy(max_length=20)
    model = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="memory",
        attention_kwargs={"position_encoding": True, "max_source_len": 10},
        max_source_len=21,
    )
    with pytest.raises(ValueError, match=r'attention_kwargs\["max_source_len"\]=21'):
        quiet_trainer(fast_dev_run=True).fit(model, datamodule=dm)


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_a_model_vocabulary_smaller_than_the_datas_is_refused_before_training(side, quiet_trainer):
    """Token ids past the model's embeddings ended in torch's "IndexError: index out of range in
    self", naming neither the argument nor the fix."""
    dm = small_copy()
    sizes = {"src": dm.src_vocab_size, "tgt": dm.tgt_vocab_size, side: 10}
    model = Seq2SeqModule(sizes["src"], sizes["tgt"], attention="none")
    with pytest.raises(ValueError, match=f"{side}_vocab_size={dm.src_vocab_size} \\(the datamod"):
        quiet_trainer(fast_dev_run=True).fit(model, datamodule=dm)
    bigger = Seq2SeqModule(dm.src_vocab_size + 5, dm.tgt_vocab_size + 5, attention="none")
    quiet_trainer(fast_dev_run=True).fit(bigger, datamodule=dm)  # ids it never sees: fine


def test_a_beam_wider_than_the_target_vocabulary_is_refused_when_built():
    """It was accepted, and the first validation stopped on `beam_size` (not the argument given)."""
    with pytest.raises(ValueError, match="val_beam_size=100 is above the target vocabulary size"):
        Seq2SeqModule(24, 24, val_beam_size=100)
    assert Seq2SeqModule(24, 24, val_beam_size=24).hparams.val_beam_size == 24


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bidirectional": "False"},
        {"val_decode": "false"},
        {"val_decode": 1},
        {"val_decode": None},
        {"attention": "memory", "attention_kwargs": {"position_encoding": "false"}},
        {"attention": "memory", "attention_kwargs": {"bias": "False"}},
        {"attention": "key_value", "attention_kwargs": {"scaled": "no"}},
    ],
    ids=str,
)
def test_a_bool_option_given_anything_but_true_or_false_is_refused(kwargs):
    """bidirectional="False", val_decode="false", position_encoding="false" (from argparse, an env
    var, a hand-written config) were truthy: they built the model with the option switched on."""
    inner = "attention_kwargs" in kwargs
    option, value = next(iter((kwargs["attention_kwargs"] if inner else kwargs).items()))
    with pytest.raises(ValueError, match=rf"{option} must be True or False, got {value!r}"):
        Seq2SeqModule(24, 24, **kwargs)
    for good in (True, False):  # the bools themselves keep working, stored as given
        given = {**kwargs, "attention_kwargs": {option: good}} if inner else {option: good}
        hparams = Seq2SeqModule(24, 24, **given).hparams
        assert (hparams.attention_kwargs if inner else hparams)[option] is good


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lr": None}, r"lr must be a number > 0, got None; leave it out for the default"),
        ({"max_source_len": True}, r"max_source_len must be a whole number >= 1, got True"),
        ({"attention_kwargs": {"K": None}}, r"K must be a whole number >= 1, got None; leave"),
        ({"attention_kwargs": {"K": True}}, r"K must be a whole number >= 1, got True"),
    ],
    ids=str,
)
def test_a_number_option_given_none_or_a_bool_is_refused_naming_it(kwargs, message):
    """K=None or K=True reached nn.Linear: "empty(): argument 'size' (position 1) must be tuple of
    ints", which names neither K nor the fix."""
    with pytest.raises(ValueError, match=message):
        Seq2SeqModule(24, 24, **{"attention": "memory", **kwargs})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"bos_id": 99}, r"bos_id=99 is not an id of the tgt vocabulary \(tgt_vocab_size=24"),
        ({"eos_id": 30}, r"eos_id=30 is not an id of the src vocabulary \(src_vocab_size=24"),
        ({"pad_id": 24}, r"pad_id=24 is not an id of the src vocabulary"),
        ({"pad_id": 2, "eos_id": 2}, r"pad_id and eos_id are both 2: .* give them different"),
        ({"pad_id": 1, "bos_id": 1}, r"pad_id and bos_id are both 1: .* give them different"),
    ],
    ids=str,
)
def test_special_ids_outside_the_vocabulary_or_shared_with_padding_are_refused(kwargs, message):
    """eos_id=30 with a vocabulary of 24 was accepted (the model could never emit EOS), bos_id=99
    ended in torch's bare IndexError at the first step, and pad_id == eos_id left EOS out of the
    loss."""
    with pytest.raises(ValueError, match=message):
        Seq2SeqModule(24, 24, **kwargs)
    assert Seq2SeqModule(24, 24, bos_id=2, eos_id=2).hparams.bos_id == 2  # BOS may be EOS


@pytest.mark.parametrize("kwargs", [{}, {"attention_kwargs": [("K", 4)]}], ids=str)
def test_attention_kwargs_that_are_not_a_dict_are_refused_naming_them(kwargs):
    """Seq2SeqModule(V, V, "memory", 16), K given positionally, said "'int' object is not
    iterable"; a list of pairs was accepted and kept as a list in the hparams."""
    args = (24, 24, "memory") + (() if kwargs else (16,))
    with pytest.raises(ValueError, match=r"attention_kwargs must be a dict .*, got (16|\[)"):
        Seq2SeqModule(*args, **kwargs)


@pytest.mark.parametrize("side", ["src", "tgt"])
def test_ids_past_the_vocabulary_from_a_plain_dataloader_are_named(side, quiet_trainer):
    """Without a datamodule, setup's check has no vocabulary size to compare: a too-small model
    vocabulary gave torch's bare "IndexError: index out of range in self"."""
    dm = small_copy()
    dm.setup("fit")
    sizes = {"src": dm.src_vocab_size, "tgt": dm.tgt_vocab_size, side: 10}
    model = Seq2SeqModule(sizes["src"], sizes["tgt"], attention="none")
    with pytest.raises(
        ValueError, match=rf"{side} ids go up to \d+ but .* {side}_vocab_size=10 \(ids 0 to 9\)"
    ):
        quiet_trainer(max_steps=2).fit(model, train_dataloaders=dm.train_dataloader())
    with pytest.raises(ValueError, match=rf"pass {side}_vocab_size=\d+ or more"):
        quiet_trainer().validate(model, dataloaders=dm.val_dataloader())


def test_decode_in_training_mode_decodes_as_in_eval_and_keeps_the_mode():
    """A module left in training mode (as built) decoded with dropout and monotonic attention's
    noise: the same batch gave other tokens each time."""
    dm = small_copy()
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    torch.manual_seed(0)
    model = Seq2SeqModule(dm.src_vocab_size, dm.tgt_vocab_size, attention="monotonic", dropout=0.3)
    model.model.encoder.eval()  # a part the user froze stays as it was
    trained = [model.decode(batch["src"], batch["src_lengths"]) for _ in range(2)]
    assert model.training and not model.model.encoder.training
    model.eval()
    assert torch.equal(trained[0], trained[1])
    assert torch.equal(trained[0], model.decode(batch["src"], batch["src_lengths"]))


def test_memory_attention_without_position_encodings_takes_any_source_length(quiet_trainer):
    """max_source_len is S of the position encodings: memory attention without them was refused
    sources longer than it, though nothing in it depends on the length."""
    dm = small_copy(max_length=20)
    model = Seq2SeqModule(
        dm.src_vocab_size, dm.tgt_vocab_size, attention="memory", max_source_len=10
    )
    assert model.model.attention.longest_source is None
    quiet_trainer(fast_dev_run=True).fit(model, datamodule=dm)


@pytest.mark.parametrize("beam", [1, 3])
def test_decode_returns_an_ordinary_tensor(beam):
    """Seq2SeqModule.decode handed back the decoders' inference tensors: masking them in place
    or feeding them to a training step raised "Inplace update to inference tensor"."""
    dm = small_copy()
    dm.setup("fit")
    model = module_for(dm, "bahdanau")
    model.hparams.val_beam_size = beam
    batch = next(iter(dm.val_dataloader()))
    tokens = model.eval().decode(batch["src"], batch["src_lengths"])
    assert not tokens.is_inference()
    tokens.masked_fill_(tokens == 0, 1)  # in place, as a user's post-processing does


def test_attention_heatmaps_data():
    attention = "memory" if "memory" in ATTENTION_REGISTRY else "none"
    kwargs = {"attention_kwargs": {"K": 4}} if attention == "memory" else {}
    dm = small_copy()
    dm.setup("fit")
    model = module_for(dm, attention, **kwargs)
    batch = next(iter(dm.val_dataloader()))
    maps = model.attention_heatmaps(batch, max_items=3)
    assert len(maps) == 3
    for i, item in enumerate(maps):
        S, T = len(item["source"]), len(item["output"])
        assert S == int(batch["src_lengths"][i]) and item["source"][-1] == "</s>"
        assert item["weights"].shape == (T, S)
        if attention == "memory":
            assert item["alpha"].shape == (S, 4) and item["beta"].shape == (T, 4)
    assert model.training  # restored


#: the packages a user's import of ours must not pull in (torchmetrics, which Lightning imports,
#: itself loads matplotlib when it is installed: that is allowed)
BANNED = ("ray", "optuna", "wandb", "matplotlib", "sweeps")


@pytest.mark.train
def test_a_fresh_process_imports_no_orchestration_or_plotting_and_loads_a_checkpoint(
    tmp_path, quiet_trainer
):
    """One fresh process (each costs seconds of imports): our packages (the module, the data
    modules, the fused training loop) import none of ray/optuna/wandb/matplotlib, nor the
    orchestration (sweeps/); then ``load_from_checkpoint`` gives the saved model's outputs."""
    attention = "memory" if "memory" in ATTENTION_REGISTRY else "none"
    kwargs = {"attention_kwargs": {"K": 4}} if attention == "memory" else {}
    dm = small_copy()
    model = module_for(dm, attention, lr=3e-3, **kwargs)
    trainer = quiet_trainer(fast_dev_run=True)
    trainer.fit(model, datamodule=dm)
    ckpt = tmp_path / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    batch = next(iter(dm.val_dataloader()))
    torch.save({k: batch[k] for k in ("src", "src_lengths", "tgt")}, tmp_path / "batch.pt")
    model.eval()
    with torch.no_grad():
        expected = model(batch["src"], batch["src_lengths"], model.model.shift_target(batch["tgt"]))
    expected_tokens, _ = model.model.greedy_decode(batch["src"], batch["src_lengths"], max_len=8)
    script = textwrap.dedent(
        f"""
        import sys
        banned = set({BANNED!r})
        loaded = lambda: {{m.split(".")[0] for m in sys.modules}} & banned
        import lightning.pytorch
        before = loaded()
        from lightning_modules import Seq2SeqModule
        import datamodules
        import lightning_modules.fused.loop
        print(",".join(sorted(loaded() - before)) + "|" + ",".join(sorted(before - {{"matplotlib"}})))
        import torch
        torch.set_num_threads(1)
        model = Seq2SeqModule.load_from_checkpoint({str(ckpt)!r}, map_location="cpu").eval()
        batch = torch.load({str(tmp_path / "batch.pt")!r})
        with torch.no_grad():
            logits = model(batch["src"], batch["src_lengths"], model.model.shift_target(batch["tgt"]))
        tokens, _ = model.model.greedy_decode(batch["src"], batch["src_lengths"], max_len=8)
        torch.save({{"logits": logits, "tokens": tokens, "hparams": dict(model.hparams)}}, {str(tmp_path / "out.pt")!r})
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    added, by_lightning = result.stdout.strip().split("|")
    assert added == "", f"our packages imported: {added}"
    assert by_lightning == "", f"lightning itself imported: {by_lightning}"
    out = torch.load(tmp_path / "out.pt")
    torch.testing.assert_close(out["logits"], expected, rtol=0, atol=1e-6)
    assert torch.equal(out["tokens"], expected_tokens)
    assert (
        out["hparams"]["attention"] == attention
        and out["hparams"]["max_source_len"] == dm.max_source_len
    )


def test_no_source_line_of_ours_imports_orchestration_or_plotting():
    """The import check above sees what one process loads; the source says it of every file."""
    for package in ("lightning_modules", "datamodules"):
        for path in (ROOT / package).rglob("*.py"):
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:1] in (["import"], ["from"]) and len(words) > 1:
                    top = words[1].split(".")[0]
                    assert top not in {*BANNED, "pytorch_lightning"} - {"sweeps"}, f"{path}: {line}"


class _StopAtBleu(pl.Callback):
    """Stop training once validation BLEU reaches a target; remember the best value."""

    def __init__(self, target: float) -> None:
        self.target = target
        self.best = 0.0

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or VAL_BLEU not in trainer.callback_metrics:
            return
        self.best = max(self.best, float(trainer.callback_metrics[VAL_BLEU]))
        if self.best >= self.target:
            trainer.should_stop = True


@pytest.mark.slow
@pytest.mark.parametrize(
    "attention,attention_kwargs,max_steps",
    [("memory", {"K": 16}, 5000), ("bahdanau", None, 3000)],
)
def test_copy_task_reaches_bleu_95(attention, attention_kwargs, max_steps, quiet_trainer):
    """Memory attention (K=16) and Bahdanau learn to copy sequences of up to 10 symbols (CPU, minutes)."""
    if attention not in ATTENTION_REGISTRY:
        pytest.skip(f"{attention} is not registered")
    pl.seed_everything(0)
    dm = CopyTaskDataModule(
        vocab_size=20, max_length=10, train_size=100_000, val_size=1000, batch_size=64
    )
    model = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention=attention,
        attention_kwargs=attention_kwargs,
        preset="tiny",
        lr=3e-3,
        max_source_len=dm.max_source_len,
    )
    stopper = _StopAtBleu(target=98.0)
    trainer = quiet_trainer(
        max_steps=max_steps, val_check_interval=500, num_sanity_val_steps=0, callbacks=[stopper]
    )
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    bleu = trainer.validate(model, datamodule=dm, verbose=False)[0][VAL_BLEU]
    minutes = (time.perf_counter() - start) / 60
    print(f"{attention}: val/bleu={bleu:.2f} after {trainer.global_step} steps, {minutes:.1f} min")
    assert bleu >= 95.0


def test_val_loss_and_token_acc_are_per_token_means_whatever_the_eval_batching(quiet_trainer):
    """Each batch's token mean was logged weighted by its sentence count, so the epoch figure
    changed with the eval batch size (batches of short sentences counted for more)."""
    torch.manual_seed(0)
    model = Seq2SeqModule(14, 14, attention="bahdanau", val_decode=False).eval()
    results = []
    for batch_size in (32, 3, 1):  # one batch; uneven batches; one sentence each
        dm = small_copy(min_length=0, max_length=6, batch_size=batch_size)
        (logged,) = quiet_trainer().validate(model, datamodule=dm, verbose=False)
        results.append((logged[VAL_LOSS], logged[VAL_TOKEN_ACC]))

    dm = small_copy(min_length=0, max_length=6)
    dm.setup("fit")
    summed, correct, tokens = 0.0, 0, 0
    with torch.no_grad():
        for batch in dm.val_dataloader():
            tgt = batch["tgt"]
            logits = model(batch["src"], batch["src_lengths"], model.model.shift_target(tgt))
            real = tgt != model.hparams.pad_id
            summed += float(
                torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none"
                )[real.reshape(-1)].sum()
            )
            correct += int(((logits.argmax(-1) == tgt) & real).sum())
            tokens += int(real.sum())
    assert len(set(dm.datasets["val"].lengths().tolist())) > 1  # sentences of unequal lengths
    for loss, acc in results:
        assert loss == pytest.approx(summed / tokens, rel=1e-5)
        assert acc == pytest.approx(correct / tokens, rel=1e-5)


@pytest.mark.parametrize("beam", [1, 3])
def test_trainer_predict_decodes_the_datamodules_test_split_as_validation_does(beam, quiet_trainer):
    """There was no predict_step (Lightning passed the batch dict to forward: an unrelated
    TypeError) and no predict_dataloader."""
    torch.manual_seed(0)
    dm = small_copy(batch_size=8)
    model = module_for(dm, "memory", attention_kwargs={"K": 4}, val_beam_size=beam)
    predicted = quiet_trainer().predict(model, datamodule=dm)

    batches = list(dm.test_dataloader())
    assert len(predicted) == len(batches)
    for out, batch in zip(predicted, batches):
        expected = model.decode(batch["src"], batch["src_lengths"])
        assert torch.equal(out["hypotheses"], expected)
        assert out["text"] == [dm.ids_to_text(row) for row in expected.tolist()]
    # a plain dataloader works too (and ids_to_text falls back to the module's own)
    (first, *_) = quiet_trainer().predict(model, dataloaders=dm.val_dataloader())
    batch = next(iter(dm.val_dataloader()))
    assert torch.equal(first["hypotheses"], model.decode(batch["src"], batch["src_lengths"]))


def test_without_a_datamodule_ids_to_text_drops_what_the_datamodules_drop():
    """BLEU and predict text must not depend on whether a datamodule is attached: the module's
    own ids_to_text drops padding and BOS as the copy task's and WMT'17's do, and keeps an unknown
    token (3) as they do. With ids other than the project's, its own padding and BOS."""
    from datamodules.vocab import ids_to_text

    ids = [7, 3, 1, 5, 0, 2, 9]
    model = Seq2SeqModule(24, 24)
    assert model.ids_to_text(ids) == ids_to_text(ids) == "7 3 5"
    other = Seq2SeqModule(24, 24, pad_id=3, bos_id=4, eos_id=5)
    assert other.ids_to_text([7, 0, 1, 2, 3, 4, 5, 9]) == "7 0 1 2"


def _trained_checkpoint(tmp_path, quiet_trainer, drop_record: bool = False) -> Path:
    dm = small_copy()
    model = Seq2SeqModule(dm.src_vocab_size, dm.tgt_vocab_size, attention="none")
    trainer = quiet_trainer(max_steps=2, limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    path = tmp_path / "trained.ckpt"
    trainer.save_checkpoint(path)
    if drop_record:  # as a checkpoint written before the record existed
        checkpoint = torch.load(path, weights_only=False)
        checkpoint.pop("data_vocabulary", None)
        torch.save(checkpoint, path)
    return path


@pytest.mark.parametrize("drop_record", [False, True], ids=["recorded", "older-checkpoint"])
@pytest.mark.parametrize("other_vocab", [8, 12], ids=["smaller", "larger"])
def test_a_trained_model_refuses_data_of_another_vocabulary_pointing_to_its_own(
    tmp_path, quiet_trainer, other_vocab, drop_record
):
    """A loaded model validated under a smaller vocabulary ran silently, every id meaning another
    symbol; under a larger one the error said to rebuild the model (losing its weights)."""
    path = _trained_checkpoint(tmp_path, quiet_trainer, drop_record)
    loaded = Seq2SeqModule.load_from_checkpoint(path)
    if not drop_record:
        assert loaded.data_vocabulary == {
            "src_vocab_size": 14,
            "tgt_vocab_size": 14,
            "vocabulary_id": None,
        }
    with pytest.raises(
        ValueError,
        match=r"does not match the model's trained weights: its src vocabulary has "
        rf"{other_vocab + 4} ids, the data the model was trained on had 14\. .*"
        r"CopyTaskDataModule\.load_from_checkpoint\(path\)",
    ):
        quiet_trainer().validate(loaded, datamodule=small_copy(vocab_size=other_vocab))
    again = CopyTaskDataModule.load_from_checkpoint(path)  # the fix the message gives
    quiet_trainer().validate(loaded, datamodule=again, verbose=False)


@pytest.mark.parametrize("attention", MECHANISMS)
def test_every_mechanism_s_module_pickles_as_ddp_spawn_sends_it(attention):
    """Lightning's ``ddp_spawn`` (and any multiprocessing hand-over) pickles the module: memory
    attention's default decoder scoring was a lambda, and the paper's model did not pickle."""
    import pickle

    dm = small_copy()
    for options in [{}, {"decoder_scoring": "sigmoid"}] if attention == "memory" else [{}]:
        module = module_for(dm, attention, preset="tiny", attention_kwargs=options)
        again = pickle.loads(pickle.dumps(module))
        assert type(again) is Seq2SeqModule and dict(again.hparams) == dict(module.hparams)
        mine, theirs = module.state_dict(), again.state_dict()
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_an_older_luong_location_checkpoint_with_a_bias_says_how_to_load(tmp_path, quiet_trainer):
    """Versions up to 0.1.0 gave luong_location's W_a a bias; this one builds it without (Luong's
    eq. 8): such weights are refused with the one argument that loads them, which does."""
    model = Seq2SeqModule(20, 20, attention="luong_location", attention_kwargs={"bias": True},
                          max_source_len=8, preset="tiny")  # fmt: skip
    trainer = quiet_trainer(max_steps=0)
    trainer.strategy.connect(model)
    path = tmp_path / "old.ckpt"
    trainer.save_checkpoint(path)
    old = torch.load(path, weights_only=False)
    old["hyper_parameters"]["attention_kwargs"] = {}  # as 0.1.0 wrote it: no bias option
    torch.save(old, path)
    with pytest.raises(CheckpointError, match=r"load_from_checkpoint\(path, attention_kwargs="):
        Seq2SeqModule.load_from_checkpoint(path)
    loaded = Seq2SeqModule.load_from_checkpoint(path, attention_kwargs={"bias": True})
    bias = "model.decoder.attention.W_a.bias"
    assert torch.equal(loaded.state_dict()[bias], old["state_dict"][bias])
    # its other options stored there are named too: the override replaces them all
    old["hyper_parameters"]["attention_kwargs"] = {"max_source_len": 8}
    old["hyper_parameters"]["max_source_len"] = 30
    torch.save(old, path)
    wanted = {"max_source_len": 8, "bias": True}
    with pytest.raises(CheckpointError, match=re.escape(f"attention_kwargs={wanted!r})")):
        Seq2SeqModule.load_from_checkpoint(path)
    loaded = Seq2SeqModule.load_from_checkpoint(path, attention_kwargs=wanted)
    assert torch.equal(loaded.state_dict()[bias], old["state_dict"][bias])


def test_weights_trained_for_other_source_positions_are_refused(tmp_path, quiet_trainer):
    """Memory attention's position encodings (eq. 10, S = max_source_len) are no weights:
    load_from_checkpoint(path, max_source_len=13), which setup's advice for longer data named,
    loaded the trained weights as another model without a word. It is refused; a trained model
    given longer sources is told to filter them, not to build a larger max_source_len."""
    model = Seq2SeqModule(
        14, 14, attention="memory", preset="tiny", max_source_len=9,
        attention_kwargs={"K": 4, "position_encoding": True},
    )  # fmt: skip
    trainer = quiet_trainer(max_steps=0)
    trainer.strategy.connect(model)
    path = tmp_path / "pe.ckpt"
    trainer.save_checkpoint(path)
    with pytest.raises(CheckpointError, match="over max_source_len=9 source positions, and this"):
        Seq2SeqModule.load_from_checkpoint(path, max_source_len=13)
    loaded = Seq2SeqModule.load_from_checkpoint(path)
    longer = CopyTaskDataModule(vocab_size=10, max_length=12, train_size=32, val_size=8)
    with pytest.raises(ValueError, match="filter longer sentences out of the data") as err:
        quiet_trainer(max_steps=1).validate(loaded, datamodule=longer)
    assert "pass max_source_len" not in str(err.value)


def test_attention_heatmaps_put_each_submodule_back_in_its_own_mode():
    dm = small_copy()
    dm.setup("fit")
    model = module_for(dm, "bahdanau")
    model.model.encoder.eval()  # a frozen encoder inside a module in training mode
    batch = next(iter(dm.val_dataloader()))
    model.attention_heatmaps(batch, max_items=1)
    assert model.training and not model.model.encoder.training
