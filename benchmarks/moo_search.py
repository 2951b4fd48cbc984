"""Does the multi-objective search with Pareto early stopping recover the full grid's front, and
for how much of the grid's compute?

Run it (from the repository root):

    .venv/bin/python benchmarks/moo_search.py --quick --output bench-out   # one length (8): ~5 min on 2 cores
    .venv/bin/python benchmarks/moo_search.py --output bench-out           # two lengths (8, 16), 900 steps: ~18 min

On a copy-task study small enough to grid on 2 CPU cores (memory attention, K x position
encodings with K in {2, ..., 256}, tiny model; 8 samples of its 16 architectures per length), it runs

1. the decode probe once (``sweeps/timing/probe.py``): every architecture's decode seconds, alone;
2. the full grid once, every architecture trained to the end (a plain grid study, FIFO);
3. the multi-objective search (``objectives: val/bleu max, decode_seconds min``, TPE, the Pareto
   rung rule) over the same space, once per search seed (``--seeds``, at least 3),

all through ``sweeps/launch.py`` on a local Ray. Both fronts use the same decode figures (the
probe's table, shared), so the comparison is about what the search found, not about timing noise.
It prints one JSON line:

- ``hypervolume_ratio``: {mean, min} over seeds of hv(search's finished trials) / hv(grid), the
  same reference point (BLEU 0, 1.1 x the slowest architecture), per length then averaged;
- ``compute_fraction``: {mean, max} over seeds of training steps the search used (stopped trials'
  steps included) / the grid's;
- ``stopping_fraction``: the rung rule's own share of the saving, training steps used / the steps
  had every sampled trial run to the end (the rest of ``compute_fraction`` is sampling fewer
  architectures than the grid trains);
- ``seeds``, ``wall_s``, ``per_seed`` and the targets (hypervolume_ratio min >= 0.98 with
  compute_fraction <= 0.40);
- ``probe_vs_timing``: the grid's trained models are also timed by the timing stage (one process
  each): how far the probe's figure was from it (median and worst relative error).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from _args import positive_int  # noqa: E402
from _children import run_child  # noqa: E402

from sweeps.layout import output_folder  # noqa: E402

TARGET_HV, TARGET_COMPUTE = 0.98, 0.40


def study(quick: bool, reduction_factor: float = 3, promotion: str = "wait") -> dict[str, Any]:
    """The search study; the grid study is derived from it (:func:`grid_sweep`)."""
    # K up to 256: below K=64 the tiny model's decode time hardly moves with K (the per-step overhead
    # dominates), above it the memory's cost shows (about 2.5x at K=256, L=8). A space where K only
    # moves decode time by the probe's noise makes the front, and the rungs, a draw of that noise.
    ks = [2, 4, 8, 16, 32, 64, 128, 256]
    return {
        "name": "moo_bench",
        "task": {
            "name": "copy",
            "vocab_size": 20,
            "max_length": 8,
            "train_size": 20000,
            "val_size": 100,
            "batch_size": 64,
        },
        "model": {"preset": "tiny", "lr": 0.003, "val_beam_size": 1, "attention": "memory"},
        "grid": {"task.max_length": [8] if quick else [8, 16]},
        "parameters": {
            "model.K": {"values": ks},
            "model.position_encoding": {"values": [False, True]},
        },
        "num_samples": 8,
        "search": {"sampler": "tpe", "seed": 0},
        "objectives": [
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "decode_seconds", "goal": "minimize"},
        ],
        "early_terminate": {
            "type": "pareto",
            "grace_period": 3,
            "reduction_factor": reduction_factor,
            "promotion": promotion,
        },
        "trainer": {
            "max_steps": 450 if quick else 900,
            "val_check_interval": 50 if quick else 100,
            "gradient_clip_val": 1.0,
        },
        "resources": {"cpu": 1},
        "max_concurrent_trials": 2,
        "timing": {"enabled": False, "processes": 1},
        "wandb": {"mode": "disabled"},
    }


def grid_sweep(search: dict[str, Any]) -> dict[str, Any]:
    """The same space as a grid: every (K, PE) trained to the end, one metric, FIFO."""
    spec = {
        k: v
        for k, v in search.items()
        if k not in ("parameters", "objectives", "num_samples", "search", "early_terminate")
    }
    model = {k: v for k, v in search["model"].items() if k != "attention"}
    spec["name"] = search["name"] + "_grid"
    spec["model"] = model
    spec["grid"] = {
        **search["grid"],
        "model": [
            {
                "attention": "memory",
                "K": search["parameters"]["model.K"]["values"],
                "position_encoding": [False, True],
            }
        ],
    }
    spec["metric"] = {"name": "val/bleu", "goal": "maximize"}
    # the timing stage on every grid model: how close the probe's figure is to the final one
    spec["timing"] = {"enabled": True, "processes": 1, "max_seconds": 5.0}
    return spec


def launch(spec: dict[str, Any], out: Path, log: Path, probe_table: Path | None = None) -> None:
    path = out / f"{spec['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "WANDB_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    if (
        probe_table is not None
    ):  # the same decode figures for every run (sweeps.timing.probe.SHARED_TABLE_ENV)
        env["SWEEPS_DECODE_PROBE_TABLE"] = str(probe_table)
    with open(log, "a") as f:
        # SIGTERM passed on: a benchmark stopped from outside stops its launch and the launch's Ray
        done = run_child(
            [
                sys.executable,
                str(ROOT / "sweeps/launch.py"),
                str(path),
                "--output",
                str(out),
                "--address",
                "local",
                "--num-cpus",
                "2",
                "--verbose",
                "0",
            ],
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
        )
    if done.returncode != 0:
        raise SystemExit(f"{spec['name']} failed (exit {done.returncode}); see {log}")


def grid_points(grid_dir: Path, search_sweep: Any, table: Any) -> tuple[dict[str, list], int, list]:
    """Per length: (BLEU, decode seconds) of every grid architecture; the grid's training steps;
    (probe estimate, timing stage's figure) per grid model."""
    import pandas as pd

    from sweeps.spec import resolve_sections

    df = pd.read_csv(grid_dir / "results.csv")
    base = {
        "task": search_sweep.spec.task,
        "model": search_sweep.spec.model,
        "trainer": search_sweep.spec.trainer.model_dump(),
    }
    points: dict[str, list] = {}
    pairs = []
    for r in df.to_dict("records"):
        task, model, _ = resolve_sections(
            base,
            {
                "task.max_length": int(r["length"]),
                "model.K": int(r["K"]),
                "model.position_encoding": bool(r["position_encoding"]),
            },
        )
        estimate = table.estimate(task, model, int(r["seed"]))
        points.setdefault(str(int(r["length"])), []).append((float(r["val/bleu"]), estimate))
        if (
            r.get("decode_seconds") == r.get("decode_seconds")
            and r.get("decode_seconds") is not None
        ):
            pairs.append((estimate, float(r["decode_seconds"])))
    return points, int(df["step"].sum()), pairs


def search_points(run_dir: Path) -> tuple[dict[str, list], int, int]:
    """Per length: (BLEU, decode seconds) of the search's finished trials; its training steps; the
    trials it sampled."""
    from sweeps.report.moo_views import load_views

    points: dict[str, list] = {}
    steps = sampled = 0
    for v in load_views(run_dir):
        length = v.cell.split("length=")[-1].split()[0]
        points.setdefault(length, []).extend(tuple(p.values) for p in v.finished)
        steps += sum(p.steps for p in v.points)
        sampled += len(v.points)
    return points, steps, sampled


def hv_ratio(search: dict[str, list], grid: dict[str, list]) -> float:
    from sweeps.report.pareto import hypervolume_2d, to_minimize

    ratios = []
    for length, pts in grid.items():
        ref = (0.0, 1.1 * max(d for _, d in pts))
        directions = ["maximize", "minimize"]
        hv_grid = hypervolume_2d([to_minimize(p, directions) for p in pts], ref)
        hv_search = hypervolume_2d(
            [to_minimize(p, directions) for p in search.get(length, [])], ref
        )
        ratios.append(hv_search / hv_grid if hv_grid > 0 else 1.0)
    return statistics.mean(ratios)


def agreement(pairs: list) -> dict[str, Any]:
    """|probe - timing stage| / timing stage over the grid's trained models: median and worst."""
    if not pairs:
        return {"models": 0}
    errors = sorted(abs(e - t) / t for e, t in pairs)
    return {
        "models": len(pairs),
        "median_abs_rel_error": round(statistics.median(errors), 4),
        "max_abs_rel_error": round(errors[-1], 4),
        "mean_ratio_timed_over_probe": round(statistics.mean(t / e for e, t in pairs), 4),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="benchmarks/moo_search.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--quick", action="store_true", help="one length (8), 450 steps: ~5 min on 2 cores"
    )
    p.add_argument("--seeds", type=positive_int, default=3, help="search seeds (at least 3)")
    p.add_argument(
        "--reduction-factor",
        type=float,
        default=3,
        help="the rung rule's rf (3; Ray's ASHA and Optuna's successive halving default to 4)",
    )
    p.add_argument(
        "--promotion",
        choices=("wait", "immediate"),
        default="wait",
        help="the rung rule's early_terminate.promotion: wait (the default: judged once rf trials "
        "reached the rung, or it is complete) or immediate (judged on arrival)",
    )
    p.add_argument(
        "--output",
        type=output_folder,
        default="bench-out",
        help="folder for the runs (a moo_search/ subfolder; moo_search_quick/ with --quick; an "
        "earlier run's subfolder there is replaced)",
    )
    args = p.parse_args(argv)
    if args.seeds < 3:
        p.error("--seeds: at least 3")
    if not args.reduction_factor > 1:  # each rung keeps the best 1/rf of the trials reaching it
        p.error(f"--reduction-factor: must be above 1, got {args.reduction_factor:g}")
    started = time.time()
    out = Path(args.output).resolve() / ("moo_search_quick" if args.quick else "moo_search")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log = out / "runs.log"
    from sweeps.spec import build_sweep
    from sweeps.timing.probe import PROBE_FILE, build_estimates

    search = study(args.quick, args.reduction_factor, args.promotion)
    sweep = build_sweep(search, source="moo_search")
    probe_dir = out / "probe"
    table = build_estimates(sweep, probe_dir, say=lambda m: print(m, file=sys.stderr))
    launch(grid_sweep(search), out / "grid", log)
    grid, grid_steps, pairs = grid_points(out / "grid" / (search["name"] + "_grid"), sweep, table)
    per_seed = []
    for seed in range(args.seeds):
        spec = {**search, "search": {**search["search"], "seed": seed}}
        run = out / f"seed{seed}"
        launch(spec, run, log, probe_dir / PROBE_FILE)
        pts, steps, sampled = search_points(run / spec["name"])
        per_seed.append(
            {
                "seed": seed,
                "hypervolume_ratio": round(hv_ratio(pts, grid), 4),
                "compute_fraction": round(steps / grid_steps, 4),
                "sampled": sampled,
                "finished": sum(map(len, pts.values())),
                # the rung rule's own share: steps used / steps had every sampled trial run to the end
                "stopping_fraction": round(steps / (sampled * spec["trainer"]["max_steps"]), 4),
            }
        )
    ratios = [s["hypervolume_ratio"] for s in per_seed]
    fractions = [s["compute_fraction"] for s in per_seed]
    result = {
        "benchmark": "moo_search" + ("_quick" if args.quick else ""),
        "hypervolume_ratio": {
            "mean": round(statistics.mean(ratios), 4),
            "min": round(min(ratios), 4),
        },
        "compute_fraction": {
            "mean": round(statistics.mean(fractions), 4),
            "max": round(max(fractions), 4),
        },
        "seeds": list(range(args.seeds)),
        "reduction_factor": args.reduction_factor,
        "promotion": args.promotion,
        "stopping_fraction": {
            "mean": round(statistics.mean(s["stopping_fraction"] for s in per_seed), 4)
        },
        "wall_s": round(time.time() - started, 1),
        "per_seed": per_seed,
        "grid": {"architectures": sum(map(len, grid.values())), "training_steps": grid_steps},
        "probe_vs_timing": agreement(pairs),
        "targets": {
            "hypervolume_ratio_min": TARGET_HV,
            "compute_fraction_max": TARGET_COMPUTE,
            "met": min(ratios) >= TARGET_HV and max(fractions) <= TARGET_COMPUTE,
        },
    }
    (out / "moo_search.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
