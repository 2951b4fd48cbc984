"""The stages that measure the trained models, after training: each finished model timed alone
(:mod:`sweeps.timing`), and the trials chosen on validation evaluated once on the test split
(:mod:`sweeps.heldout`); each publishes its figures beside the trials' own
(:mod:`sweeps.stages.publish`) once every model is done."""

from __future__ import annotations

from sweeps.heldout.stage import (
    evaluate_chosen_trials,
    evaluated_before,
    mark_not_evaluated,
    stopped_rows,
)
from sweeps.layout import HELDOUT_FILE, TIMING_FILE
from sweeps.stages.launch_state import Launch
from sweeps.stages.publish import publish_heldout, publish_timings
from sweeps.timing.stage import mark_not_timed, time_finished_trials


def time_models(launch: Launch) -> None:
    """Each finished trial's model timed alone, between measurements watching for a stop; the
    figures published beside the trial's own once every model is timed."""
    cut = time_finished_trials(
        launch.rows, launch.plans, launch.out_dir, launch.spec.timing, watch=launch
    )
    if cut:  # the models not timed are timed by --resume
        launch.interrupted = True
        return
    launch.published |= publish_timings(launch.rows, launch.settings, launch.journal)


def evaluate_heldout(launch: Launch) -> None:
    """The trials chosen on validation, evaluated once each on the test split (the GPU share the
    cluster check settled on: ``settings.spec``), watching for a stop between evaluations."""
    tested = evaluate_chosen_trials(
        launch.rows, launch.plans, launch.out_dir, launch.settings.spec, watch=launch
    )
    if stopped_rows(launch.rows):  # the evaluations left are made by --resume
        launch.interrupted = True
        return
    reused = launch.warm.reused_ids() if launch.warm else ()
    here = {t: v for t, v in tested.items() if t not in reused}
    dropped = [t for t in evaluated_before(launch.plans, launch.out_dir) if t not in tested]
    publish_heldout(here, launch.settings, launch.journal, [t for t in dropped if t not in reused])


def timing_left(launch: Launch) -> None:
    """A stop before the timing stage: the finished trials' rows say they are not timed yet."""
    mark_not_timed(launch.rows)


def heldout_left(launch: Launch) -> None:
    """A stop after training, before the held-out stage: the chosen trials' rows say they are not
    evaluated yet, as a stop inside the stage leaves them."""
    mark_not_evaluated(launch.rows, launch.settings.spec)


def measured_before(launch: Launch, name: str, key: str, what: str) -> None:
    """A stage turned off (``<key>: false``) on a resume whose earlier runs measured some trials
    (their ``name`` files): say that results.csv and results.md leave those figures out now, and
    how to bring them back (they stay on disk)."""
    if not launch.args.resume or not launch.out_dir.is_dir():
        return
    found = sum(1 for _ in launch.out_dir.glob(f"*/{name}"))
    if found:
        print(
            f"{key} is false: the {what} an earlier run measured for {found} trial(s) (their "
            f"{name}, kept) are left out of results.csv and results.md; --resume --set "
            f"{key}=true brings them back"
        )


def timing_off(launch: Launch) -> None:
    measured_before(launch, TIMING_FILE, "timing.enabled", "decode timings")


def heldout_off(launch: Launch) -> None:
    measured_before(launch, HELDOUT_FILE, "heldout.enabled", "test-split figures")
