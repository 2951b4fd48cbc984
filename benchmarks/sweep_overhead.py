"""The orchestration tax: a sweep's trainings in a plain Lightning loop against the launcher.

    .venv/bin/python benchmarks/sweep_overhead.py            # sweeps/quickstart.yaml as it is (~3-4 min on 2 cores)
    .venv/bin/python benchmarks/sweep_overhead.py --quick    # the same trials, 300 steps on 4,000 sequences
    .venv/bin/python benchmarks/sweep_overhead.py --rounds 2 # plain, launcher, then launcher, plain: a load
                                                             # that changes mid-run favours neither side

In one run:

1. **plain**: every trial of the sweep (``sweeps/quickstart.yaml``) trained by a plain Lightning
   ``Trainer`` with the trial's own settings (seed, data, model, trainer section, torch threads),
   each in a fresh process, as many at a time as the launcher runs (two on a 2-core machine); no
   Ray, W&B, checkpoints, report or timing stage.
2. **launcher**: ``sweeps/launch.py`` on the same study, the same overrides, FIFO, the timing stage
   off (``--set timing.enabled=false``), the held-out stage off, W&B offline, a fresh local Ray instance.

It prints ONE JSON line: ``plain_s``, ``launcher_s``, ``overhead_ratio`` (launcher / plain),
``difference_s``, ``breakdown`` (where the extra seconds go, as wall-clock seconds: per-trial
costs summed over trials and divided by the trials running at once; ``other_s`` is what the named
parts leave, so the breakdown sums to ``difference_s``), ``per_trial`` (each phase's mean
seconds per trial), the BLEU of each model both ways (same seed and settings: they should agree)
and the machine and its load. With ``--rounds N`` every figure is the mean over the rounds
(``overhead_ratio`` = mean launcher wall / mean plain wall) and ``round_ratios`` lists each round's.
Per-trial phases come from each trial's ``phases.json``
(:mod:`sweeps.trial.phases`); the driver's from wrapping the launcher's own functions in its process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _args import positive_int  # noqa: E402
from _children import run_child  # noqa: E402

QUICK = ["trainer.max_steps=300", "trainer.val_check_interval=100", "task.train_size=4000"]
TRIAL_PHASES = ("setup", "wandb_init", "checkpoint", "report", "heatmaps", "wandb_close")


# -- the plain loop (one process per trial) -------------------------------------------------------


def plain_trial(plan_file: str, out_file: str) -> None:
    """One trial in a plain Lightning loop: what the trial does, minus Ray, W&B and checkpoints."""
    entered = time.time()
    import lightning.pytorch as pl
    import torch

    from sweeps.build import build_datamodule, build_module, trainer_kwargs

    plan = json.loads(Path(plan_file).read_text())
    imported = time.time()
    t0 = time.perf_counter()
    torch.set_num_threads(max(1, int(plan["cpu"])))
    pl.seed_everything(plan["seed"], workers=True, verbose=False)
    dm = build_datamodule(plan["task"], plan["seed"])
    dm.prepare_data()
    dm.setup("fit")
    module = build_module(plan["model"], dm)
    setup = time.perf_counter() - t0
    kw = trainer_kwargs(plan["trainer"])  # as the trial reads its trainer section
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kw,
    )
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=dm)
    fit = time.perf_counter() - t0
    bleu = float(trainer.callback_metrics.get("val/bleu", float("nan")))
    Path(out_file).write_text(
        json.dumps(
            {
                "entered": entered,
                "imported": imported,
                "setup": setup,
                "fit": fit,
                "left": time.time(),
                "bleu": bleu,
                "cell": plan["cell"],
            }
        )
    )


def run_plain(sweep, concurrency: int, work: Path) -> tuple[float, list[dict[str, Any]]]:
    plans = []
    for i, p in enumerate(sweep.plans):
        f = work / f"plan{i}.json"
        f.write_text(
            json.dumps(
                {
                    "cell": p.cell.name,
                    "seed": p.seed,
                    "task": p.task,
                    "model": p.model,
                    "trainer": p.trainer,
                    "cpu": sweep.spec.resources.cpu,
                }
            )
        )
        plans.append((f, work / f"plain{i}.json"))
    start = time.time()
    running: list[tuple[subprocess.Popen, float]] = []
    spawned: list[float] = []
    queue = list(plans)
    while queue or running:
        while queue and len(running) < concurrency:
            plan_file, out_file = queue.pop(0)
            spawned.append(time.time())
            cmd = [sys.executable, __file__, "--plain-trial", str(plan_file), str(out_file)]
            running.append(
                (
                    subprocess.Popen(
                        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                    ),
                    spawned[-1],
                )
            )
        time.sleep(0.05)
        for proc, t in list(running):
            if proc.poll() is not None:
                if proc.returncode != 0:
                    raise SystemExit(f"plain trial failed:\n{proc.stderr.read().decode()[-2000:]}")
                running.remove((proc, t))
    wall = time.time() - start
    records = [json.loads(out.read_text()) | {"spawned": s} for (_, out), s in zip(plans, spawned)]
    return wall, records


# -- the launcher (its own process, its functions wrapped to time the driver's stages) -------------


def launcher_child(out_file: str, argv: list[str]) -> int:
    started = time.time()
    stages: dict[str, float] = {}

    import sweeps.driver.cluster as cluster
    import sweeps.report.local as report
    import sweeps.stages.train as experiment

    def timed(module, name: str, key: str):
        fn = getattr(module, name)

        def wrapper(*a, **kw):
            t0 = time.time()
            try:
                return fn(*a, **kw)
            finally:
                stages[key + "_start"] = t0
                stages[key + "_end"] = time.time()

        setattr(module, name, wrapper)

    timed(cluster, "init_ray", "ray_start")
    timed(experiment, "run_tune", "tune")
    timed(report, "build_local_report", "report")
    from sweeps import launch

    code = launch.main(argv)
    Path(out_file).write_text(
        json.dumps({"started": started, "ended": time.time(), "stages": stages, "code": code})
    )
    return code


def run_launcher(spec: str, overrides: list[str], work: Path) -> tuple[float, dict[str, Any], Path]:
    out = work / "launcher"
    argv = [
        spec,
        "--output",
        str(out),
        "--verbose",
        "0",
        "--address",
        "local",
        "--set",
        "timing.enabled=false",
        "--set",
        "heldout.enabled=false",  # the plain loop evaluates nothing on test either
    ]
    for o in overrides:
        argv += ["--set", o]
    record = work / "launcher.json"
    env = dict(os.environ, WANDB_MODE="offline", RAY_USAGE_STATS_ENABLED="0")
    start = time.time()
    # SIGTERM passed on: a benchmark stopped from outside stops its launch and the launch's Ray
    proc = run_child(
        [sys.executable, __file__, "--launcher-child", str(record), "--", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    wall = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"launcher failed ({proc.returncode}):\n{proc.stdout.decode()[-3000:]}")
    info = json.loads(record.read_text()) | {"spawned": start}
    return wall, info, out


# -- the breakdown ------------------------------------------------------------------------------


def trial_records(out: Path) -> list[dict[str, Any]]:
    from sweeps.trial.phases import PHASES_FILE

    return [json.loads(p.read_text()) for p in sorted(out.glob(f"*/*/{PHASES_FILE}"))]


def slot_gaps(records: list[dict[str, Any]], first_free: float, concurrency: int) -> list[float]:
    """Seconds each trial waited between its slot coming free (the previous trial in it returned,
    or the start) and its function starting: the scheduler, a new worker, its imports."""
    slots = [first_free] * concurrency
    gaps = []
    for r in sorted(records, key=lambda r: r["entered"]):
        i = min(range(concurrency), key=lambda j: slots[j])
        gaps.append(max(0.0, r["entered"] - slots[i]))
        slots[i] = r["left"]
    return gaps


def breakdown(
    plain_s: float,
    plain: list[dict],
    launcher_s: float,
    info: dict,
    trials: list[dict],
    concurrency: int,
) -> tuple[dict[str, float], dict[str, float]]:
    st = info["stages"]
    c = float(concurrency)
    per_trial: dict[str, float] = {}
    parts: dict[str, float] = {}
    # driver before the Tune run: process start, imports, spec, data preparation (Ray's start apart)
    parts["driver_start_s"] = (
        st["tune_start"] - info["spawned"] - (st["ray_start_end"] - st["ray_start_start"])
    )
    parts["ray_start_s"] = st["ray_start_end"] - st["ray_start_start"]
    gaps = slot_gaps(trials, st["tune_start"], concurrency)
    plain_gaps = [
        r["entered"] - r["spawned"] + (r["imported"] - r["entered"]) for r in plain
    ]  # process start + imports
    per_trial["worker_start"] = sum(gaps) / max(1, len(gaps))
    per_trial["plain_process_start"] = sum(plain_gaps) / max(1, len(plain_gaps))
    parts["worker_start_s"] = (sum(gaps) - sum(plain_gaps)) / c
    for name in TRIAL_PHASES:
        total = sum(t["phases"].get(name, 0.0) for t in trials)
        per_trial[name] = total / max(1, len(trials))
        parts[f"{name}_s"] = total / c
    parts["setup_s"] -= (
        sum(r["setup"] for r in plain) / c
    )  # the plain loop builds data and model too
    fit_l = sum(
        t["phases"].get("fit", 0.0)
        - t["phases"].get("checkpoint", 0.0)
        - t["phases"].get("report", 0.0)
        for t in trials
    )
    fit_p = sum(r["fit"] for r in plain)
    per_trial["training_launcher"], per_trial["training_plain"] = (
        fit_l / max(1, len(trials)),
        fit_p / max(1, len(plain)),
    )
    parts["slower_training_s"] = (
        fit_l - fit_p
    ) / c  # CPU taken by Ray's and W&B's processes, per-step logging
    parts["tune_end_s"] = st["tune_end"] - max(
        t["left"] for t in trials
    )  # Tune's teardown, reading results back
    parts["results_and_report_s"] = (
        info["ended"] - st["tune_end"]
    )  # results.csv, results.md, plots, W&B checks
    parts["process_exit_s"] = (info["spawned"] + launcher_s) - info["ended"]
    difference = launcher_s - plain_s
    named = sum(parts.values())
    parts["other_s"] = difference - named  # packing, the approximation of dividing by concurrency
    return {k: round(v, 2) for k, v in parts.items()}, {
        k: round(v, 2) for k, v in per_trial.items()
    }


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def spec_path(text: str) -> str:
    """``--spec``'s file: as given when it is absolute or found from the current folder, else
    relative to the repository root (so the default, and ``sweeps/<name>.yaml``, work from any
    folder)."""
    path = Path(text)
    if path.is_absolute() or path.exists() or not (ROOT / path).exists():
        return text
    return str(ROOT / path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, the sweep file loaded with the overrides (``args.sweep``): a file that
    is missing or wrong, or a bad ``--set``, is refused here, before anything runs."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--spec",
        type=spec_path,
        default="sweeps/quickstart.yaml",
        help="the sweep file (default sweeps/quickstart.yaml); a relative path not found from the "
        "current folder is read from the repository root",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="300 steps on 4,000 sequences per trial (about a minute each way)",
    )
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--keep", type=Path, help="keep the runs' files here (default: a temporary folder)"
    )
    p.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="measure N times, the order alternating (plain first, then launcher first, ...): a machine "
        "whose load changes during the run favours neither; the figures are the rounds' means",
    )
    args = p.parse_args(argv)
    from sweeps.errors import SpecError
    from sweeps.spec import load_spec

    args.overrides = (QUICK if args.quick else []) + args.overrides  # both ways run these
    try:
        args.sweep = load_spec(
            args.spec, overrides=args.overrides + ["timing.enabled=false", "heldout.enabled=false"]
        )
    except SpecError as exc:
        p.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    from benchmarks._machine import cpu_model

    overrides, sweep = args.overrides, args.sweep
    spec = str(Path(args.spec).resolve())  # the launcher runs from the repository root
    concurrency = max(
        1, min(len(sweep.plans), int((os.cpu_count() or 1) // sweep.spec.resources.cpu))
    )
    load_before = load_average()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="sweep-overhead-") as tmp:
        for r in range(max(1, args.rounds)):
            work = (args.keep or Path(tmp)) / f"round{r}"
            work.mkdir(parents=True, exist_ok=True)
            if r % 2 == 0:
                plain_s, plain = run_plain(sweep, concurrency, work)
                launcher_s, info, out = run_launcher(spec, overrides, work)
            else:
                launcher_s, info, out = run_launcher(spec, overrides, work)
                plain_s, plain = run_plain(sweep, concurrency, work)
            trials = trial_records(out)
            if len(trials) != len(plain):
                raise SystemExit(
                    f"found {len(trials)} phases.json for {len(plain)} trials under {out}"
                )
            parts, per_trial = breakdown(plain_s, plain, launcher_s, info, trials, concurrency)
            import csv

            rows = list(csv.DictReader((out / sweep.name / "results.csv").open()))
            rounds.append(
                (launcher_s / plain_s, plain_s, launcher_s, plain, parts, per_trial, rows)
            )
    ratios = [x[0] for x in rounds]
    n = len(rounds)
    plain_s, launcher_s = sum(x[1] for x in rounds) / n, sum(x[2] for x in rounds) / n
    plain, rows = rounds[-1][3], rounds[-1][6]
    parts = {k: round(sum(x[4][k] for x in rounds) / n, 2) for k in rounds[0][4]}
    per_trial = {k: round(sum(x[5][k] for x in rounds) / n, 2) for k in rounds[0][5]}
    result = {
        "overhead_ratio": round(launcher_s / plain_s, 3),
        "plain_s": round(plain_s, 2),
        "launcher_s": round(launcher_s, 2),
        "difference_s": round(launcher_s - plain_s, 2),
        "breakdown": parts,
        "per_trial": per_trial,
        "round_ratios": [round(x, 3) for x in ratios],
        "trials": len(plain),
        "concurrency": concurrency,
        "bleu_plain": {r["cell"]: round(r["bleu"], 2) for r in plain},
        "bleu_launcher": {
            r["cell"]: round(float(r["val/bleu"]), 2) for r in rows if r.get("val/bleu")
        },
        "spec": args.spec,
        "overrides": overrides,
        "machine": f"{cpu_model()}, {os.cpu_count()} logical cores",
        "load_before": load_before,
        "load_after": load_average(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--plain-trial":
        plain_trial(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "--launcher-child":
        sys.exit(launcher_child(sys.argv[2], sys.argv[4:]))
    else:
        main()
