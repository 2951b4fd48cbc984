"""The fused training loop: Lightning's fit loop for M members of one :class:`FusedSeq2Seq`, each
member validated, logged and checkpointed as its own ``pl.Trainer(...).fit(module, datamodule)``
would validate, log and checkpoint it::

    from lightning_modules.fused.loop import FusedLoop, LoopMember, LoopSettings

    members = {}
    for j, seed in enumerate((0, 1, 2)):
        pl.seed_everything(seed)                   # each member as its own run builds it
        dm = CopyTaskDataModule(max_length=10, seed=seed); dm.setup("fit")
        members[j] = LoopMember(dm, Seq2SeqModule(...), gradient_clip_val=1.0)
    loop = FusedLoop(members, LoopSettings(max_steps=2000, val_check_interval=200))
    while loop.running:
        if loop.train_step():                      # one step of every member; a validation due
            for j, result in loop.validate().items():
                print(j, result.metrics["val/bleu"])   # and result.checkpoint: Lightning's bytes
        loop.end_step()

What it does as Lightning does, member by member:

- **Batches**: each member's own datamodule's train loader (a
  :class:`~datamodules.resumable.ResumableDataLoader`), epoch after epoch, the order a function
  of the member's seed and the epoch (:class:`Batches`); its position is part of the loop's state.
- **Steps**: :meth:`FusedSeq2Seq.train_step` (each member's loss, its own gradient clipping, its
  own Adam), or on a CUDA device with ``cuda_graphs`` the same step captured and replayed
  (:class:`~lightning_modules.fused.graphs.GraphedFusedSteps`).
- **Validation** every ``val_check_interval`` steps and at ``max_steps``: each member as a plain
  :class:`~lightning_modules.module.Seq2SeqModule` (:meth:`FusedSeq2Seq.member_module`) through
  ``pl.Trainer.validate`` (so ``val/bleu`` and the rest come from the module's own code), with
  the training figures Lightning would hold then (``train/loss`` of the last step,
  ``train/loss_epoch`` of the last finished epoch; a student's ``train/distill`` the same), the
  rows Lightning's logger would have been handed since the last validation (every
  ``log_every_n_steps`` steps, at each epoch's end, the validation's own), and its checkpoint in
  Lightning's format (``Seq2SeqModule.load_from_checkpoint`` loads it as a plain model; the
  training step, epoch and the member's Adam state written in). It is no fit's checkpoint:
  ``Trainer.fit(ckpt_path=...)`` refuses it (its fit loop's counters are a validation's, and
  would start the fit again at step 0); the group resumes from its own :meth:`FusedLoop.state_dict`.
- **State**: :meth:`FusedLoop.state_dict` is the whole loop (the fused model with every member's
  Adam state, each loader's position, what each member's figures have counted so far, the
  global random states); a loop built from it goes on exactly where the saved one was.

A member leaves with :meth:`FusedLoop.drop` (its caller stopped it) or :meth:`FusedLoop.finish`
(its training ends at this validation): the fused model keeps the others, its padding shrinking
to the members left. The loop imports neither Ray nor any sweep code: a sweep's fused group
(``sweeps.trial.fused.group``) drives it and publishes what it hands back.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import torch

from datamodules.resumable import RngStateCallback

from ..metric_names import TRAIN_DISTILL, TRAIN_LOSS
from ..module import FUSED_MEMBER, Seq2SeqModule, data_vocabulary
from .graphs import GraphedFusedSteps, graphs_line
from .model import FusedSeq2Seq

#: one row handed to Lightning's logger: (its step, {metric: value})
Row = tuple[int, dict[str, float]]

#: the file name Lightning's checkpoint bytes are written under (a zip archive's folder is named
#: after it)
CHECKPOINT_NAME = "checkpoint.ckpt"


@dataclass(frozen=True)
class LoopSettings:
    """The Trainer arguments the fused loop honours, the group's (equal for every member; each
    member's ``gradient_clip_val`` is its own, :class:`LoopMember`).

    Args:
        max_steps: training steps of every member.
        val_check_interval: steps between validations (a whole number of steps, counted across
            epochs as ``check_val_every_n_epoch=None`` counts them).
        log_every_n_steps: steps between the logged training rows (Lightning's default 50).
        precision: Lightning's precision name (``"32-true"``, ``"bf16-mixed"``; None: the
            Trainer's default): the fused step's autocast, and each member's validation's.
        limit_val_batches: as Lightning's (None: the whole validation set).
        cuda_graphs: capture the fused step as CUDA graphs on a CUDA device (ignored, with a
            line saying so, elsewhere).
    """

    max_steps: int
    val_check_interval: int
    log_every_n_steps: int = 50
    precision: str | None = None
    limit_val_batches: int | float | None = None
    cuda_graphs: bool = False

    @classmethod
    def from_trainer(cls, trainer: Mapping[str, Any]) -> LoopSettings:
        """From Trainer keyword arguments (a sweep's trainer section: unset keys None)."""
        return cls(
            max_steps=int(trainer.get("max_steps") or 0),
            val_check_interval=int(trainer["val_check_interval"]),
            log_every_n_steps=int(trainer.get("log_every_n_steps") or 50),
            precision=None if trainer.get("precision") is None else str(trainer["precision"]),
            limit_val_batches=trainer.get("limit_val_batches"),
            cuda_graphs=bool(trainer.get("cuda_graphs")),
        )

    def __post_init__(self) -> None:
        if self.precision is not None and self.precision not in _FUSED_PRECISION:
            raise ValueError(
                f"precision={self.precision!r}: a fused group trains in 32-true or bf16-mixed "
                f"(valid: {', '.join(_FUSED_PRECISION)}); train a trial of another precision "
                "alone"
            )

    @property
    def fused_precision(self) -> str:
        """The fused model's name for the precision (its step runs 32-true or bf16-mixed)."""
        return _FUSED_PRECISION.get(self.precision or "32-true", "32-true")


#: Lightning's precision names a fused group trains in, by the fused model's name for each
_FUSED_PRECISION = {
    "32-true": "32-true",
    "32": "32-true",
    "bf16-mixed": "bf16-mixed",
    "bf16": "bf16-mixed",
}


@dataclass
class LoopMember:
    """One member as the loop is given it.

    Args:
        datamodule: its datamodule, set up for fitting (its seed drew its data).
        module: its Seq2SeqModule as its own run builds it (seeded: the fused model starts from
            its weights); None when the loop resumes from a state (the weights are the state's).
        gradient_clip_val: its own gradient-norm clipping (None or 0: none).
    """

    datamodule: pl.LightningDataModule
    module: Seq2SeqModule | None = None
    gradient_clip_val: float | None = None


class Batches:
    """A member's training batches in the order Lightning's fit loop draws them: its datamodule's
    train loader, epoch after epoch (the order a function of the seed and the epoch), its
    position a ``ResumableDataLoader``'s ``state_dict``."""

    def __init__(self, loader: Any, state: dict[str, int] | None = None) -> None:
        self.loader = loader
        self._restart(state or {"epoch": 0, "batches": 0})

    def _restart(self, state: dict[str, int]) -> None:
        self.loader.load_state_dict(state)
        self._it = iter(self.loader)

    def next(self) -> dict[str, Any]:
        try:
            return next(self._it)
        except StopIteration:  # the epoch is over: the next one, as Lightning's set_epoch would
            self._restart({"epoch": self.epoch + 1, "batches": 0})
            return next(self._it)

    @property
    def epoch(self) -> int:
        return int(self.loader.state_dict()["epoch"])

    @property
    def epoch_done(self) -> bool:
        """Whether the last batch drawn was its epoch's last."""
        return int(self.loader.state_dict()["batches"]) >= len(self.loader)

    def state_dict(self) -> dict[str, int]:
        return dict(self.loader.state_dict())


@dataclass
class Counts:
    """What a member's figures have counted, as Lightning's logging counts them: the last
    finished epoch's means (weighted by batch size), the rows not yet handed back, the training
    time before this loop started (a resumed loop's)."""

    epoch_means: dict[str, float] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    time_offset: float = 0.0


@dataclass
class MemberValidation:
    """One member's validation, as its own Trainer would have it.

    Attributes:
        step, epoch: the training step (``trainer.global_step``) and epoch.
        metrics: what Lightning's validation logged (``val/bleu``, ``val/loss``...).
        train: the training figures Lightning holds then: ``train/loss`` and
            ``train/loss_step`` (the last step's), ``train/loss_epoch`` (the last finished
            epoch's mean), and a student's ``train/distill`` the same.
        rows: the rows Lightning's logger was handed since the last validation, this
            validation's included (its metrics at step - 1).
        train_time_s: the member's training time so far (a resumed loop's included).
        checkpoint: its checkpoint file's bytes, Lightning's format.
        module: the validated module (its hparams, ``last_decoded``: the hypotheses its BLEU
            was computed from).
    """

    step: int
    epoch: int
    metrics: dict[str, float]
    train: dict[str, float]
    rows: list[Row]
    train_time_s: float
    checkpoint: bytes
    module: Seq2SeqModule


@dataclass
class _Member:
    datamodule: pl.LightningDataModule
    batches: Batches
    trainer: pl.Trainer
    counts: Counts


class FusedLoop:
    """Lightning's fit loop for a fused group (module docstring).

    Args:
        members: each member's datamodule, module and clipping, by the caller's member id (the
            ids key everything handed back).
        settings: the group's Trainer arguments.
        device: where the group trains.
        state: a :meth:`state_dict` to resume from (then the members' modules are not read;
            members the state holds but ``members`` lacks are dropped).
    Raises:
        ValueError: no members; a module with no fused form; ``cuda_graphs`` on a CUDA device
            with a precision other than 32-true.
    """

    def __init__(
        self,
        members: Mapping[int, LoopMember],
        settings: LoopSettings,
        device: str | torch.device = "cpu",
        state: Mapping[str, Any] | None = None,
    ) -> None:
        if not members:
            raise ValueError("a fused loop needs at least one member")
        self.settings = settings
        self.device = torch.device(device)
        accelerator, devices = _lightning_device(self.device)
        saved_counts = state["counts"] if state is not None else {}
        self.members: dict[int, _Member] = {}
        for j, member in members.items():
            loader = state["loaders"][j] if state is not None else None
            self.members[j] = _Member(
                member.datamodule,
                Batches(member.datamodule.train_dataloader(), loader),
                _validator(settings, accelerator, devices),
                Counts(),
            )
        if state is None:
            ids = list(members)
            self.fused = FusedSeq2Seq.from_modules(
                [members[j].module for j in ids],
                clip=[members[j].gradient_clip_val or None for j in ids],
                precision=settings.fused_precision,
            ).to(self.device)
            self.step, self.active = 0, ids
        else:
            self.fused = FusedSeq2Seq.from_state_dict(state["fused"], device=self.device)
            self.step, self.active = int(state["step"]), list(state["members"])
            rng = RngStateCallback()
            rng.load_state_dict(state["rng"])
            rng.on_train_start(None, None)  # the random states of the state's step, put back
        self._figures = [TRAIN_LOSS] + ([TRAIN_DISTILL] if self.fused.students else [])
        n = len(self.active)
        self._last = {name: torch.zeros(n, device=self.device) for name in self._figures}
        self._sums = {name: torch.zeros(n, device=self.device) for name in self._figures}
        self._counted = torch.zeros(n, device=self.device)
        self._finished: set[int] = set()
        if state is not None:
            self._load_counts(saved_counts)
            self.drop([j for j in self.active if j not in members])
        #: what ``cuda_graphs`` does here, as one line (None: not asked for)
        self.graphs_line = graphs_line(settings.cuda_graphs, self.device)
        self.graphed: GraphedFusedSteps | None = None
        if settings.cuda_graphs and self.device.type == "cuda":
            self.graphed = GraphedFusedSteps(self.fused)
        self._t0 = time.perf_counter()

    # ---------------------------------------------------------------- training
    @property
    def running(self) -> bool:
        """Whether a member is left to train and ``max_steps`` is not reached."""
        return bool(self.active) and self.step < self.settings.max_steps

    def epoch(self, member: int) -> int:
        """Member ``member``'s current epoch."""
        return self.members[member].batches.epoch

    def train_step(self) -> bool:
        """One training step of every active member on its next batch. Returns whether a
        validation is due now (:meth:`validate`, before the next step)."""
        # every member's batch drawn first, then copied: on a GPU the first copy waits for the
        # step before to end, so the draws (M of them, on the process's one thread) overlap that
        # step instead of following it
        drawn = [self.members[j].batches.next() for j in self.active]
        batches = [_to_device(batch, self.device) for batch in drawn]
        sizes = torch.tensor([float(b["src"].shape[0]) for b in drawn], device=self.device)
        if self.graphed is not None:
            losses = self.graphed.step(batches)
        else:
            losses = self.fused.train_step(batches)
        self.step += 1
        values = {TRAIN_LOSS: losses.detach().float()}
        if self.fused.students:
            values[TRAIN_DISTILL] = self.fused.last_distill.float()
        for name, value in values.items():
            self._last[name] = value
            self._sums[name] += value * sizes
        self._counted += sizes
        if self.step % self.settings.log_every_n_steps == 0:
            logged = {name: value.tolist() for name, value in values.items()}
            for pos, j in enumerate(self.active):
                row = {f"{name}_step": logged[name][pos] for name in self._member_figures(pos)}
                self.members[j].counts.rows.append((self.step - 1, {**row, "epoch": self.epoch(j)}))
        every = self.settings.val_check_interval
        return self.step % every == 0 or self.step >= self.settings.max_steps

    def end_step(self) -> None:
        """After a step (and its validation): the epochs that ended with it (their mean training
        figures logged, ``train/loss_epoch``), then the members :meth:`finish` ended leave."""
        self._epoch_ends()
        if self._finished:
            self.drop(self._finished)

    def _epoch_ends(self, members: Iterable[int] | None = None) -> dict[int, list[Row]]:
        """The members whose epoch ended with the last step (or, given, ``members``: their
        training ends here, as Lightning ends the epoch at ``max_steps``), each epoch's means
        logged as a row; returns those rows."""
        chosen = set(members) if members is not None else None
        done = [
            i
            for i, j in enumerate(self.active)
            if (j in chosen if chosen is not None else self.members[j].batches.epoch_done)
            and not (chosen is None and j in self._finished)
            and self._counted[i] > 0
        ]
        if not done:
            return {}
        counted = self._counted.clamp(min=1)
        means = {name: (self._sums[name] / counted).tolist() for name in self._figures}
        out = {}
        for i in done:
            j = self.active[i]
            member = self.members[j]
            figures = {f"{name}_epoch": means[name][i] for name in self._member_figures(i)}
            member.counts.epoch_means = {**member.counts.epoch_means, **figures}
            row = (self.step - 1, {**figures, "epoch": member.batches.epoch})
            member.counts.rows.append(row)
            out[j] = [row]
            for name in self._figures:
                self._sums[name][i] = 0.0
            self._counted[i] = 0.0
        return out

    def _member_figures(self, position: int) -> list[str]:
        """The training figures member ``position`` logs: its loss, and its term if it distils."""
        student = self.fused.distill_weight[position] > 0
        return [name for name in self._figures if name != TRAIN_DISTILL or student]

    # ---------------------------------------------------------------- validation
    def validate(self) -> dict[int, MemberValidation]:
        """Every active member validated through Lightning, in the order of :attr:`active`,
        with its figures, rows and checkpoint (:class:`MemberValidation`)."""
        last = {name: value.tolist() for name, value in self._last.items()}
        results = {}
        for pos, j in enumerate(self.active):
            member = self.members[j]
            module = self.fused.member_module(pos)
            if module.data_vocabulary is None:  # what its own fit records: the data it trains on
                module.data_vocabulary = data_vocabulary(member.datamodule)
            metrics = _validate(member.trainer, module, member.datamodule)
            epoch = member.batches.epoch
            train = {}
            for name in self._member_figures(pos):
                train[name] = train[f"{name}_step"] = last[name][pos]
            train.update(member.counts.epoch_means)
            seconds = member.counts.time_offset + time.perf_counter() - self._t0
            rows = member.counts.rows + [(self.step - 1, {**metrics, "epoch": epoch})]
            member.counts.rows = []
            checkpoint = _checkpoint_bytes(
                member.trainer, self.step, epoch, self.fused.optimizer_state(pos)
            )
            results[j] = MemberValidation(
                self.step, epoch, metrics, train, rows, seconds, checkpoint, module
            )
        return results

    def finish(self, members: Iterable[int]) -> dict[int, list[Row]]:
        """End the training of ``members`` at this step (``max_steps``, or the caller's stopping
        rule at this validation): their epoch ends here (its means logged, the rows returned,
        for the validation just handed back), and they leave at :meth:`end_step`."""
        members = [j for j in members if j in self.active]
        rows = self._epoch_ends(members)
        self._finished.update(members)
        return {j: rows.get(j, []) for j in members}

    def drop(self, members: Iterable[int]) -> None:
        """Members leave the fused model now (the others train on; the padding shrinks to the
        largest member left)."""
        gone = set(members)
        keep = [j for j in self.active if j not in gone]
        if keep == self.active:
            return
        positions = [self.active.index(j) for j in keep]
        if keep:
            self.fused.keep(positions)
            index = torch.tensor(positions, device=self.device, dtype=torch.long)
            self._last = {k: v.index_select(0, index) for k, v in self._last.items()}
            self._sums = {k: v.index_select(0, index) for k, v in self._sums.items()}
            self._counted = self._counted.index_select(0, index)
        self.active = keep
        self._finished -= gone

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The whole loop: the step, the active members, the fused model (weights, every
        member's Adam state), each member's loader position, what each member has counted (its
        running figures and training time) and the global random states."""
        elapsed = time.perf_counter() - self._t0
        counts = {}
        for pos, j in enumerate(self.active):
            c = self.members[j].counts
            counts[j] = {
                "epoch_means": dict(c.epoch_means),
                "rows": list(c.rows),
                "time_offset": c.time_offset + elapsed,
                "last": {name: float(v[pos]) for name, v in self._last.items()},
                "sums": {name: float(v[pos]) for name, v in self._sums.items()},
                "counted": float(self._counted[pos]),
            }
        return {
            "step": self.step,
            "members": list(self.active),
            "fused": self.fused.state_dict(),
            "loaders": {j: self.members[j].batches.state_dict() for j in self.active},
            "counts": counts,
            "rng": RngStateCallback().state_dict(),
        }

    def _load_counts(self, saved: Mapping[int, Mapping[str, Any]]) -> None:
        for pos, j in enumerate(self.active):
            if j not in saved or j not in self.members:
                continue
            c = saved[j]
            self.members[j].counts = Counts(
                dict(c["epoch_means"]), [tuple(r) for r in c["rows"]], float(c["time_offset"])
            )
            for name in self._figures:
                self._last[name][pos] = c["last"][name]
                self._sums[name][pos] = c["sums"][name]
            self._counted[pos] = c["counted"]


def _lightning_device(device: torch.device) -> tuple[str, Any]:
    """Lightning's accelerator and devices for ``device``."""
    if device.type == "cuda":
        return "gpu", [device.index if device.index is not None else 0]
    return "cpu", 1


def _to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


def _validator(settings: LoopSettings, accelerator: str, devices: Any) -> pl.Trainer:
    """The Trainer a member is validated with: the run's validation settings, nothing logged,
    saved or printed."""
    kwargs: dict[str, Any] = {}
    if settings.limit_val_batches is not None:
        kwargs["limit_val_batches"] = settings.limit_val_batches
    if settings.precision is not None:
        kwargs["precision"] = settings.precision
    return pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def _validate(
    trainer: pl.Trainer, module: pl.LightningModule, dm: pl.LightningDataModule
) -> dict[str, float]:
    """Lightning's validation of one member: the metrics it logs (``val/bleu`` ...)."""
    trainer.validate(module, datamodule=dm, verbose=False)
    return {
        k: float(v)
        for k, v in trainer.callback_metrics.items()
        if torch.is_tensor(v) and v.numel() == 1
    }


def _checkpoint_bytes(
    trainer: pl.Trainer, step: int, epoch: int, optimizer_state: dict[str, Any]
) -> bytes:
    """The validated member's checkpoint as ``trainer.save_checkpoint`` writes it, with the
    training step, epoch and its Adam state written in (what its own fit would have saved)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, CHECKPOINT_NAME)
        trainer.save_checkpoint(path, weights_only=False)
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        ckpt.update(global_step=step, epoch=epoch, optimizer_states=[optimizer_state])
        ckpt[FUSED_MEMBER] = {"step": step, "epoch": epoch}  # not resumable by Trainer.fit
        torch.save(ckpt, path)
        with open(path, "rb") as f:
            return f.read()
