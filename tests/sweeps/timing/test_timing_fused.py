"""The timing stage's choice of what to measure in a sweep with fused groups
(sweeps/timing/fused.py), without processes: members of one cell share their group's one training
step measurement, members of different cells (K, scoring, position encodings, length) in the same
group are each measured as their own model, and every member's decoding is timed. The stage's
real processes on a fused sweep: tests/sweeps/trial/fused/test_fused_sweep.py."""

from __future__ import annotations

from sweeps.timing.fused import shape_of, time_once_per_group
from sweeps.timing.jobs import TimingJob, TimingOutcome, timing_settings

SHORT = "K=2 attention=memory encoder_scoring=sigmoid length=4"
LONG = "K=5 attention=memory position_encoding=True length=6"
#: results rows: two seeds of one cell and one seed of another in group g1, a trial alone
ROWS = [
    {"trial_id": "a0", "cell": SHORT, "fused_with": "g1"},
    {"trial_id": "b0", "cell": LONG, "fused_with": "g1"},
    {"trial_id": "a1", "cell": SHORT, "fused_with": "g1"},
    {"trial_id": "c0", "cell": SHORT, "fused_with": None},
]


def jobs() -> list[TimingJob]:
    return [TimingJob(r["trial_id"], f"/c/{r['trial_id']}.ckpt", {}, "/t") for r in ROWS]


class Stage:
    """The stage's runner as the launcher hands it: each call's jobs and measures kept; every job
    timed, its record named after its trial."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []

    def __call__(self, batch, spec, log):
        self.calls.append(([j.trial_id for j in batch], list(spec.measure)))
        return [TimingOutcome(j, "timed", record=j.trial_id) for j in batch]


def test_members_of_other_cells_in_one_group_are_each_timed_as_their_own_model():
    assert shape_of(ROWS[0]) == shape_of(ROWS[2]) != shape_of(ROWS[1])
    assert shape_of(ROWS[3]) is None, "a trial alone is its own measurement"
    stage = Stage()
    out = time_once_per_group(
        jobs(), ROWS, timing_settings(measure=["decode", "train"]), None, stage
    )
    # every measure for the first member of each cell and the trial alone; decoding only for
    # the second seed of a cell already measured
    assert stage.calls == [(["a0", "b0", "c0"], ["decode", "train"]), (["a1"], ["decode"])]
    outcome = {r["trial_id"]: o.record for r, (o, _) in zip(ROWS, out)}
    cost = {r["trial_id"]: c for r, (_, c) in zip(ROWS, out)}
    assert outcome == {"a0": "a0", "b0": "b0", "a1": "a1", "c0": "c0"}, "each decoded as itself"
    assert cost == {"a0": "a0", "b0": "b0", "a1": "a0", "c0": "c0"}, (
        "a cell's step, not the group's"
    )


def test_without_decoding_a_cell_s_other_members_take_its_figures_and_run_nothing():
    stage = Stage()
    out = time_once_per_group(jobs(), ROWS, timing_settings(measure=["train"]), None, stage)
    assert stage.calls == [(["a0", "b0", "c0"], ["train"])]
    assert out[2][0] is None and out[2][1] == "a0"
