"""The searcher put together from parts, without a Ray instance: the parts the plan picks, and the
pairs of parts that must work together, driven with the events Tune would send, on a real Optuna
journal -- fused groups of a multi-objective study behind their unit's baseline, fused students
each with its own teacher, a student that failed for want of a teacher handed out anew after a
``--resume`` (the searcher pickled and restored as Tune does). The sweeps that run these pairs on
a real Ray are in test_pairs.py."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

pytest.importorskip("ray")

import optuna  # noqa: E402
from ray.tune.search import Searcher  # noqa: E402

from sweeps.plan.fusion import Group, Slot  # noqa: E402
from sweeps.plan.sweep_plan import build_plan  # noqa: E402
from sweeps.plan.units import Unit, sweep_units  # noqa: E402
from sweeps.search.base import SweepSearcher  # noqa: E402
from sweeps.search.baselines import Baselines  # noqa: E402
from sweeps.search.compose import make_searcher  # noqa: E402
from sweeps.search.fused import FusedGroups, SeedChunks  # noqa: E402
from sweeps.search.handout import OneAtATime  # noqa: E402
from sweeps.search.moo import MultiObjective, ObjectiveReader  # noqa: E402
from sweeps.search.objective import SingleObjective  # noqa: E402
from sweeps.search.over_seeds import OverSeeds  # noqa: E402
from sweeps.search.per_unit import PerUnit  # noqa: E402
from sweeps.search.teachers import TeacherBook  # noqa: E402
from sweeps.spec import build_sweep  # noqa: E402
from sweeps.spec.search_space import optuna_distributions  # noqa: E402

LR = {"model.lr": {"min": 0.001, "max": 0.01, "distribution": "log_uniform_values"}}
OBJECTIVES = [{"name": "val/bleu", "goal": "maximize"}, {"name": "val/loss", "goal": "minimize"}]


def raw(**over) -> dict:
    spec = {
        "name": "c",
        "task": {"name": "copy", "max_length": 4, "train_size": 64, "val_size": 8, "batch_size": 8},
        "model": {"preset": "tiny", "attention": "memory"},
        "grid": {"task.max_length": [4]},
        "seeds": [0],
        "metric": {"name": "val/bleu", "goal": "maximize"},
        "trainer": {"max_steps": 20, "val_check_interval": 10},
    }
    spec.update(over)
    return {k: v for k, v in spec.items() if v is not None}


def parts(searcher: SweepSearcher) -> tuple[str, ...]:
    return (
        type(searcher.objective).__name__,
        type(searcher.scope).__name__,
        type(searcher.handout).__name__,
        *sorted(g.kind for g in searcher.gates),
    )


def test_the_plan_picks_each_part(tmp_path):
    """One searcher class; the sweep file decides its objective kind, scope, hand-out and gates."""
    cases = [
        (raw(fusion="off"), ("SingleObjective", "PerUnit", "OneAtATime")),
        (raw(seeds=[0, 1]), ("SingleObjective", "PerUnit", "FusedGroups")),
        (
            raw(parameters=LR, num_samples=2, seeds={"values": [0, 1], "per_configuration": True}),
            ("SingleObjective", "OverSeeds", "SeedChunks"),
        ),
        (
            raw(metric=None, objectives=OBJECTIVES, parameters=LR, num_samples=3),
            ("MultiObjective", "PerUnit", "FusedGroups"),
        ),
        (
            raw(
                metric=None,
                objectives=OBJECTIVES,
                constraints=[{"name": "val/bleu", "within": 5, "of": {"attention": "bahdanau"}}],
                parameters=LR,
                num_samples=3,
                fusion="off",
            ),
            ("MultiObjective", "PerUnit", "OneAtATime", "baselines"),
        ),
        (
            raw(
                grid={
                    "model": [
                        {"attention": "bahdanau"},
                        {
                            "attention": "memory",
                            "K": 4,
                            "distill_weight": 1.0,
                            "teacher": {"cell": {"attention": "bahdanau"}},
                        },
                    ]
                },
                seeds=[0, 1],
            ),
            ("SingleObjective", "PerUnit", "FusedGroups", "teachers"),
        ),
    ]
    for i, (spec, expected) in enumerate(cases):
        plan = build_plan(build_sweep({**spec, "name": f"c{i}"}), tmp_path)
        assert parts(make_searcher(plan, "disabled")) == expected, spec


def _moo_units_and_searcher(tmp_path: Path, groups: list[Group]) -> SweepSearcher:
    spec = raw(
        metric=None,
        objectives=OBJECTIVES,
        constraints=[
            {"name": "val/loss", "max": 3.0},
            {"name": "val/bleu", "within": 10.0, "of": {"attention": "bahdanau"}},
        ],
        parameters=LR,
        num_samples=3,
    )
    sweep = build_sweep(spec)
    units = sweep_units(sweep)
    baselines = Baselines(units, {"model.attention": "bahdanau"})
    objective = MultiObjective(sweep, ObjectiveReader(sweep, None), 3, baselines=baselines)
    space = optuna_distributions(sweep.spec.parameters, sweep.param_columns)
    scope = PerUnit(units, objective, 3, space, str(tmp_path / "optuna.journal"))
    return SweepSearcher(units, scope, FusedGroups(units, groups), [baselines])


def test_fused_members_of_a_multi_objective_study_are_asked_together_behind_the_baseline(
    tmp_path,
):
    """The unit's baseline goes first and alone; the group waits for it, then its three members
    are asked of Optuna together (all RUNNING before any is told), each told its own vector and
    its own constraints, the relative one measured against the baseline."""
    group = Group("g1", tuple(Slot(0, s) for s in range(3)))
    searcher = _moo_units_and_searcher(tmp_path, [group])
    baseline = searcher.suggest("b")
    assert baseline["set"] == {"model.attention": "bahdanau"} and "fused_with" not in baseline
    assert searcher.suggest("x") is None, "the group waits for its unit's baseline"
    searcher.on_trial_complete("b", {"val/bleu": 20.0, "val/loss": 2.0, "step": 20})
    members = [searcher.suggest(t) for t in ("m1", "m2", "m3")]
    assert [m["fused_member"] for m in members] == ["1/3", "2/3", "3/3"]
    assert {m["fused_with"] for m in members} == {"g1"}
    study = searcher.scope.study(0)
    assert [t.state.name for t in study.trials] == ["RUNNING"] * 3, "asked together"
    assert len({t.params["lr"] for t in study.trials}) == 3
    assert searcher.suggest("y") is Searcher.FINISHED
    reports = {"m1": (30.0, 2.5), "m2": (5.0, 2.9), "m3": (15.0, 3.5)}
    for tid, (bleu, loss) in reports.items():
        searcher.on_trial_complete(tid, {"val/bleu": bleu, "val/loss": loss, "step": 20})
    by_ray = {t.user_attrs["ray_trial_id"]: t for t in searcher.scope.study(0).trials}
    assert set(by_ray) == set(reports)
    for tid, (bleu, loss) in reports.items():
        t = by_ray[tid]
        assert t.state.name == "COMPLETE" and t.values == [bleu, loss]
        assert t.user_attrs["fused_with"] == "g1"
        assert t.constraints == {
            "val/loss <= 3": loss - 3.0,
            "val/bleu within 10 of attention=bahdanau": (20.0 - 10.0) - bleu,
        }
    assert study.user_attrs["baseline"]["metrics"]["val/bleu"] == 20.0


def test_fused_students_wait_for_every_members_teacher_and_each_gets_its_own():
    """Teachers' group first (though planned after the students'); the students' group goes out
    only when both its members' teacher units have ended, each member with its own teacher."""
    units = [
        Unit("s/t0", 0, 0, {"cell": "T", "seed": 0}),
        Unit("s/t1", 0, 1, {"cell": "T", "seed": 1}),
        Unit("s/s0", 1, 0, {"cell": "S", "seed": 0}, teacher=0),
        Unit("s/s1", 1, 1, {"cell": "S", "seed": 1}, teacher=1),
    ]
    groups = [Group("g1", (Slot(2, 0), Slot(3, 0))), Group("g2", (Slot(0, 0), Slot(1, 0)))]
    book = TeacherBook.of(units, 1, "val/bleu", "max")
    scope = PerUnit(units, SingleObjective("val/bleu", "max"), 1)
    searcher = SweepSearcher(units, scope, FusedGroups(units, groups), [book])
    teachers = [searcher.suggest("t0"), searcher.suggest("t1")]
    assert [(c["cell"], c["fused_with"]) for c in teachers] == [("T", "g2"), ("T", "g2")]
    assert searcher.suggest("x") is None, "the students wait"
    book.checkpoints.update({"t0": "/c/t0.ckpt", "t1": "/c/t1.ckpt"})
    searcher.on_trial_complete("t0", {"val/bleu": 50.0})
    assert searcher.suggest("x") is None, "one member's teacher has not ended"
    searcher.on_trial_complete("t1", {"val/bleu": 40.0})
    students = [searcher.suggest("s0"), searcher.suggest("s1")]
    assert [(c["cell"], c["seed"], c["fused_with"]) for c in students] == [
        ("S", 0, "g1"),
        ("S", 1, "g1"),
    ]
    assert [(c["teacher"], c["teacher_checkpoint"]) for c in students] == [
        ("t0", "/c/t0.ckpt"),
        ("t1", "/c/t1.ckpt"),
    ]


def _tune_round_trip(searcher: SweepSearcher, tmp_path: Path) -> SweepSearcher:
    """As Tune keeps a searcher across a restart: pickled when the run starts, its state saved,
    the pickle loaded and the state restored into it."""
    first = pickle.dumps(searcher)
    searcher.save(str(tmp_path / "searcher.pkl"))
    again = pickle.loads(first)
    again.restore(str(tmp_path / "searcher.pkl"))
    return again


def test_a_student_failed_for_want_of_its_teacher_comes_back_after_resume(tmp_path):
    """The teacher fails, its student fails with the reason; on --resume the teacher runs again
    (Tune's resume_errored) and the student waits for it, then gets a new config: its teacher's
    checkpoint and a new Optuna sample (the failed one stays FAIL, never trained)."""
    units = [
        Unit("s/t", 0, 0, {"cell": "T", "seed": 0}, max_steps=20),
        Unit("s/s", 1, 0, {"cell": "S", "seed": 0}, max_steps=20, teacher=0),
    ]
    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    book = TeacherBook.of(units, 1, "val/bleu", "max")
    scope = PerUnit(units, SingleObjective("val/bleu", "max"), 1, space, str(tmp_path / "j"))
    searcher = SweepSearcher(units, scope, OneAtATime(), [book])
    searcher.suggest("t")
    book.errors["t"] = "ChaosError: injected"
    searcher.on_trial_complete("t", error=True)
    student = searcher.suggest("s")
    assert student["teacher_error"].endswith("failed: trial t: ChaosError: injected")
    searcher.on_trial_complete("s", error=True)
    assert searcher.comeback("s") is None, "in the run it failed in, nothing comes back"

    resumed = _tune_round_trip(searcher, tmp_path)
    assert resumed.comeback("s") is False, "its teacher runs again first"
    assert "t" in resumed.live and resumed.teachers.waiting(1)
    resumed.teachers.checkpoints["t"] = "/c/t.ckpt"
    resumed.on_trial_complete("t", {"val/bleu": 60.0, "step": 20})
    again = resumed.comeback("s")
    assert (again["teacher"], again["teacher_checkpoint"]) == ("t", "/c/t.ckpt")
    assert "teacher_error" not in again and resumed.comeback("s") is None
    trials = resumed.scope.study(1).trials
    assert [t.state.name for t in trials] == ["FAIL", "RUNNING"]
    assert trials[1].params["lr"] == again["lr"] and trials[1].user_attrs["ray_trial_id"] == "s"
    resumed.on_trial_complete("s", {"val/bleu": 70.0, "step": 20})
    assert resumed.scope.study(1).trials[1].value == 70.0


def test_drawn_members_and_repeats_survive_a_restart(tmp_path):
    """A fused group drawn but half handed out when Tune saved the searcher: the rest are handed
    out after the restore with the samples Optuna gave them, which stayed RUNNING."""
    group = Group("g1", tuple(Slot(0, s) for s in range(3)))
    searcher = _moo_units_and_searcher(tmp_path, [group])
    searcher.suggest("b")
    searcher.on_trial_complete("b", {"val/bleu": 20.0, "val/loss": 2.0, "step": 20})
    first = searcher.suggest("m1")
    resumed = _tune_round_trip(searcher, tmp_path)
    rest = [resumed.suggest("m2"), resumed.suggest("m3")]
    assert [c["fused_member"] for c in rest] == ["2/3", "3/3"]
    trials = resumed.scope.study(0).trials
    assert [t.state.name for t in trials] == ["RUNNING"] * 3
    assert {t.params["lr"] for t in trials} == {first["lr"]} | {c["lr"] for c in rest}


def test_a_configurations_seeds_go_out_in_fused_chunks(tmp_path):
    """Over seeds with fusion: one Optuna trial per configuration, its seeds in chunks of at most
    the cap, named after the configuration (three seeds at a cap of 2: a pair, and one alone)."""
    units = [Unit(f"s/c-seed{s}", 0, s, {"cell": "c", "seed": s}, max_steps=20) for s in range(3)]
    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    scope = OverSeeds(
        units, SingleObjective("val/bleu", "max"), 1, space, str(tmp_path / "j"), ["s/c"]
    )
    searcher = SweepSearcher(units, scope, SeedChunks(2))
    configs = [searcher.suggest(f"t{i}") for i in range(3)]
    assert [(c.get("fused_with"), c.get("fused_member")) for c in configs] == [
        ("c#0/1", "1/2"),
        ("c#0/1", "2/2"),
        (None, None),
    ]
    assert {c["configuration"] for c in configs} == {0} and len({c["lr"] for c in configs}) == 1
    assert searcher.suggest("x") is Searcher.FINISHED


@pytest.mark.parametrize("objective", ["single", "multi"])
def test_a_stopped_and_resumed_study_draws_what_an_uninterrupted_one_draws(tmp_path, objective):
    """A study's sampler was seeded once, when the study was opened: a resumed launch reopened it
    seeded anew, and every trial drawn after the stop differed from the uninterrupted run's. A
    trial asked after Tune last saved the searcher (a killed driver) was left FAIL, its
    configuration never trained. Now trial k is drawn with its own seed, and a lost trial's
    configuration is asked again, marked in Optuna."""
    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    units = [Unit("s/u", 0, 0, {"cell": "u", "seed": 0}, max_steps=20)]

    def searcher(journal: Path) -> SweepSearcher:
        if objective == "single":
            kind = SingleObjective("val/bleu", "max")
        else:
            sweep = build_sweep(raw(metric=None, objectives=OBJECTIVES, parameters=LR))
            kind = MultiObjective(sweep, ObjectiveReader(sweep, None), 4)  # TPE's model after 2
        return SweepSearcher(units, PerUnit(units, kind, 4, space, str(journal)), OneAtATime())

    def run(s: SweepSearcher, trial_id: str, bleu: float) -> float:
        lr = s.suggest(trial_id)["lr"]
        s.on_trial_complete(trial_id, {"val/bleu": bleu, "val/loss": 1.0, "step": 20})
        return lr

    straight = searcher(tmp_path / "straight")
    through = [run(straight, f"t{k}", 10.0 * k) for k in range(4)]

    stopped = searcher(tmp_path / "stopped")
    drawn = [run(stopped, "t0", 0.0)]
    pickled = pickle.dumps(stopped)
    stopped.save(str(tmp_path / "searcher.pkl"))  # Tune's last save before the driver dies
    lost = stopped.suggest("t1")["lr"]  # asked, then the driver is killed
    resumed = pickle.loads(pickled)
    resumed.restore(str(tmp_path / "searcher.pkl"))
    drawn += [run(resumed, f"r{k}", 10.0 * k) for k in (1, 2, 3)]
    assert lost == through[1] and drawn == through, (drawn, through)
    trials = resumed.scope.study(0).trials
    assert [t.state.name for t in trials] == [
        "COMPLETE",
        "FAIL",
        "COMPLETE",
        "COMPLETE",
        "COMPLETE",
    ]
    assert "asked by a launch that stopped" in trials[1].user_attrs["lost"]
    assert trials[2].user_attrs["retry_of"] == 1 and trials[2].params == trials[1].params


def test_a_units_asha_rungs_survive_a_restart(tmp_path):
    """Tune saves no scheduler: a resumed sweep's ASHA began with empty rungs and let a trial
    through the rung at which the uninterrupted run stopped it (tune_optuna's smoke sweep, stopped
    and resumed, trained such a trial to the end). The units' ASHA is kept in the searcher's
    saved state, restored in place into the scheduler that came out of the same tuner.pkl."""
    from ray import cloudpickle
    from ray.tune import PlacementGroupFactory
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    from sweeps.schedulers.per_unit import make_scheduler

    sweep = build_sweep(
        raw(parameters=LR, num_samples=2, early_terminate={"type": "asha", "reduction_factor": 2})
    )
    units = sweep_units(sweep)
    space = optuna_distributions(sweep.spec.parameters, sweep.param_columns)
    scope = PerUnit(units, SingleObjective("val/bleu", "max"), 2, space, str(tmp_path / "j"))
    searcher = SweepSearcher(units, scope, OneAtATime())
    scheduler = make_scheduler(sweep, searcher)
    tuner_pkl = cloudpickle.dumps((searcher, scheduler))  # as Tune keeps both, at the start

    def trial(trial_id: str) -> Trial:
        t = Trial(
            "run_trial",
            config={"cell": units[0].config["cell"], "seed": units[0].seed},
            trial_id=trial_id,
            stub=True,
            placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
        )
        t.create_placement_group_factory()
        return t

    def second_trial_at_its_first_rung(sched) -> str:
        late = trial("late")
        sched.on_trial_add(None, late)
        return sched.on_trial_result(None, late, {"training_iteration": 1, "val/bleu": 1.0})

    first = trial("first")
    scheduler.on_trial_add(None, first)
    report = {"training_iteration": 1, "val/bleu": 50.0}
    assert scheduler.on_trial_result(None, first, report) == TrialScheduler.CONTINUE
    scheduler.on_trial_complete(None, first, {"training_iteration": 2, "val/bleu": 60.0})
    searcher.save(str(tmp_path / "searcher.pkl"))  # Tune's snapshot; then the launcher stops

    resumed, rescheduler = cloudpickle.loads(tuner_pkl)
    resumed.restore(str(tmp_path / "searcher.pkl"))
    rescheduler.on_trial_add(None, trial("first"))  # Tune adds the restored trials again
    uninterrupted = second_trial_at_its_first_rung(scheduler)
    assert uninterrupted == TrialScheduler.STOP
    assert second_trial_at_its_first_rung(rescheduler) == uninterrupted


def test_an_errored_trial_that_a_resume_finishes_is_told_to_optuna_as_a_retry(tmp_path):
    """A trial that errored was told FAIL; --resume runs it again as the same Ray trial, and its
    finish was told to the finished Optuna trial, which takes no tell: Optuna kept FAIL, no value
    and no curve, while results.csv said done. The retry is a new Optuna trial of the same
    parameters (retry_of the failed one), told its value; the failed one stays FAIL."""
    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    units = [Unit("s/u", 0, 0, {"cell": "u", "seed": 0}, max_steps=20)]
    kind = SingleObjective("val/bleu", "max")
    first = SweepSearcher(units, PerUnit(units, kind, 4, space, str(tmp_path / "j")), OneAtATime())
    lr = first.suggest("t0")["lr"]
    first.on_trial_complete("t0", None, error=True)  # failed past its retries: error
    pickled = pickle.dumps(first)
    first.save(str(tmp_path / "searcher.pkl"))
    resumed = pickle.loads(pickled)  # --resume (resume_errored): Tune runs t0 again
    resumed.restore(str(tmp_path / "searcher.pkl"))
    resumed.on_trial_result("t0", {"val/bleu": 30.0, "step": 10})
    resumed.on_trial_complete("t0", {"val/bleu": 42.0, "val/loss": 1.0, "step": 20})
    trials = resumed.scope.study(0).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].value == 42.0 and trials[1].params == {"lr": lr}
    assert trials[1].user_attrs["retry_of"] == 0 and trials[1].user_attrs["ray_trial_id"] == "t0"
    # a trial whose outcome was never told (RUNNING when the driver died) keeps its Optuna trial
    again = SweepSearcher(units, PerUnit(units, kind, 4, space, str(tmp_path / "k")), OneAtATime())
    again.suggest("u0")
    ticket = again.live["u0"]
    assert again.scope.retried(again, "u0", ticket, {}) == ticket
