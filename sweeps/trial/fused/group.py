"""The Ray actor that trains one fused group: its members' models as one fused model, each member's
reports published for its own trial to pass to Tune.

The roster (:mod:`.roster`) creates it when the group's first member trial asks, on that trial's
node, holding no resources of its own (each member trial holds 1/n of a trial's). It waits until
every member has joined (or Tune has ended it), builds each member's data and model as its unfused
trial would (:mod:`.build`), or restores them from the group's last state (:mod:`.state`), then
trains them with the model package's fused loop (:class:`lightning_modules.fused.loop.FusedLoop`:
the steps, Lightning's validation, the checkpoints). The actor keeps what is the sweep's: before
each validation (every ``val_check_interval`` steps, and at ``max_steps``) it waits until every
member's trial has handed its previous report to Tune -- a trial runs at most one report ahead of
Tune, as an unfused trial does -- and drops the members Tune stopped meanwhile; after it, it makes
each member's report (:mod:`.report`: the stop_when rule, the report folder's files), writes the
group's state and publishes the members' reports one after another in member order (so a
scheduler that compares them meets them in the same order in every run). A member that is done
(``max_steps``, converged) or stopped leaves the fused model and stops costing compute; the others
go on.

A member trial that fails and is retried joins again and gets the reports it missed. A group that
fails (an error in training, its node lost) fails its members; their retries find a new group,
which restarts from the last state every returning member reached.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import ray

from sweeps.trial.fused.group_close import seconds_to_close, states_spent
from sweeps.trial.fused.state import GroupSetup, GroupStore
from sweeps.trial.lifecycle import quiet_logs


def _load_training() -> None:
    """torch, the fused loop and the members' building and reports, in the group's process: not
    in the roster's, which needs none of them."""
    global torch, build, report, FusedLoop, LoopMember, LoopSettings
    import torch

    # torch and Lightning (seconds): only the group's actor process trains
    from lightning_modules.fused.loop import FusedLoop, LoopMember, LoopSettings
    from sweeps.trial.fused import build, report


@dataclass
class Member:
    """One member as the group sees it: its trial, what it has published and Tune has taken, its
    data, and its stop_when count."""

    j: int
    trial_id: str
    plan: Any
    last_step: int  # its trial's last report when it joined (-1: none)
    ack: int = -1  # the last step its trial has handed to Tune
    published: int = -1
    reports: list[dict] = field(default_factory=list)
    left: bool = False
    final: bool = False  # the group published its final report
    released: bool = False  # its trial is done with the group (its final report taken, or left)
    taken: bool = False  # its trial handed its final report to Tune
    dm: Any = None
    stop: Any = None  # report.StopCount


#: seconds between the group's looks at the roster while it waits
POLL_S = 1.0


class FusedGroup:
    """One group's training (a threaded Ray actor; see the module docstring)."""

    def __init__(self, setup: GroupSetup) -> None:
        _load_training()
        self.setup = setup
        self.cond = threading.Condition()
        self.members: dict[int, Member] = {}
        self.loop: Any = None  # the FusedLoop, once built
        self.started = self.done = self.closing = False
        self.error: str | None = None
        self.store = GroupStore(setup.filesystem, setup.folder)
        self._ended: set[int] = set()
        self._ended_at = 0.0
        self._unreleased_since: dict[int, float] = {}  # ended by Tune, not released (_maybe_close)
        torch.set_num_threads(max(1, setup.threads))
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
                if m is None or not (j in self._active() or m.final):
                    return "late"
                m.trial_id, m.ack, m.released = trial_id, max(m.ack, last_step), False
                self.cond.notify_all()
                return "ok"
            self.members[j] = Member(j, trial_id, plan, last_step, ack=last_step)
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
            self.members[j].released = self.members[j].taken = True
        self._maybe_close()

    def heatmaps(self, j: int, checkpoint: bytes) -> list[bytes]:
        """Member ``j``'s attention heatmaps, drawn from ``checkpoint`` (its last report's model) as
        PNG files: the member's process has no torch to draw them (:mod:`.member`)."""
        m = self.members[j]
        return report.heatmaps(checkpoint, m.dm or build.member_data(m.plan))

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

    def _active(self) -> list[int]:
        """The members in the fused model, in its order."""
        return self.loop.active if self.loop is not None else []

    def _build(self) -> None:
        """The fused loop: from the newest state every returning member reached, or from scratch."""
        ended = self._roster_ended(fresh=True)
        with self.cond:
            use = sorted(j for j, m in self.members.items() if not m.left and j not in ended)
        device = build.group_device(self.setup.gpu_ids)
        since = min(self.members[j].last_step for j in use) if use else -1
        loaded = self.store.load(since, set(use)) if since >= 0 and use else None
        if loaded and "loop" not in loaded[1]:  # written before the loop had a state of its own
            print(f"[group {self.setup.name}] {loaded[0].path} is an older state: from step 0")
            loaded = None
        state = loaded[1] if loaded else None
        members = {}
        for j in use:
            m = self.members[j]
            module = None
            if state is None:  # seeded as its unfused trial: the same first weights and data
                m.dm, module = build.build_member(m.plan)
                m.stop = report.StopCount()
            else:
                m.dm = build.member_data(m.plan)
                m.stop = report.StopCount(**state["stop"][j])
            clip = m.plan.trainer.get("gradient_clip_val") or None
            members[j] = LoopMember(m.dm, module, clip)
        settings = LoopSettings.from_trainer(self.members[use[0]].plan.trainer)
        self.loop = FusedLoop(members, settings, device, state["loop"] if state else None)
        if self.loop.graphs_line:
            print(f"[group {self.setup.name}] {self.loop.graphs_line}", flush=True)
        if loaded:
            print(f"[group {self.setup.name}] resumed at step {self.loop.step} ({loaded[0].path})")

    def _drop_gone(self) -> None:
        """Members Tune stopped (they left) or whose trials Tune has ended."""
        ended = self._roster_ended()
        with self.cond:
            gone = [j for j in self.loop.active if self.members[j].left or j in ended]
        self.loop.drop(gone)

    def _train(self) -> None:
        while self.loop.running:
            if self.loop.train_step():
                self._validate()
            self.loop.end_step()
            self._drop_gone()

    def _wait_acks(self, members: list[int] | None = None) -> None:
        """Until the trials of ``members`` (default: all in the fused model) have handed their
        last published report to Tune, or are gone."""
        members = self.loop.active if members is None else members
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

    def _validate(self) -> None:
        self._wait_acks()
        self._drop_gone()
        if not self.loop.active:
            return
        max_steps = self.loop.settings.max_steps
        reports = {
            j: report.member_report(result, self.members[j].stop, max_steps, self.setup)
            for j, result in self.loop.validate().items()
        }
        finals = [j for j, r in reports.items() if r["final"]]
        # the epoch ends with their training: its mean, after the report's figures
        for j, rows in self.loop.finish(finals).items():
            reports[j]["history"] += rows
        self._save_state()
        # one member's report at a time, in member order, each once Tune has taken the one before:
        # a scheduler comparing members (ASHA on one unit's samples) sees them in the same order
        # in every run, as an unfused sweep's trials reach it one by one
        for k, (j, member_report) in enumerate(reports.items()):
            if k:
                self._wait_acks([list(reports)[k - 1]])
            with self.cond:
                m = self.members[j]
                m.reports.append(member_report)
                m.published = self.loop.step
                m.final = m.final or member_report["final"]
                self.cond.notify_all()

    def _save_state(self) -> None:
        active = self.loop.active
        self.store.save(
            self.loop.step,
            active,
            {
                "loop": self.loop.state_dict(),
                "stop": {j: self.members[j].stop.state_dict() for j in active},
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
            spent = states_spent(self.members, ended, self.setup.size)
        if spent:  # no member will resume: the group's states are of no more use
            self.store.remove()
        ray.get_actor(self.setup.roster).close_group.remote(self.setup.name)


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    return f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "no traceback"
