"""The fused training loop (lightning_modules/fused/loop.py) against Lightning's own: each member of
a loop draws its batches, trains, is validated, logged and checkpointed as its own
``pl.Trainer.fit`` does (the same losses, validation metrics, training figures and logger rows,
a checkpoint that loads alone at its step with its Adam state); members leave (dropped, or their
training ended) while the others go on exactly; and the loop's state resumes it exactly. (That it
imports no orchestration: test_module.py, with the rest of the model package.)"""

from __future__ import annotations

import io

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import Logger

from datamodules import CopyTaskDataModule
from lightning_modules import CheckpointError, Seq2SeqModule
from lightning_modules.fused.loop import FusedLoop, LoopMember, LoopSettings

#: 48 sentences in batches of 16: an epoch is 3 steps
DATA = dict(vocab_size=10, max_length=6, train_size=48, val_size=16, test_size=16, batch_size=16)
#: validations in an epoch (step 2), after an epoch's end (4) and at one, the last (6)
SETTINGS = LoopSettings(max_steps=6, val_check_interval=2, log_every_n_steps=2)
#: (seed, K, lr, gradient_clip_val) per member: members of different K and settings
MEMBERS = [(0, 4, 3e-3, 1.0), (1, 2, 1e-2, None), (2, 3, 5e-3, 0.5)]
TOL = dict(rtol=1e-4, atol=1e-5)


def build(member: int) -> tuple[CopyTaskDataModule, Seq2SeqModule]:
    """Member ``member``'s data and model as its own run builds them: seeded, then built."""
    seed, K, lr, _ = MEMBERS[member]
    pl.seed_everything(seed, verbose=False)
    dm = CopyTaskDataModule(seed=seed, **DATA)
    dm.setup("fit")
    module = Seq2SeqModule(
        dm.src_vocab_size,
        dm.tgt_vocab_size,
        attention="memory",
        attention_kwargs={"K": K},
        max_source_len=dm.max_source_len,
        embedding_dim=8,
        hidden_size=12,
        dropout=0.0,
        lr=lr,
    )
    return dm, module


def loop_of(members: list[int], settings: LoopSettings = SETTINGS, state=None) -> FusedLoop:
    parts = {}
    for j in members:
        dm, module = build(j)
        parts[j] = LoopMember(dm, None if state else module, MEMBERS[j][3])
    return FusedLoop(parts, settings, "cpu", state)


def run(loop: FusedLoop, until: int | None = None) -> dict[int, dict]:
    """Train to ``until`` (default: the end); each validation's results by step, and the
    training losses by member."""
    out: dict = {"validations": {}, "losses": {j: [] for j in loop.active}}
    while loop.running and (until is None or loop.step < until):
        due = loop.train_step()
        for pos, j in enumerate(loop.active):
            out["losses"][j].append(float(loop._last["train/loss"][pos]))
        if due:
            out["validations"][loop.step] = loop.validate()
        loop.end_step()
    return out


class Rows(Logger):
    """What Lightning's logger is handed: (step, metrics) rows."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, dict]] = []

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics, step=None) -> None:
        self.rows.append((step, dict(metrics)))


class Record(pl.Callback):
    """Each step's loss and, at each validation, the Trainer's callback metrics."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.validations: dict[int, dict[str, float]] = {}

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_validation_end(self, trainer, module) -> None:
        if not trainer.sanity_checking:
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            self.validations[trainer.global_step] = metrics


def fit_alone(member: int) -> tuple[Record, Rows]:
    """Member ``member`` trained by Lightning, as an unfused trial trains it."""
    dm, module = build(member)
    record, rows = Record(), Rows()
    pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=SETTINGS.max_steps,
        max_epochs=-1,
        val_check_interval=SETTINGS.val_check_interval,
        check_val_every_n_epoch=None,
        log_every_n_steps=SETTINGS.log_every_n_steps,
        gradient_clip_val=MEMBERS[member][3],
        num_sanity_val_steps=0,
        logger=rows,
        callbacks=[record],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    ).fit(module, datamodule=dm)
    return record, rows


def untimed(metrics: dict) -> dict:
    """The metrics without the decode time (a clock's reading, not the model's)."""
    return {k: v for k, v in metrics.items() if k != "val/decode_seconds"}


def assert_rows_close(mine: list, theirs: list) -> None:
    assert [(s, sorted(m)) for s, m in mine] == [(s, sorted(m)) for s, m in theirs]
    for (_, a), (_, b) in zip(mine, theirs):
        for key in untimed(a):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), key


# ---------------------------------------------------------------- each member as Lightning's fit
@pytest.mark.train
def test_each_member_trains_validates_and_logs_as_its_own_lightning_fit(tmp_path):
    """Three members of different K over two epochs' ends: each member's step losses, its
    figures at each validation (Lightning's callback metrics: val/*, train/loss,
    train/loss_epoch), the rows Lightning's logger is handed (their steps and keys exactly, the
    values to float32 tolerance) and its checkpoint are its own fit's."""
    results = run(loop_of([0, 1, 2]))
    assert sorted(results["validations"]) == [2, 4, 6]
    for j in range(3):
        record, rows = fit_alone(j)
        assert results["losses"][j] == pytest.approx(record.losses, rel=1e-4, abs=1e-6)
        mine_rows = []
        for step, by_member in results["validations"].items():
            result = by_member[j]
            theirs = record.validations[step]
            assert result.step == step and result.epoch == (step - 1) // 3
            mine = {**result.metrics, **result.train}
            assert set(mine) == set(theirs), set(mine) ^ set(theirs)
            for key, value in untimed(theirs).items():
                assert mine[key] == pytest.approx(value, rel=1e-4, abs=1e-5), (step, key)
            mine_rows += result.rows
        # then the last epoch's end, at max_steps (FusedLoop.finish hands it back)
        assert_rows_close(mine_rows, rows.rows[: len(mine_rows)])
        assert [sorted(r) for _, r in rows.rows[len(mine_rows) :]] == [
            ["epoch", "train/loss_epoch"]
        ]
    last = results["validations"][6][1]
    path = tmp_path / "member1.ckpt"
    with open(path, "wb") as f:
        f.write(last.checkpoint)
    loaded = Seq2SeqModule.load_from_checkpoint(path, map_location="cpu")
    raw = torch.load(path, weights_only=False)
    assert raw["global_step"] == 6 and raw["epoch"] == 1
    assert raw["optimizer_states"][0]["state"][0]["step"] == 6
    assert loaded.model.decoder.attention.K == 2
    assert all(torch.equal(v, last.module.state_dict()[k]) for k, v in loaded.state_dict().items())
    # the data it trained on, recorded as its own fit records it (a vocabulary check reads it)
    assert raw["data_vocabulary"]["src_vocab_size"] == loaded.hparams.src_vocab_size
    assert loaded.data_vocabulary == raw["data_vocabulary"]
    # no fit's checkpoint: its fit loop's counters are a validation's, so Trainer.fit would
    # have trained it again from step 0 (with its trained weights and Adam state)
    dm, module = build(1)
    trainer = pl.Trainer(max_steps=8, logger=False, enable_checkpointing=False)
    with pytest.raises(CheckpointError, match=r"member checkpoint \(step 6\) .* from step 0"):
        trainer.fit(module, datamodule=dm, ckpt_path=path)
    assert trainer.global_step == 0


def test_the_loop_validates_at_its_interval_and_at_max_steps(tmp_path, monkeypatch):
    """Validations every val_check_interval steps and at max_steps (7 is no multiple of 3),
    each with the rows since the last one: a training row every log_every_n_steps steps, an
    epoch's mean at its end, the validation's own at step - 1; finish hands back the epoch that
    ends with a member's training, and the member leaves at end_step."""
    monkeypatch.chdir(tmp_path)
    settings = LoopSettings(max_steps=7, val_check_interval=3, log_every_n_steps=2)
    loop = loop_of([0, 1], settings)
    results = run(loop)
    assert sorted(results["validations"]) == [3, 6, 7]
    first, second = (results["validations"][step][0] for step in (3, 6))
    val = ["epoch", "val/bleu", "val/decode_seconds", "val/loss", "val/token_acc"]
    assert [(s, sorted(r)) for s, r in first.rows] == [(1, ["epoch", "train/loss_step"]), (2, val)]
    assert first.train["train/loss"] == first.train["train/loss_step"]
    assert "train/loss_epoch" not in first.train  # its epoch ends after the validation
    assert [(s, sorted(r)) for s, r in second.rows] == [
        (2, ["epoch", "train/loss_epoch"]),  # the first epoch's end (3 steps)
        (3, ["epoch", "train/loss_step"]),
        (5, ["epoch", "train/loss_step"]),
        (5, val),
    ]
    assert second.train["train/loss_epoch"] == second.rows[0][1]["train/loss_epoch"]
    assert not loop.running and loop.step == 7
    # a member whose training ends at a validation: its epoch's end, then it leaves
    loop = loop_of([0, 1], LoopSettings(max_steps=5, val_check_interval=5, log_every_n_steps=50))
    while not loop.train_step():
        loop.end_step()
    loop.validate()
    ended = loop.finish([1])
    assert [sorted(r) for _, r in ended[1]] == [["epoch", "train/loss_epoch"]]
    assert ended[1][0][0] == 4 and loop.active == [0, 1]
    loop.end_step()
    assert loop.active == [0] and loop.fused.members == 1


# ---------------------------------------------------------------- members leave, the loop resumes
@pytest.mark.train
def test_a_dropped_member_leaves_the_others_training_exactly():
    """Dropping a member (here the one of the largest K: the padding shrinks) changes nothing for
    the others: their losses and validations are those of the loop that kept it."""
    whole = run(loop_of([0, 1, 2]))
    loop = loop_of([0, 1, 2])
    first = run(loop, until=5)
    loop.drop([0])
    assert loop.active == [1, 2] and loop.fused.decoder.attention.K == 3
    rest = run(loop)
    for j in (1, 2):
        torch.testing.assert_close(
            torch.tensor(first["losses"][j] + rest["losses"][j]),
            torch.tensor(whole["losses"][j]),
            **TOL,
        )
        mine, theirs = rest["validations"][6][j], whole["validations"][6][j]
        assert mine.metrics["val/loss"] == pytest.approx(theirs.metrics["val/loss"], rel=1e-4)


@pytest.mark.train
def test_the_loops_state_resumes_it_exactly():
    """A loop saved after 7 steps (between validations, one step into an epoch, rows pending) and
    rebuilt from its state with fresh datamodules ends exactly where the uninterrupted loop ends:
    losses, figures (the epoch's running mean across the restart), rows, weights, Adam state
    (with dropout: the random states); members the state holds but the new loop is not given are
    dropped."""
    settings = LoopSettings(max_steps=10, val_check_interval=5, log_every_n_steps=3)
    straight = run(loop_of([0, 1, 2], settings))
    loop = loop_of([0, 1, 2], settings)
    run(loop, until=7)
    state = loop.state_dict()
    torch.manual_seed(1234)  # the restore puts the state's random states back
    resumed = loop_of([0, 1, 2], settings, state=state)
    assert resumed.step == 7 and resumed.active == [0, 1, 2]
    rest = run(resumed)
    assert loop_of([0, 2], settings, state=state).active == [0, 2]
    for j in range(3):
        assert rest["losses"][j] == straight["losses"][j][7:]
        mine, theirs = rest["validations"][10][j], straight["validations"][10][j]
        assert untimed(mine.metrics) == untimed(theirs.metrics)
        assert mine.train == theirs.train
        assert [(s, untimed(r)) for s, r in mine.rows] == [(s, untimed(r)) for s, r in theirs.rows]
        weights = mine.module.state_dict()
        assert all(torch.equal(v, weights[k]) for k, v in theirs.module.state_dict().items())
        adam = torch.load(io.BytesIO(mine.checkpoint), weights_only=False)["optimizer_states"]
        alone = torch.load(io.BytesIO(theirs.checkpoint), weights_only=False)["optimizer_states"]
        assert all(
            torch.equal(adam[0]["state"][i]["exp_avg_sq"], s["exp_avg_sq"])
            for i, s in alone[0]["state"].items()
        )


# ---------------------------------------------------------------- students, graphs, imports
def test_a_students_term_is_counted_and_logged_beside_its_loss(tmp_path, monkeypatch):
    """A student (distill_weight > 0) among members without a teacher: its train/distill is
    reported and logged as Lightning logs it (step, epoch), the others' not at all."""
    monkeypatch.chdir(tmp_path)
    dm, _ = build(0)
    torch.manual_seed(9)
    teacher = Seq2SeqModule(
        dm.src_vocab_size, dm.tgt_vocab_size, attention="bahdanau", embedding_dim=8, hidden_size=12
    )
    torch.save(
        {"pytorch-lightning_version": pl.__version__, "epoch": 0, "global_step": 0,
         "state_dict": teacher.state_dict(), "hyper_parameters": dict(teacher.hparams)},
        "teacher.ckpt",
    )  # fmt: skip
    parts = {}
    for j, weight in ((0, 0.5), (1, 0.0)):
        dm, module = build(j)
        hparams = {**dict(module.hparams), "distill_weight": weight}
        if weight:
            hparams["teacher_checkpoint"] = "teacher.ckpt"
        parts[j] = LoopMember(dm, Seq2SeqModule(**hparams))
    loop = FusedLoop(parts, LoopSettings(max_steps=4, val_check_interval=4, log_every_n_steps=1))
    results = run(loop)["validations"][4]  # after the first epoch's end (3 steps)
    student, plain = results[0], results[1]
    assert student.train["train/distill"] > 0
    assert student.train["train/distill_epoch"] > 0
    assert "train/distill_step" in student.rows[0][1]
    assert not any(k.startswith("train/distill") for k in plain.train)
    assert not any(k.startswith("train/distill") for _, r in plain.rows for k in r)


def test_cuda_graphs_on_the_cpu_are_ignored_and_said_so():
    loop = loop_of([0], LoopSettings(max_steps=1, val_check_interval=1, cuda_graphs=True))
    assert loop.graphed is None
    assert loop.graphs_line == (
        "trainer.cuda_graphs ignored: this group trains on the CPU (eager steps)"
    )
    assert loop_of([0]).graphs_line is None


def test_settings_from_a_trainer_section():
    settings = LoopSettings.from_trainer(
        {"max_steps": 30, "val_check_interval": 10, "log_every_n_steps": None,
         "precision": "bf16-mixed", "limit_val_batches": 2, "cuda_graphs": None}
    )  # fmt: skip
    assert settings == LoopSettings(30, 10, 50, "bf16-mixed", 2, False)
    assert settings.fused_precision == "bf16-mixed"
    assert LoopSettings(1, 1, precision="32").fused_precision == "32-true"


def test_a_precision_the_fused_step_has_not_is_refused():
    """16-mixed and 64-true were trained as 32-true without a word (each member's validation in
    its own precision)."""
    for precision in ("16-mixed", "64-true"):
        with pytest.raises(ValueError, match=rf"precision='{precision}': a fused group trains in"):
            LoopSettings(max_steps=4, val_check_interval=2, precision=precision)
    assert LoopSettings(max_steps=4, val_check_interval=2, precision="bf16").fused_precision == (
        "bf16-mixed"
    )
    assert LoopSettings(max_steps=4, val_check_interval=2).fused_precision == "32-true"
