"""Multi-objective search: the Pareto maths and the rung rule against brute-force
definitions, the dry-run checks of `objectives`/`constraints`, the decode probe's interpolation,
and (slow) a tiny study end to end on a local Ray."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from sweeps.report.pareto import (
    crowding,
    dominates,
    hypervolume_2d,
    keep_count,
    pareto_ranks,
    rung_order,
    rung_survivors,
    to_minimize,
)
from sweeps.schedulers.pareto_rungs import ParetoRungs, milestones
from sweeps.timing.probe import DecodeEstimates, arch_key, isotonic, k_anchors
from tests.sweep_helpers import interrupt_env, tiny_spec, write_spec

REPO = Path(__file__).resolve().parents[3]


# -- the maths ------------------------------------------------------------------------------------


def brute_ranks(points):
    """Rank by definition: the longest chain of points dominating one another ending at it."""
    n = len(points)
    memo = {}

    def depth(i):
        if i not in memo:
            memo[i] = max(
                [depth(j) + 1 for j in range(n) if dominates(points[j], points[i])], default=0
            )
        return memo[i]

    return [depth(i) for i in range(n)]


def test_pareto_ranks_match_the_definition():
    rng = random.Random(0)
    for _ in range(200):
        pts = [(rng.randint(0, 5), rng.randint(0, 5)) for _ in range(rng.randint(1, 9))]
        assert pareto_ranks(pts) == brute_ranks(pts), pts


def test_hypervolume_2d_matches_a_grid_count():
    rng = random.Random(1)
    for _ in range(100):
        pts = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(rng.randint(1, 6))]
        ref = (10, 10)
        cells = sum(
            1
            for x, y in itertools.product(range(10), range(10))
            if any(a <= x and b <= y for a, b in pts)
        )
        assert hypervolume_2d(pts, ref) == pytest.approx(cells)
    assert hypervolume_2d([(11, 0)], (10, 10)) == 0  # outside the reference counts nothing


def test_keep_count_is_ashas_quantile_rule():
    """ASHA goes on at or above the (1 - 1/rf) quantile (linear interpolation) of the rung's n
    values: with 0..n-1 the cut-off sits at (1 - 1/rf)(n - 1), counted in exact arithmetic (numpy's
    float percentile can land a hair above a value that sits exactly on it)."""
    from fractions import Fraction

    for rf in (2, 3, 4):
        for n in range(1, 30):
            cutoff = (1 - Fraction(1, rf)) * (n - 1)
            assert keep_count(n, rf) == max(1, sum(1 for i in range(n) if i >= cutoff)), (n, rf)


def brute_survivors(points, rf):
    """The rung rule by definition: a point goes on when it is non-dominated, or when fewer than
    keep_count points come before it in (Pareto rank, -crowding distance, arrival) order."""
    ranks = brute_ranks(points)
    dist = {}
    for r in set(ranks):
        dist.update(crowding(points, [i for i, x in enumerate(ranks) if x == r]))
    keep = max(
        keep_count(len(points), rf), ranks.count(0)
    )  # the top 1/rf, and every non-dominated point
    return {
        i
        for i in range(len(points))
        if sum((ranks[j], -dist[j], j) < (ranks[i], -dist[i], i) for j in range(len(points))) < keep
    }


def test_rung_rule_matches_brute_force():
    rng = random.Random(2)
    for _ in range(300):
        pts = [(rng.randint(0, 6), rng.randint(0, 6)) for _ in range(rng.randint(1, 10))]
        rf = rng.choice([2, 3, 4])
        assert rung_survivors(pts, rf) == brute_survivors(pts, rf), (pts, rf)


def test_dominance_with_a_tolerance_needs_a_gain_beyond_the_noise():
    k5, k3 = (
        (-100.0, 0.0115),
        (-100.0, 0.0119),
    )  # minimal_k's L=10: BLEU (negated) and the probe's seconds
    assert dominates(k5, k3)  # exactly: 3% faster at the same BLEU
    assert not dominates(k5, k3, [0.0, 0.10]) and not dominates(
        k3, k5, [0.0, 0.10]
    )  # a tie within 10%
    assert dominates((-100.0, 0.016), (-100.0, 0.020), [0.0, 0.10])  # 20% faster: still dominates
    assert dominates(
        (-90.0, 0.0115), (-80.0, 0.0119), [0.0, 0.10]
    )  # clearly better BLEU, no slower
    # a is better on BLEU but slower, within the noise: still not dominating (stopping b would rest on noise)
    assert not dominates((-90.0, 0.0119), (-80.0, 0.0115), [0.0, 0.10])
    assert dominates((-100.0, 0.0115), (-100.0, 0.0119), [0.0, 0.0])  # a zero tolerance is exact


def test_dominance_with_a_tolerance_is_plain_dominance_minus_the_noise():
    rng = random.Random(4)
    for _ in range(2000):
        a = (-rng.choice([80.0, 90.0, 100.0]), rng.uniform(0.010, 0.013))
        b = (-rng.choice([80.0, 90.0, 100.0]), rng.uniform(0.010, 0.013))
        if dominates(a, b, [0.0, 0.10]):
            assert dominates(a, b)  # never where plain dominance does not hold
            assert a[0] < b[0] or b[1] - a[1] > 0.10 * max(
                a[1], b[1]
            )  # better by more than the noise


def test_rung_rule_never_stops_a_point_that_dominates_a_survivor():
    rng = random.Random(3)
    for _ in range(300):
        pts = [(rng.random(), rng.random()) for _ in range(rng.randint(2, 10))]
        kept = rung_survivors(pts, 3)
        for i in set(range(len(pts))) - kept:
            assert not any(dominates(pts[i], pts[j]) for j in kept)


def test_rung_order_front_first_and_its_ends_first():
    pts = [
        (3, 3),
        (0, 5),
        (5, 0),
        (2, 2),
        (1, 4),
    ]  # front: (0,5) (1,4) (2,2) (5,0); (3,3) dominated
    order = rung_order(pts)
    assert order[-1] == 0
    assert set(order[:2]) == {1, 2}  # the two ends of the front: infinite crowding distance


def test_to_minimize_flips_maximised_objectives():
    assert to_minimize([90.0, 0.5], ["maximize", "minimize"]) == (-90.0, 0.5)


# -- the rung scheduler (its decisions, without Tune) ----------------------------------------------


def test_milestones_like_asha():
    assert milestones(1, 3, 9) == [1, 3]
    assert milestones(2, 2, 20) == [2, 4, 8, 16]


def test_pareto_rungs_stop_dominated_trials_and_hopeless_ones():
    rungs = ParetoRungs(
        [("val/bleu", "maximize"), ("decode_seconds", "minimize")],
        lambda c, r: None,
        grace_period=1,
        reduction_factor=2,
        max_t=9,
        bounds={0: 100.0},
        max_steps=900,
    )
    assert rungs.decide("a", 1, [50.0, 0.02]) == "CONTINUE"  # alone at the rung
    assert rungs.decide("b", 1, [40.0, 0.03]) == "STOP"  # dominated by a
    assert (
        rungs.decide("c", 1, [30.0, 0.01]) == "CONTINUE"
    )  # faster: the front's other end (2 of 3 go on)
    assert rungs.log["b"]["stopped"] and rungs.log["b"]["rung"] == 1
    rungs.finished["done"] = to_minimize([100.0, 0.015], rungs.directions)
    # even at BLEU 100 this architecture (0.02 s) would be dominated by the finished one
    assert rungs.decide("d", 1, [99.0, 0.02]) == "STOP" and rungs.log["d"]["hopeless"]
    assert rungs.decide("c", 3, [80.0, 0.01]) == "CONTINUE"  # first at rung 2: alone there


def test_a_trial_pushed_out_at_its_last_report_counts_as_finished():
    """Rule 2b ranks a trial again at every report; at its last one stopping would save nothing, so
    the rule lets it end: it counts as finished (rule 3 compares with it) and is not logged stopped.
    The benchmark's first run logged such a trial 'stopped' while Optuna had it COMPLETE."""
    from types import SimpleNamespace

    bleu = {"slow": [31.0, 33.0, 34.0], "fast": [35.0]}
    rungs = ParetoRungs(
        [("val/bleu", "maximize"), ("decode_seconds", "minimize")],
        lambda c, r: [r["val/bleu"], c["seconds"]],
        grace_period=1,
        reduction_factor=3,
        max_t=3,
        bounds={0: 100.0},
        max_steps=300,
    )
    slow, fast = (
        SimpleNamespace(trial_id=n, config={"seconds": s})
        for n, s in (("slow", 0.013), ("fast", 0.009))
    )

    def report(trial, i):
        result = {"val/bleu": bleu[trial.trial_id][i - 1], "training_iteration": i, "step": 100 * i}
        return rungs.on_trial_result(None, trial, result), result

    assert report(slow, 1)[0] == "CONTINUE" and report(slow, 2)[0] == "CONTINUE"  # alone at rung 1
    assert (
        report(fast, 1)[0] == "CONTINUE"
    )  # dominates slow at rung 1: slow is out of keep(2) = 1 now
    decision, last = report(slow, 3)  # ...but this is slow's last report (step 300 = max_steps)
    assert (
        decision == "CONTINUE" and "slow" not in rungs.stopped and not rungs.log["slow"]["stopped"]
    )
    rungs.on_trial_complete(None, slow, last)
    assert rungs.finished["slow"] == to_minimize([34.0, 0.013], rungs.directions)
    assert (
        rungs.decide("slow", 2, [34.0, 0.013]) == "STOP"
    )  # one report earlier it would have stopped


class Controller:
    """What the rule asks of Tune's controller when trials wait at rungs (the real one: the end-to-end
    test below): the trials, and stopping or re-marking one."""

    def __init__(self):
        self.trials, self.stopped = [], []

    def get_trials(self):
        return self.trials

    def stop_trial(self, trial):
        trial.status = "TERMINATED"
        self.stopped.append(trial.trial_id)

    def _set_trial_status(self, trial, status):
        trial.status = status


def test_waiting_at_the_rung_walkthrough():
    """promotion: wait, decision by decision (docs/moo_early_stopping.md, "Waiting at the rung"): a
    trial waits until it is in the top floor(n/rf) of its rung, or the rung is complete; then the
    rung's keep decides, as synchronous successive halving would on the whole rung."""
    from types import SimpleNamespace

    samples_left = [True]
    rungs = ParetoRungs(
        [("val/bleu", "maximize"), ("decode_seconds", "minimize")],
        lambda c, r: None,
        grace_period=1,
        reduction_factor=3,
        max_t=9,
        bounds={0: 100.0},
        max_steps=900,
        wait=True,
        samples_left=lambda: samples_left[0],
    )
    rungs.key = ("c", 0)
    tune = Controller()

    def arrive(name, bleu, seconds):
        trial = SimpleNamespace(trial_id=name, config={"cell": "c", "seed": 0}, status="RUNNING")
        tune.trials.append(trial)
        complete = rungs.complete(1, tune.trials, trial)
        decision = rungs.decide(name, 1, [bleu, seconds], complete)
        trial.status = {"PAUSE": "PAUSED", "STOP": "TERMINATED"}.get(decision, "RUNNING")
        return decision

    def promoted():
        out = [t.trial_id for t in rungs.promotions(tune)]
        for t in tune.trials:
            if t.trial_id in out:
                t.status = "RUNNING"
        return out

    assert (
        arrive("A", 40, 0.020) == "PAUSE" and promoted() == []
    )  # floor(1/3) = 0: nobody goes on yet
    assert arrive("B", 20, 0.012) == "PAUSE" and promoted() == []
    # C dominates A. The front {B (fastest), C}: B ranks first (both ends, B came first); floor(3/3) = 1
    assert arrive("C", 45, 0.016) == "PAUSE" and promoted() == ["B"]
    assert rungs.log["B"] == {
        "rung": 1,
        "position": 1,
        "recorded": 3,
        "keep": 2,
        "arrival": 2,
        "values": [20, 0.012],
        "hopeless": False,
        "tolerance": None,
        "waited": True,
        "stopped": False,
    }
    # D dominates B: the order is C, D (the front, by arrival), A, B; floor(4/3) = 1: C goes on, D waits
    assert arrive("D", 30, 0.010) == "PAUSE" and promoted() == ["C"]
    assert rungs.decide("B", 2, [25, 0.012]) == "STOP"  # rule 2b: 4th of 4, keep(4) = 2
    samples_left[0] = False  # E is the unit's last sample: with it the rung is complete
    assert arrive("E", 50, 0.030) == "CONTINUE"  # the front's slow end: judged at once, no waiting
    assert promoted() == ["D"] and tune.stopped == [
        "A"
    ]  # D on the front goes on; A (dominated by C) stops
    assert (
        rungs.log["A"]["stopped"] and rungs.log["A"]["waited"] and rungs.log["A"]["position"] == 4
    )
    assert not rungs.waiting and rungs.stopped == {"A", "B"}


def test_a_waiting_trial_is_not_started_past_its_rung_after_a_restart():
    """--resume brings a paused trial back PENDING; the rule puts it back to wait, and should it
    report at its rung again, it pauses again rather than being judged as a running trial."""
    from types import SimpleNamespace

    rungs = ParetoRungs(
        [("val/bleu", "maximize"), ("decode_seconds", "minimize")],
        lambda c, r: None,
        grace_period=1,
        reduction_factor=3,
        max_t=9,
        bounds={0: 100.0},
        max_steps=900,
        wait=True,
        samples_left=lambda: True,
    )
    rungs.key = ("c", 0)
    tune = Controller()
    assert rungs.decide("A", 1, [40, 0.020], complete=False) == "PAUSE"
    tune.trials.append(
        SimpleNamespace(trial_id="A", config={"cell": "c", "seed": 0}, status="PENDING")
    )
    assert rungs.promotions(tune) == [] and tune.trials[0].status == "PAUSED"
    assert rungs.decide("A", 1, [40, 0.020], complete=False) == "PAUSE" and rungs.waiting == {
        "A": 1
    }


class ProbeReader:
    """The objectives as the probe would give them: BLEU from the report, one decode figure per K."""

    names = ["val/bleu", "decode_seconds"]

    def decode_estimate(self, config):
        return 0.01 * config["K"]

    def estimate(self, config, name):
        return self.decode_estimate(config) if name == "decode_seconds" else None

    def value(self, config, result, name):
        return self.estimate(config, name) if name == "decode_seconds" else result.get(name)

    def __call__(self, config, result):
        return [result["val/bleu"], self.decode_estimate(config)] if "val/bleu" in result else None


def test_a_repeat_of_a_running_sample_is_told_its_outcome_when_it_ends(tmp_path):
    """TPE may repeat a sample whose trial is still running (or waiting at a rung). The repeat is not
    trained again: it stays RUNNING in Optuna and is told the same outcome when the first ends, never
    FAIL for a sample that did not fail (a FAIL that never ran, as the journal once held)."""

    from sweeps.plan.units import Unit
    from sweeps.search.base import SweepSearcher
    from sweeps.search.handout import OneAtATime
    from sweeps.search.moo import MultiObjective
    from sweeps.search.per_unit import PerUnit
    from sweeps.spec import build_sweep
    from sweeps.spec.search_space import optuna_distributions

    spec = moo_spec(
        "repeats",
        grid={"task.max_length": [4]},
        constraints=[{"name": "val/bleu", "min": 10}],
        parameters={"model.K": {"values": [1, 2]}},
        num_samples=4,
    )
    sweep = build_sweep(spec, source="test")

    unit = Unit("repeats/u", 0, 0, {"cell": "c", "seed": 0}, max_steps=20)
    scope = PerUnit(
        [unit],
        MultiObjective(sweep, ProbeReader(), 4),
        4,
        optuna_distributions(sweep.spec.parameters, sweep.param_columns),
        str(tmp_path / "optuna.journal"),
    )
    searcher = SweepSearcher([unit], scope, OneAtATime())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = searcher.suggest("a"), searcher.suggest("b")
    # the study's objective names: an Optuna ExperimentalWarning in every multi-objective launch
    assert not [w for w in caught if "set_metric_names" in str(w.message)]
    # the space is two samples: every ask after both are drawn repeats one (the third trial,
    # after its repeats, is trained again: the sampler has nothing else)
    third = searcher.suggest("c")
    assert {first["K"], second["K"]} == {1, 2} and third["K"] in (1, 2)
    study = searcher.scope.study(0)
    held = [t for t in study.trials if "duplicate_of" in t.user_attrs]
    assert held and all(
        t.state.name == "RUNNING" for t in held
    )  # the firsts still run: repeats wait
    searcher.on_trial_complete("a", {"val/bleu": 42.0, "step": 20})  # a finished, COMPLETE
    searcher.on_trial_complete("b", {"val/bleu": 30.0, "step": 10})  # b stopped at step 10: PRUNED
    searcher.on_trial_complete("c", {"val/bleu": 50.0, "step": 20})
    by_number = {t.number: t for t in study.trials}
    for t in study.trials:
        if "duplicate_of" in t.user_attrs:
            earlier = by_number[t.user_attrs["duplicate_of"]]
            assert t.state == earlier.state and t.values == earlier.values, (
                t.number,
                t.state,
                earlier.state,
            )
            assert t.constraints == earlier.constraints
    assert not [t for t in study.trials if t.state.name in ("FAIL", "RUNNING")]
    assert {t.state.name for t in study.trials} == {"COMPLETE", "PRUNED"}


def test_a_resumed_trial_keeps_the_curve_it_reported_before_the_stop(tmp_path):
    """The ``intermediate`` attribute holds every report's vector, those made before a --resume
    too: the reports before the searcher's last save, and those after it (a kill -9) that only the
    journal holds. The resumed process starts with no curve of its own."""
    from sweeps.plan.units import Unit
    from sweeps.search.base import SweepSearcher
    from sweeps.search.handout import OneAtATime
    from sweeps.search.moo import MultiObjective
    from sweeps.search.per_unit import PerUnit
    from sweeps.spec import build_sweep
    from sweeps.spec.search_space import optuna_distributions

    spec = moo_spec(
        "curve", grid={"task.max_length": [4]}, parameters={"model.K": {"values": [1, 2]}}
    )
    sweep = build_sweep(spec, source="test")
    unit = Unit("curve/u", 0, 0, {"cell": "c", "seed": 0}, max_steps=40)

    def searcher():  # a launch's searcher: the same journal, nothing else carried over
        scope = PerUnit(
            [unit],
            MultiObjective(sweep, ProbeReader(), 1),
            1,
            optuna_distributions(sweep.spec.parameters, sweep.param_columns),
            str(tmp_path / "optuna.journal"),
        )
        return SweepSearcher([unit], scope, OneAtATime())

    first = searcher()
    first.suggest("a")
    first.on_trial_result("a", {"val/bleu": 10.0, "step": 10})
    first.save(str(tmp_path / "searcher.pkl"))
    first.on_trial_result("a", {"val/bleu": 20.0, "step": 20})  # after the save: a kill -9 next
    resumed = searcher()
    resumed.restore(str(tmp_path / "searcher.pkl"))
    resumed.on_trial_result("a", {"val/bleu": 30.0, "step": 30})
    resumed.on_trial_complete("a", {"val/bleu": 40.0, "step": 40})
    (t,) = resumed.scope.study(0).trials
    assert t.state.name == "COMPLETE"
    assert {s: v[0] for s, v in t.user_attrs["intermediate"].items()} == {
        "10": 10.0,
        "20": 20.0,
        "30": 30.0,
        "40": 40.0,
    }


def test_the_progress_line_counts_trials_waiting_at_a_rung_apart():
    """A paused trial waits at its rung: not pending (it has trained), not running (it holds no slot)."""
    from types import SimpleNamespace

    from sweeps.driver.console import SweepConsole

    console = SweepConsole(6, ["K"], "val/bleu", "max")
    trials = [
        SimpleNamespace(trial_id=f"t{i}", status=s, last_result={})
        for i, s in enumerate(("TERMINATED", "RUNNING", "PAUSED", "PAUSED"))
    ]
    line = console.progress_line(trials)
    assert line.startswith(
        "[6 trials] 1 finished, 1 running, 2 waiting at a rung, 2 pending, 0 failed"
    ), line


def test_a_decode_figure_within_the_probes_noise_does_not_make_a_trial_hopeless():
    """minimal_k's first cpu run at L=10: K=5 finished at BLEU 100 with the probe's 0.0115 s, and
    K=3 (0.0119 s, 3% slower) was stopped as hopeless at report 1; trained on, it reaches 99.52."""

    def rule(tolerance):
        rungs = ParetoRungs(
            [("val/bleu", "maximize"), ("decode_seconds", "minimize")],
            lambda c, r: None,
            grace_period=3,
            reduction_factor=3,
            max_t=9,
            bounds={0: 100.0},
            max_steps=1800,
            tolerance=tolerance,
        )
        rungs.finished["K5"] = to_minimize([100.0, 0.0115], rungs.directions)
        return rungs

    assert rule(None).decide("K3", 1, [20.0, 0.0119]) == "STOP"  # exact dominance: the old rule
    tied = rule([0.0, 0.10])
    assert tied.decide("K3", 1, [20.0, 0.0119]) == "CONTINUE"
    assert (
        tied.decide("K32", 1, [20.0, 0.0140]) == "STOP" and tied.log["K32"]["hopeless"]
    )  # 18% slower
    assert tied.log["K32"]["tolerance"] == [0.0, 0.10]  # the report says how the rule compared


# -- the decode probe's table ----------------------------------------------------------------------


def test_probe_interpolates_in_k_between_anchors():
    assert k_anchors(1, 32) == [1, 2, 4, 8, 16, 32]
    assert k_anchors(3, 20) == [3, 4, 8, 16, 20]
    task, seed = {"name": "copy", "max_length": 10}, 0
    model = {"attention": "memory", "preset": "tiny", "lr": 0.003}
    key = arch_key(task, model, seed)
    assert key == arch_key(
        task, {**model, "K": 5, "lr": 0.1}, seed
    )  # K and lr are not part of the key
    table = DecodeEstimates(
        [{"key": key, "K": 4, "seconds": 1.0}, {"key": key, "K": 8, "seconds": 2.0}]
    )
    assert table.estimate(task, {**model, "K": 6}, seed) == pytest.approx(1.5)
    assert table.estimate(task, {**model, "K": 8}, seed) == 2.0
    assert table.estimate(task, {**model, "K": 2}, seed) == pytest.approx(
        0.5
    )  # the end segment, extended
    assert table.estimate({"name": "copy", "max_length": 20}, {**model, "K": 6}, seed) is None


def test_probe_table_keeps_training_figures_beside_decode_time():
    """A study that names train_step_seconds or train_peak_mb (objective or constraint) gets them
    from the probe; a table measured for decode time alone lacks them, so they are measured."""
    from sweeps.spec import build_sweep
    from sweeps.spec.objectives import produced_metrics
    from sweeps.timing.probe import probed_fields

    task, seed = {"name": "copy", "max_length": 10}, 0
    model = {"attention": "memory", "preset": "tiny"}
    key = arch_key(task, model, seed)
    table = DecodeEstimates(
        [
            {"key": key, "K": 4, "seconds": 1.0, "train_step_seconds": 0.2, "train_peak_mb": 40},
            {"key": key, "K": 8, "seconds": 2.0, "train_step_seconds": 0.3, "train_peak_mb": 60},
        ]
    )
    assert table.estimate(task, {**model, "K": 6}, seed, name="train_peak_mb") == 50
    assert table.estimate(task, {**model, "K": 6}, seed, "train_step_seconds") == pytest.approx(
        0.25
    )
    assert table.estimate(task, {**model, "K": 6}, seed) == pytest.approx(1.5)
    decode_only = DecodeEstimates([{"key": key, "K": 4, "seconds": 1.0}])
    assert decode_only.has(key, 4) and not decode_only.has(key, 4, ["seconds", "train_peak_mb"])

    spec = moo_spec(
        "train_cost",
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "train_step_seconds", "goal": "minimize"},
        ],
        constraints=[{"name": "train_peak_mb", "max": 2000}],
    )
    sweep = build_sweep(spec, source="test")  # the dry run's checks: accepted
    assert {"train_step_seconds", "train_peak_mb"} <= set(produced_metrics(sweep.spec))
    assert probed_fields(sweep.spec) == ["seconds", "train_step_seconds", "train_peak_mb"]
    assert sweep.spec.constraints[0].violation(2500.0, None) == 500.0


def test_isotonic_is_the_nearest_non_decreasing_sequence():
    """Pool-adjacent-violators against the definition. The least-squares non-decreasing fit is
    made of the means of contiguous blocks, so trying every split into blocks (2^(n-1)) whose
    means do not decrease finds it; the fit must be that sequence."""
    rng = random.Random(3)
    for _ in range(300):
        values = [
            rng.choice([1.0, 2.0, 3.0, 4.0, rng.uniform(0, 5)]) for _ in range(rng.randint(1, 7))
        ]
        n, best = len(values), None
        for mask in range(2 ** (n - 1)):
            cuts = [0] + [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
            seq = [sum(values[a:b]) / (b - a) for a, b in zip(cuts, cuts[1:]) for _ in range(b - a)]
            sse = sum((x - v) ** 2 for x, v in zip(seq, values))
            if all(x <= y + 1e-12 for x, y in zip(seq, seq[1:])) and (
                best is None or sse < best[0]
            ):
                best = (sse, seq)
        assert isotonic(values) == pytest.approx(best[1]), values
    assert isotonic([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]  # already in order: the measurement itself


def test_probe_noise_cannot_order_architectures_whose_cost_does_not_differ():
    """The tiny copy model's measured anchors (ms): K = 2..16 cost the same up to noise, in no
    order; above, the memory's cost shows. The estimates never fall as K grows, pool the noisy
    anchors, and keep the measured figure where the cost grows."""
    task, seed = {"name": "copy", "max_length": 8}, 0
    model = {"attention": "memory", "preset": "tiny"}
    key = arch_key(task, model, seed)
    measured = {
        2: 4.803,
        4: 4.518,
        8: 4.694,
        16: 4.653,
        32: 4.968,
        64: 5.461,
        128: 6.306,
        256: 8.324,
    }
    table = DecodeEstimates(
        [{"key": key, "K": k, "seconds": v} for k, v in measured.items()]
        + [{"key": arch_key(task, {"attention": "bahdanau"}, seed), "K": None, "seconds": 3.0}]
    )
    est = {k: table.estimate(task, {**model, "K": k}, seed) for k in range(2, 257)}
    assert all(est[k] <= est[k + 1] + 1e-12 for k in range(2, 256))
    assert (
        est[2] == est[4] == pytest.approx((4.803 + 4.518) / 2)
    )  # K=4 measured faster than K=2: pooled
    assert est[8] == est[16] == pytest.approx((4.694 + 4.653) / 2)
    for k in (32, 64, 128, 256):
        assert est[k] == measured[k]
    assert table.estimate(task, {"attention": "bahdanau"}, seed) == 3.0  # no K: as measured
    assert (
        table.entries[0]["seconds"] == 4.803
    )  # the table keeps the measurement; the fit is made on load


# -- the dry-run checks ----------------------------------------------------------------------------


def moo_spec(name="moo", **over):
    spec = tiny_spec(
        name,
        model={"preset": "tiny", "attention": "memory"},
        grid={"task.max_length": [4, 6]},
        parameters={
            "model.K": {"min": 1, "max": 8, "distribution": "int_log_uniform"},
            "model.position_encoding": {"values": [False, True]},
        },
        num_samples=4,
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "decode_seconds", "goal": "minimize"},
        ],
        constraints=[
            {"name": "val/bleu", "min": 10},
            {"name": "val/bleu", "within": 1.0, "of": {"attention": "bahdanau"}},
        ],
        early_terminate={"type": "pareto", "grace_period": 1, "reduction_factor": 3},
    )
    spec.update(over)
    return spec


def dry_run(tmp_path, spec):
    path = write_spec(tmp_path, spec)
    done = subprocess.run(
        [sys.executable, "sweeps/launch.py", str(path), "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.train
def test_dry_run_accepts_a_multi_objective_study(tmp_path):
    code, out, err = dry_run(tmp_path, moo_spec())
    assert code == 0, err
    assert (
        "2 cells x 1 seed(s) = 2 grid points, 10 trials" in out
    )  # 4 samples + 1 baseline per cell


@pytest.mark.parametrize(
    "change, where, words",
    [
        ({"metric": {"name": "val/bleu", "goal": "maximize"}}, "objectives", "either `metric`"),
        (
            {
                "objectives": [
                    {"name": "val/bleu", "goal": "maximize"},
                    {"name": "bleu_score", "goal": "minimize"},
                ]
            },
            "objectives[1].name",
            "'bleu_score' is not a metric this sweep produces",
        ),
        (
            {"constraints": [{"name": "val/sacrebleu", "min": 10}]},
            "constraints[0].name",
            "never produces",
        ),
        (
            {"early_terminate": {"type": "asha"}},
            "early_terminate.type",
            "asha ranks trials on one metric",
        ),
        (
            {"early_terminate": {"type": "pareto", "tolerance": {"decode_secs": 0.1}}},
            "early_terminate.tolerance.decode_secs",
            "not an objective of this sweep",
        ),
        (
            {"early_terminate": {"type": "none", "tolerance": {"decode_seconds": 0.1}}},
            "early_terminate.tolerance",
            "read by the Pareto rung rule only",
        ),
        (
            {"early_terminate": {"type": "none", "promotion": "wait"}},
            "early_terminate.promotion",
            "read by the Pareto rung rule only",
        ),
        (
            {
                "constraints": [
                    {"name": "val/bleu", "within": 1.0, "of": {"attention": "bahdanau", "K": 4}}
                ]
            },
            "K",
            "not a model setting nor an option of attention 'bahdanau'",
        ),
    ],
)
def test_dry_run_refuses_in_one_line(tmp_path, change, where, words):
    code, out, err = dry_run(tmp_path, moo_spec(**change))
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert where in lines[0] and words in lines[0], lines[0]


def test_the_worked_example_of_the_docs():
    """docs/moo_early_stopping.md's worked example, decision by decision."""
    rungs = ParetoRungs(
        [("val/bleu", "maximize"), ("decode_seconds", "minimize")],
        lambda c, r: None,
        grace_period=1,
        reduction_factor=3,
        max_t=9,
        bounds={0: 100.0},
        max_steps=900,
        tolerance=[0.0, 0.10],
    )  # the default (sweeps.spec.objectives.DEFAULT_TOLERANCE)
    first = [
        (16, 40, 0.020, "CONTINUE"),
        (32, 35, 0.026, "STOP"),
        (2, 20, 0.012, "CONTINUE"),
        (4, 18, 0.014, "STOP"),
        (8, 45, 0.016, "CONTINUE"),
        (1, 10, 0.010, "CONTINUE"),
    ]
    for k, bleu, seconds, decision in first:
        assert rungs.decide(f"K{k}", 1, [bleu, seconds]) == decision, k
    # the docs' order at K=4's arrival: K=16, K=2, then K=32, K=4 (rank 1, both ends of it: arrival
    # breaks the tie)
    assert rungs.log["K4"]["position"] == 4
    # report 2: K=16 is ranked again at rung 1, which holds six now: K=8 (5th) dominates it, and it is
    # 4th of keep = max(keep(6) = 2, 3 on the rung's front). ASHA would have let it go on (it came first).
    assert rungs.decide("K16", 2, [55, 0.020]) == "STOP"
    assert rungs.log["K16"] == {
        "rung": 1,
        "position": 4,
        "recorded": 6,
        "keep": 3,
        "arrival": 1,
        "values": [40.0, 0.020],
        "hopeless": False,
        "stopped": True,
        "tolerance": [0.0, 0.10],
        "report": 2,
    }
    for k in (8, 1, 2):  # still inside rung 1's keep at report 2
        assert rungs.decide(f"K{k}", 2, [50, 0.016]) == "CONTINUE", k
    second = [(8, 70, 0.016, "CONTINUE"), (1, 30, 0.010, "CONTINUE"), (2, 28, 0.012, "STOP")]
    for k, bleu, seconds, decision in second:
        assert rungs.decide(f"K{k}", 3, [bleu, seconds]) == decision, k
    rungs.finished["K8"] = to_minimize(
        [100.0, 0.016], rungs.directions
    )  # K8 ran to the end at BLEU 100
    assert (
        rungs.decide("K1", 4, [35.0, 0.010]) == "CONTINUE"
    )  # faster than K=8: it can still join the front
    assert (
        rungs.decide("K12", 4, [80.0, 0.019]) == "STOP"
    )  # hopeless: 16% slower, and BLEU cannot pass 100
    assert rungs.log["K12"]["hopeless"]
    assert rungs.decide("K10", 4, [80.0, 0.017]) == "CONTINUE"  # within 10% of K=8's 0.016 s: a tie


def test_results_md_says_why_each_trial_stopped():
    """The three reasons the rule stops a trial, counted apart in results.md's summary line."""
    from sweeps.report.moo import _stop_reasons

    logs = [
        {"rung": 3, "position": 4, "recorded": 4, "keep": 2, "stopped": True},
        {"rung": 3, "position": 3, "recorded": 6, "keep": 2, "stopped": True, "report": 5},
        {"rung": 3, "position": 5, "recorded": 7, "keep": 3, "stopped": True, "report": 4},
        {"rung": None, "report": 6, "hopeless": True, "stopped": True},
        {"rung": 3, "position": 6, "recorded": 8, "keep": 3, "stopped": True, "waited": True},
    ]
    # a rung by its report: with grace 1 and rf 3 the rung at report 3 is the second
    assert _stop_reasons(logs) == (
        "1 ranked out at the rung at report 3, 2 pushed out of the rung at report 3 by later "
        "arrivals, 1 hopeless at report 6, 1 ranked out at the rung at report 3 after waiting for "
        "it to fill"
    )


# -- a tiny study, end to end: real Ray, real Optuna, W&B offline ----------------------------------


@pytest.mark.ray
def test_tiny_multi_objective_study_end_to_end(tmp_path, local_ray, monkeypatch):
    """Interrupted (a real SIGINT when the baseline and two searched trials have finished) and
    resumed: the rung rule goes on comparing with what was recorded before the stop."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sweeps.launch import main

    spec = moo_spec(
        "moo_e2e",
        task={"name": "copy", "max_length": 4, "train_size": 256, "val_size": 16, "batch_size": 16},
        grid={"task.max_length": [4]},
        parameters={
            "model.K": {"values": [1, 2, 4, 8]},
            "model.position_encoding": {"values": [False, True]},
        },
        num_samples=5,
        timing={
            "enabled": False,
            "max_seconds": 0.3,
            "repeats": 3,  # the probe: each architecture briefly
            "calibration_seconds": 0.3,
        },
        constraints=[
            {"name": "val/bleu", "min": 0},  # 20 steps learn next to nothing: bounds they can meet
            {"name": "val/bleu", "within": 5.0, "of": {"attention": "bahdanau"}},
        ],
        wandb={"project": "test", "mode": "offline", "log_heatmaps": False},
    )
    path = write_spec(tmp_path, spec)
    args = [str(path), "--output", str(tmp_path / "out"), "--verbose", "0"]
    out = tmp_path / "out" / "moo_e2e"
    with (
        monkeypatch.context() as hooked
    ):  # Ctrl-C at a report at step 10 once 2 trials have finished
        for name, value in interrupt_env(out, step=10, finished=2).items():
            hooked.setenv(name, value)
        assert main(args) == 130
    assert (out.parent / "moo_e2e.interrupted.json").exists()
    assert main(args + ["--resume"]) == 0
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    study = optuna.load_study(study_name="moo_e2e/length-4-seed0", storage=storage)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    trained = [t for t in study.trials if "duplicate_of" not in t.user_attrs]
    assert len(trained) == 5
    # a repeat of a sample is told its first trial's outcome, even one asked before the interruption
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in study.trials), [
        t.state.name for t in study.trials
    ]
    assert len({tuple(sorted(t.params.items())) for t in trained}) == 5  # no sample trained twice
    states = [t.state.name for t in trained]
    assert "PRUNED" in states and "COMPLETE" in states, states
    for t in trained:
        assert t.user_attrs["intermediate"], t.number  # every report's two objectives
        assert t.user_attrs["decode_seconds_estimate"] > 0
        if t.state.name == "PRUNED":
            assert t.user_attrs["rung"]["stopped"] and t.values is None
        else:
            assert t.values[1] == pytest.approx(t.user_attrs["decode_seconds_estimate"])
            assert set(t.constraints) == {
                "val/bleu >= 0",
                "val/bleu within 5 of attention=bahdanau",
            }
    # each arrival at the rung was ranked among all before it, those before the interruption included:
    # a rule that forgot them on --resume would count a later arrival as the first again (trials
    # running at the stop arrive again when they restart; the two that had finished do not)
    arrivals = sorted(
        t.user_attrs["rung"]["arrival"]
        for t in trained
        if (t.user_attrs.get("rung") or {}).get("rung") == 1
    )
    assert arrivals == list(range(1, len(arrivals) + 1)) and len(arrivals) >= 2, arrivals
    baseline = study.user_attrs["baseline"]
    assert (
        baseline["model"] == {"model.attention": "bahdanau"} and "val/bleu" in baseline["metrics"]
    )
    best = study.best_trials  # Optuna's own Pareto front, read from the journal
    assert best and all(
        t.state.name == "COMPLETE" and max(t.constraints.values()) <= 0 for t in best
    )
    from optuna.visualization.matplotlib import plot_pareto_front

    assert plot_pareto_front(study, target_names=["val/bleu", "decode_seconds"]) is not None
    figure = optuna.visualization.plot_pareto_front(
        study, target_names=["val/bleu", "decode_seconds"]
    )  # plotly
    shown = sum(len(trace.x) for trace in figure.data if trace.x is not None)
    assert shown == sum(t.state.name == "COMPLETE" for t in study.trials), (
        shown
    )  # every finished trial, a point
    md = (out / "results.md").read_text()
    assert "## Multi-objective search" in md and "### Answers" in md
    assert "- L=4: smallest K with val/bleu within 5 of attention=bahdanau: K=" in md
    assert "Pareto front:" in md and "Hypervolume" in md
    assert (out / "moo_front.png").stat().st_size > 0 and (
        out / "moo_hypervolume.png"
    ).stat().st_size > 0
    from sweeps.report.local import main as rebuild

    rebuild([str(out)])  # the page rebuilt from results.csv and the journal is the launcher's page
    assert (out / "results.md").read_text() == md
    import pandas as pd

    rows = pd.read_csv(out / "results.csv")
    assert (
        len(rows) == 6 and (rows["attention"] == "bahdanau").sum() == 1
    )  # 5 samples + the baseline
    # results.csv holds what each Optuna trial was told: its decode_seconds objective is the
    # probe's figure, in the column its user attribute is named after (the timing stage's own
    # figure, decode_seconds, is another measurement)
    by_id = pd.read_csv(out / "results.csv", dtype={"trial_id": str}).set_index("trial_id")
    assert (by_id["decode_seconds_estimate"] > 0).all()
    for t in trained:
        told = by_id.loc[t.user_attrs["ray_trial_id"], "decode_seconds_estimate"]
        assert told == pytest.approx(t.user_attrs["decode_seconds_estimate"], rel=1e-12), t.number
        if t.values is not None:
            assert told == pytest.approx(t.values[1], rel=1e-12), t.number
    from sweeps.report.moo import wandb_report

    report = wandb_report(out, "an-entity", "test", "moo_e2e")  # built, not saved: offline, no key
    text = repr(report.blocks)
    assert "Multi-objective search" in text and "Pareto front" in text and "smallest K with" in text
    # each run's config names its mechanism and K as results.csv does, and the baseline as one
    # (the baseline's run was told apart only by a nested `set`, the samples' had no `attention`)
    from sweep_helpers import wandb_read

    for row in rows.to_dict("records"):
        run = wandb_read(sorted((out / "wandb").glob(f"offline-run-*-{row['trial_id']}"))[-1])
        config = run["config"]
        # and its summary holds the probe figure its Optuna trial was told, the timing stage off
        told = run["summary"].get("decode_seconds_estimate")
        assert told == pytest.approx(row["decode_seconds_estimate"], rel=1e-12), row["trial_id"]
        assert config["attention"] == row["attention"]
        assert config.get("baseline", False) == (row["attention"] == "bahdanau")
        assert config.get("K") == (None if pd.isna(row["K"]) else row["K"])
        assert "model.attention" not in config and "model.K" not in config


@pytest.mark.slow
@pytest.mark.ray
def test_a_study_on_training_cost_gets_it_from_the_probe_before_training(tmp_path, local_ray):
    """Objectives val/bleu and train_step_seconds, a constraint on train_peak_mb: the probe
    measures a training step and its peak for every architecture before Tune starts, each trial's
    Optuna record carries the estimates, and the objective values are the probe's."""
    import json

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sweeps.launch import main

    spec = moo_spec(
        "moo_train",
        task={"name": "copy", "max_length": 4, "train_size": 256, "val_size": 16, "batch_size": 16},
        grid={"task.max_length": [4]},
        parameters={"model.K": {"values": [1, 8]}},
        num_samples=2,
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "train_step_seconds", "goal": "minimize"},
        ],
        constraints=[{"name": "train_peak_mb", "max": 2000}],
        early_terminate={"type": "none"},
        timing={"enabled": False, "max_seconds": 0.3, "repeats": 3, "calibration_seconds": 0.3},
        wandb={"project": "test", "mode": "disabled"},
    )
    path = write_spec(tmp_path, spec)
    assert main([str(path), "--output", str(tmp_path / "out"), "--verbose", "0"]) == 0
    out = tmp_path / "out" / "moo_train"
    entries = json.loads((out / "decode_probe.json").read_text())["entries"]
    assert {e["K"] for e in entries} == {1, 8}
    assert all(e["train_step_seconds"] > 0 and e["train_peak_mb"] > 0 for e in entries), entries
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    (name,) = optuna.get_all_study_names(storage)
    trials = optuna.load_study(study_name=name, storage=storage).get_trials()
    done = [
        t
        for t in trials
        if t.state == optuna.trial.TrialState.COMPLETE and "duplicate_of" not in t.user_attrs
    ]  # (a repeat of a sample is told its earlier trial's outcome)
    assert done, [t.state for t in trials]
    for t in done:
        assert t.values[1] == pytest.approx(t.user_attrs["train_step_seconds_estimate"])
        assert t.user_attrs["train_peak_mb_estimate"] > 0
        assert all(v <= 0 for v in t.constraints.values()), t.constraints  # 2,000 MiB: met


def test_the_report_says_where_each_second_objective_comes_from():
    """results.md named any second objective "the decode probe's figure"; a training-cost objective
    comes from the training probe, anything else from the trial's own reports."""
    from sweeps.report.moo import second_objective_note

    assert "decode probe" in second_objective_note("decode_seconds")
    for name in ("train_step_seconds", "train_peak_mb"):
        note = second_objective_note(name)
        assert "training probe" in note and "decode probe" not in note
    assert second_objective_note("val/loss") == "val/loss is what the trial reported."
