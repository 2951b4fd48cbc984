"""The stages of a launch, after the command line is read (:mod:`sweeps.launch`), run top to
bottom over one state of the launch (:class:`~sweeps.stages.launch_state.Launch`): check the output
and storage, start the budget's meter, prepare the data once, join or start Ray, run the one Tune
experiment, time the finished models alone (:mod:`sweeps.timing`), retrain the chosen
configurations on fresh seeds, evaluate the chosen trials on the test split
(:mod:`sweeps.heldout`), publish the figures, then write results.csv, results.md and the plots,
and say how to continue (:mod:`sweeps.stages.results`). The stages themselves are in
:mod:`sweeps.stages` (setup, train, measure, confirm, publish, results).

Each stage begins where a stop request is checked: SIGTERM or SIGUSR1 (a preemption), Ctrl-C,
or the budget spent. A stop skips the stages after it, and each stage honours one that comes while
it runs as its work allows (:mod:`sweeps.driver.preemption`): the Tune run through Tune's own
handling, the timing and held-out stages between their measurements (ending the processes they
run), the rest at once. What is done is written; the launcher exits 75, 3 or 130, or 0 when the
stop came after every stage had finished. Returns the launcher's exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from sweeps.driver.budget import charging
from sweeps.driver.environ import environ_restored
from sweeps.driver.mps import mps_for_sweep
from sweeps.driver.preemption import Preemption
from sweeps.errors import LaunchError
from sweeps.plan.sweep_plan import SweepPlan
from sweeps.spec.schema import SweepSpec
from sweeps.stages.launch_state import Launch


@dataclass(frozen=True)
class Stage:
    """One stage: its event name, the function, how it takes a stop request (``raise``,
    ``tune`` or ``poll``: :data:`sweeps.driver.preemption.MODES`), the budget ledger's name for its
    time, whether the sweep asks for it, whether it runs after a stop too (it gathers what
    is done), what marks the rows it leaves to ``--resume`` when a stop skips it, and what it says
    when the sweep does not ask for it (``off``)."""

    name: str
    run: Callable[[Launch], int | None]
    stops: str
    ledger: str
    wanted: Callable[[SweepSpec], bool] = lambda spec: True
    always: bool = False
    left: Callable[[Launch], None] | None = None
    off: Callable[[Launch], None] | None = None


def launch_stages() -> tuple[tuple[Stage, ...], tuple[Stage, ...]]:
    """The stages before the budget's meter runs, and the charged ones, in order."""
    # The stages import torch, Ray and matplotlib (seconds): --dry-run and --help do without.
    from sweeps.stages import confirm, measure, publish, setup, train

    before = (
        Stage("check", setup.check_output, "raise", "setup"),
        Stage("budget", setup.start_budget, "raise", "setup"),
    )
    charged = (
        Stage("data", setup.prepare_data, "raise", "setup"),
        Stage("ray", setup.join_ray, "raise", "setup"),
        Stage("training", train.train, "tune", "training"),
        Stage(
            "timing",
            measure.time_models,
            "poll",
            "timing",
            lambda spec: spec.timing.enabled,
            left=measure.timing_left,
            off=measure.timing_off,
        ),
        Stage("warm", train.reuse_warm, "raise", "training", always=True),
        Stage("confirm", confirm.confirm, "tune", "confirm", lambda spec: bool(spec.confirm_seeds)),
        Stage(
            "heldout",
            measure.evaluate_heldout,
            "poll",
            "heldout",
            lambda spec: spec.heldout.enabled,
            left=measure.heldout_left,
            off=measure.heldout_off,
        ),
        Stage("publish", publish.publish, "poll", "reports", always=True),
    )
    return before, charged


#: what a launch sets in this process's environment for W&B (the driver's W&B calls and the Ray it
#: starts read it), taken back when the launch returns: a later launch in the same process (a
#: notebook, a test) settles its own ``wandb.mode: auto`` rather than reading the last one's
LAUNCH_ENV = ("WANDB_MODE", "WANDB_SILENT")


def plain_prefixes() -> None:
    """Ray colours the ``(trial pid=...)`` prefix of the lines its processes print, as escape
    codes that a log file or a pipe shows raw: off where the launcher's output is not a terminal,
    unless the environment says otherwise. Kept after the launch returns: Ray's processes print
    their last lines (a worker's teardown) as the process exits, and the output is still no
    terminal then."""
    if not sys.stdout.isatty():
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")


def run_sweep(plan: SweepPlan, args: argparse.Namespace, profile: str | None) -> int:
    """Run a planned sweep to its results; ``args`` is the launcher's command line."""
    from sweeps.driver.console import quiet_stopped_trials  # (imports Ray)
    from sweeps.stages import results as finish  # (the reports import pandas, torch and matplotlib)

    before, charged = launch_stages()
    # the MPS daemon (sweeps.driver.mps) is up before Ray starts and stopped after Ray stops
    arranged = plan.arrangement is not None and plan.arrangement.chosen  # resources.gpu auto
    mps = mps_for_sweep(plan.mps, args.address, arranged)
    with environ_restored(LAUNCH_ENV), Preemption() as stop, mps:
        plain_prefixes()
        quiet_stopped_trials()
        launch = Launch.begin(plan, args, profile, stop)
        try:
            status = run_stages(launch, before)
            if status is None:
                with charging(launch.meter):  # every stage's time, till the results are written
                    status = run_stages(launch, charged)
                    launch.enter("reports")
            launch.stop_watch()  # the reports need no Ray
            if status is not None:
                return status
            with stop.during("poll"):  # a stop now is noted: the results are what it needs written
                launch.notify("reports")
                finish.write_results(launch)
                finish.tell_console(launch)
                return finish.exit_status(launch)
        finally:  # the next launch of the sweep may start (in this process too)
            launch.stop_watch()
            if launch.lock is not None:
                launch.lock.close()


def run_stages(launch: Launch, stages: tuple[Stage, ...]) -> int | None:
    """Run ``stages`` in order; a stop (a signal, Ctrl-C, the budget) skips the ones it finds
    ahead and cuts the one it comes in. Returns the exit status where the launch ends early (2 for
    a bad setup, 3 for a spent budget), else None."""
    for stage in stages:
        if not stage.wanted(launch.spec):
            if stage.off is not None:
                stage.off(launch)
            continue
        launch.enter(stage.ledger)
        if launch.stopping() and not stage.always:
            launch.interrupted = True
            launch.stopped_in = launch.stopped_in or stage.name
            if stage.left is not None:  # its rows say they wait for --resume
                stage.left(launch)
            continue
        was = launch.interrupted
        try:
            with launch.stop.during(stage.stops):
                launch.notify(stage.name)
                status = stage.run(launch)
        except KeyboardInterrupt:  # (StopRequested too) the stage's work stops where it was
            launch.interrupted, status = True, None
        except LaunchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if launch.interrupted and not was:
            launch.stopped_in = launch.stopped_in or stage.name
        if status is not None:
            return status
    return None
