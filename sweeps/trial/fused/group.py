"""The Ray actor that trains one fused group: its members' models as one fused model, each member's
reports published for its own trial to pass to Tune.

The roster (:mod:`.roster`) creates it when the group's first member trial asks, on that trial's
node, holding no resources of its own (each member trial holds 1/n of a trial's). It waits until
every member has joined (or Tune has ended it), builds each member's data and model as its unfused
trial would (:mod:`.steps`), or restores them from the group's last state (:mod:`.state`), then
trains. At each validation (every ``val_check_interval`` steps, and at ``max_steps``) it first
waits until every member's trial has handed its previous report to Tune -- a trial runs at most
one report ahead of Tune, as an unfused trial does -- drops the members Tune stopped meanwhile,
validates each member through Lightning, writes each member's checkpoint and the group's state,
and publishes the members' reports one after another in member order (so a scheduler that
compares them meets them in the same order in every run). A member that is done (``max_steps``, converged) or stopped
leaves the fused model and stops costing compute; the others go on.

A member trial that fails and is retried joins again and gets the reports it missed. A group that
fails (an error in training, its node lost) fails its members; their retries find a new group,
which restarts from the last state every returning member reached.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

import ray

from sweeps.trial.fused.closing import seconds_to_close
from sweeps.trial.fused.state import GroupSetup, GroupStore

if TYPE_CHECKING:
    from sweeps.trial.fused.steps import Member


def _load_training() -> None:
    """torch and the training steps, in the group's process: not in the roster's, which needs none."""
    global torch, steps, FusedSeq2Seq
    import torch

    from lightning_modules.fused import FusedSeq2Seq
    from sweeps.trial.fused import steps


#: seconds between the group's looks at the roster while it waits
POLL_S = 1.0


class FusedGroup:
    """One group's training (a threaded Ray actor; see the module docstring)."""

    def __init__(self, setup: GroupSetup) -> None:
        _load_training()
        self.setup = setup
        self.cond = threading.Condition()
        self.members: dict[int, Member] = {}
        self.active: list[int] = []  # members in the fused model, in its order
        self.started = self.done = self.closing = False
        self.error: str | None = None
        self.store = GroupStore(setup.filesystem, setup.folder)
        self._ended: set[int] = set()
        self._ended_at = 0.0
        self._unreleased_since: dict[int, float] = {}  # ended by Tune, not released (_maybe_close)
        torch.set_num_threads(max(1, setup.threads))
        from sweeps.trial.lifecycle import quiet_logs

        quiet_logs()  # Lightning's banners, as in a trial's process
        threading.Thread(target=self._run, daemon=True, name=f"group-{setup.name}").start()

    # -- what the member trials call ------------------------------------------------------------

    def alive(self) -> bool:
        return self.error is None

    def join(self, j: int, trial_id: str, plan: Any, last_step: int) -> str:
        """Member ``j``'s trial arrives (first time, or retried): ``ok``, or ``late`` when the group
        already trains without it."""
        with self.cond:
            m = self.members.get(j)
            if self.started:
                if m is None or not (j in self.active or m.final):
                    return "late"
                m.trial_id, m.ack, m.released = trial_id, max(m.ack, last_step), False
                self.cond.notify_all()
                return "ok"
            self.members[j] = steps.Member(j, trial_id, plan, last_step, ack=last_step)
            self.cond.notify_all()
            return "ok"

    def next_report(self, j: int, after: int, timeout: float) -> dict | None:
        """Member ``j``'s first report after step ``after`` (its trial has handed everything up to
        ``after`` to Tune), waiting up to ``timeout`` seconds; None if none came, ``{"error"}`` when
        the group failed."""
        deadline = time.monotonic() + timeout
        with self.cond:
            m = self.members[j]
            m.ack = max(m.ack, after)
            m.reports = [r for r in m.reports if r["step"] > after]
            self.cond.notify_all()
            while True:
                if self.error is not None:
                    return {"error": self.error}
                if m.reports:
                    return m.reports[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def leave(self, j: int) -> None:
        """Tune stopped member ``j``: it leaves the fused model before the next step."""
        with self.cond:
            self.members[j].left = self.members[j].released = True
            self.cond.notify_all()
        self._maybe_close()

    def release(self, j: int) -> None:
        """Member ``j``'s trial is over (its final report handed to Tune)."""
        with self.cond:
            self.members[j].released = True
        self._maybe_close()

    def heatmaps(self, j: int, checkpoint: bytes) -> list[bytes]:
        """Member ``j``'s attention heatmaps, drawn from ``checkpoint`` (its last report's model) as
        PNG files: the member's process has no torch to draw them (:mod:`.member`)."""
        m = self.members[j]
        return steps.heatmaps(checkpoint, m.dm or steps.member_data(m.plan))

    # -- the training thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._wait_for_members()
            self._build()
            self._train()
        except BaseException as exc:  # noqa: BLE001 -- every member's trial fails with it
            with self.cond:
                self.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                self.error += f" (in group {self.setup.name}; {_where(exc)})"
                self.cond.notify_all()
            return
        with self.cond:
            self.done = True
            self.cond.notify_all()
        self._maybe_close()

    def _roster_ended(self, fresh: bool = False) -> set[int]:
        """The members Tune has ended (asked of the roster at most once per :data:`POLL_S`)."""
        if fresh or time.monotonic() - self._ended_at >= POLL_S:
            roster = ray.get_actor(self.setup.roster)
            self._ended = set(ray.get(roster.ended_members.remote(self.setup.name)))
            self._ended_at = time.monotonic()
        return self._ended

    def _wait_for_members(self) -> None:
        while True:
            ended = self._roster_ended()
            with self.cond:
                missing = set(range(self.setup.size)) - set(self.members) - ended
                if not missing and self.members:
                    self.started = True
                    return
                self.cond.wait(POLL_S)

    def _build(self) -> None:
        """The fused model: from the newest state every returning member reached, or from scratch."""
        from datamodules.resumable import RngStateCallback

        ended = self._roster_ended(fresh=True)
        with self.cond:
            use = sorted(j for j, m in self.members.items() if not m.left and j not in ended)
        self.device, accelerator, devices = steps.group_device(self.setup.gpu_ids)
        since = min(self.members[j].last_step for j in use) if use else -1
        loaded = self.store.load(since, set(use)) if since >= 0 and use else None
        state = loaded[1] if loaded else None
        modules = []
        for j in use:
            m = self.members[j]
            if state is None:  # seeded as its unfused trial: the same first weights and data
                m.dm, module = steps.build_member(m.plan)
                modules.append(module)
            else:
                m.dm = steps.member_data(m.plan)
                m.counts.load_state_dict(state["counts"][j])
            m.trainer = steps.validator(m.plan, accelerator, devices)
            m.batches = steps.Batches(
                m.dm.train_dataloader(), state["loaders"][j] if state else None
            )
        if state is None:
            trainer = self.members[use[0]].plan.trainer
            self.fused = FusedSeq2Seq.from_modules(
                modules,
                clip=[self.members[j].plan.trainer.get("gradient_clip_val") or None for j in use],
                precision=steps.fused_precision(trainer.get("precision")),
            )
            self.fused.to(self.device)
            self.step, self.active = 0, list(use)
        else:
            self.fused = FusedSeq2Seq.from_state_dict(state["fused"], device=self.device)
            self.step, self.active = int(state["step"]), list(state["members"])
            rng = RngStateCallback()
            rng.load_state_dict(state["rng"])
            rng.on_train_start(None, None)  # the RNG states of the state's step, put back
            self._keep([j for j in self.active if j in use])
        n = len(self.active)
        self.last_losses = torch.zeros(n, device=self.device)
        self.sums = torch.zeros(n, device=self.device)
        self.counted = torch.zeros(n, device=self.device)
        self.t0 = time.perf_counter()
        if loaded:
            print(f"[group {self.setup.name}] resumed at step {self.step} ({loaded[0].path})")

    def _keep(self, keep: list[int]) -> None:
        """Drop the members not in ``keep`` from the fused model and the per-member tensors."""
        if keep == self.active:
            return
        positions = [self.active.index(j) for j in keep]
        if keep:
            self.fused.keep(positions)
            if hasattr(self, "sums"):
                index = torch.tensor(positions, device=self.device, dtype=torch.long)
                self.last_losses, self.sums, self.counted = (
                    t.index_select(0, index) for t in (self.last_losses, self.sums, self.counted)
                )
        self.active = keep

    def _drop_gone(self) -> None:
        """Members Tune stopped (they left), that are done, or whose trials Tune has ended."""
        ended = self._roster_ended()
        with self.cond:
            keep = [
                j
                for j in self.active
                if not self.members[j].left and not self.members[j].final and j not in ended
            ]
        self._keep(keep)

    def _train(self) -> None:
        trainer = self.members[self.active[0]].plan.trainer if self.active else {}
        max_steps, every = int(trainer.get("max_steps", 0)), int(trainer["val_check_interval"])
        log_every = int(trainer.get("log_every_n_steps") or 50)
        while self.active and self.step < max_steps:
            batches = []
            for j in self.active:
                batches.append(steps.to_device(self.members[j].batches.next(), self.device))
            sizes = torch.tensor([float(b["src"].shape[0]) for b in batches], device=self.device)
            losses = self.fused.train_step(batches).detach().float()  # (M,)
            self.step += 1
            self.last_losses = losses
            self.sums += losses * sizes
            self.counted += sizes
            if self.step % log_every == 0:
                for j, loss in zip(self.active, losses.tolist()):
                    epoch = self.members[j].batches.epoch
                    self.members[j].counts.history.append(
                        (self.step - 1, {"train/loss_step": loss, "epoch": epoch})
                    )
            if self.step % every == 0 or self.step >= max_steps:
                self._validate(max_steps)
            self._epoch_ends()
            self._drop_gone()

    def _epoch_ends(self, members: list[int] | None = None) -> None:
        """Members whose epoch ended (or, given, ``members``: their training ends here, as
        Lightning ends the epoch at ``max_steps``): the epoch's mean training loss
        (``train/loss_epoch``, weighted by batch size) in their W&B history."""
        done = [
            i
            for i, j in enumerate(self.active)
            if (j in members if members is not None else self.members[j].batches.epoch_done)
            and not (members is None and self.members[j].final)
            and self.counted[i] > 0
        ]
        if not done:
            return
        means = (self.sums / self.counted.clamp(min=1)).tolist()
        for i in done:
            m = self.members[self.active[i]]
            m.counts.epoch_mean = means[i]
            m.counts.history.append(
                (self.step - 1, {"train/loss_epoch": means[i], "epoch": m.batches.epoch})
            )
            self.sums[i] = 0.0
            self.counted[i] = 0.0

    def _wait_acks(self, members: list[int] | None = None) -> None:
        """Until the trials of ``members`` (default: all in the fused model) have handed their
        last published report to Tune, or are gone."""
        members = self.active if members is None else members
        while True:
            ended = self._roster_ended()
            with self.cond:
                behind = [
                    j
                    for j in members
                    if self.members[j].ack < self.members[j].published
                    and not (self.members[j].left or self.members[j].released)
                    and j not in ended
                ]
                if not behind:
                    return
                self.cond.wait(POLL_S)

    def _validate(self, max_steps: int) -> None:
        self._wait_acks()
        self._drop_gone()
        if not self.active:
            return
        from sweeps.trial.fused.report import member_report

        last = self.last_losses.tolist()
        reports = {}
        for pos, j in enumerate(self.active):
            m = self.members[j]
            module = self.fused.member_module(pos)
            metrics = steps.validate(m.trainer, module, m.dm)
            m.counts.last_loss = last[pos]
            seconds = m.counts.time_offset + time.perf_counter() - self.t0
            report = member_report(
                m.counts, metrics, self.step, m.batches.epoch, seconds, max_steps, self.setup
            )
            report["files"] = steps.member_files(
                m.trainer,
                module,
                self.step,
                m.batches.epoch,
                self.fused.optimizer_state(pos),
                seconds,
            )
            report["hparams"] = dict(module.hparams)
            reports[j] = report
        finals = [j for j, r in reports.items() if r["final"]]
        if finals:  # the epoch ends with their training: its mean, after the report's figures
            self._epoch_ends(finals)
            for j in finals:
                reports[j]["history"] += self.members[j].counts.history
                self.members[j].counts.history = []
        self._save_state()
        # one member's report at a time, in member order, each once Tune has taken the one before:
        # a scheduler comparing members (ASHA on one unit's samples) sees them in the same order
        # in every run, as an unfused sweep's trials reach it one by one
        for k, (j, report) in enumerate(reports.items()):
            if k:
                self._wait_acks([list(reports)[k - 1]])
            with self.cond:
                m = self.members[j]
                m.reports.append(report)
                m.published = self.step
                m.final = m.final or report["final"]
                self.cond.notify_all()

    def _save_state(self) -> None:
        from datamodules.resumable import RngStateCallback

        elapsed = time.perf_counter() - self.t0
        counts = {}
        for j in self.active:
            c = self.members[j].counts.state_dict()
            c["time_offset"] = self.members[j].counts.time_offset + elapsed
            counts[j] = c
        self.store.save(
            self.step,
            self.active,
            {
                "step": self.step,
                "members": list(self.active),
                "fused": self.fused.state_dict(),
                "loaders": {j: self.members[j].batches.state_dict() for j in self.active},
                "counts": counts,
                "rng": RngStateCallback().state_dict(),
            },
        )

    def _maybe_close(self) -> None:
        """Once training is over and every member's trial is done with it (:mod:`.closing`), ask
        the roster to end this process."""
        ended = self._roster_ended(fresh=True) if self.done else set()
        with self.cond:
            if not self.done or self.closing:
                return
            wait = seconds_to_close(self.members, ended, self.setup.size, self._unreleased_since)
            if wait is None or wait > 0:
                if wait:  # look again then; a release before that closes the group at once
                    threading.Timer(wait, self._maybe_close).start()
                return
            self.closing = True
            finished = all(
                j in self.members
                and (self.members[j].final or (self.members[j].left and j in ended))
                for j in range(self.setup.size)
            )
        if finished:  # no member will resume: the group's states are of no more use
            self.store.remove()
        ray.get_actor(self.setup.roster).close_group.remote(self.setup.name)


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    return f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "no traceback"
