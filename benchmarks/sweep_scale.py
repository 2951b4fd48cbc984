"""How the sweep orchestration scales with the number of trials, on a simulated multi-node cluster.

Run it (from the repository root):

    .venv/bin/python benchmarks/sweep_scale.py                          # N = 100 and 1,000; dry run of 10,000 cells
    .venv/bin/python benchmarks/sweep_scale.py --trials 100 --dry-run-cells 0 --output bench-out

For each N it builds an N-cell study through the project's own path (``build_sweep`` ->
``check_cluster`` -> ``make_settings`` -> ``run_tune``: the same searcher, scheduler, console,
trial configs and storage layout as a real study, then ``result_rows`` -> ``results.csv``) and
runs it on a ``ray.cluster_utils.Cluster`` of 4 simulated nodes (logical CPUs, fake GPUs), with a
stand-in trainable that rebuilds its plan from its config exactly as a real trial does, reports
once (a real trial's metric keys, a tiny checkpoint) and returns. It prints per trial:

- orchestration seconds: wall time of ``run_tune``, ``result_rows`` and writing results.csv / N;
- storage bytes: the experiment folder (trial folders, experiment state, results.csv), checkpoint
  folders excluded, / N;
- driver memory: growth of the driver's peak RSS over the run / N (and the peak itself);

and the ratio of bytes per trial N=max / N=min (linear growth: near 1.0). ``--dry-run-cells``
times ``launch.py --dry-run`` of a sweep of that many cells in a fresh process, cold and then warm
(sweeps/spec/signatures.py), and says how much of the cold one is importing torch and Lightning. Figures go to ``DIR/sweep_scale.csv`` / ``.md``.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from _args import nonnegative_int, positive_int  # noqa: E402

from sweeps.layout import output_folder  # noqa: E402

NODES = 4
CPUS_PER_NODE = 4
GPUS_PER_NODE = 2


def study_size(text: str) -> int:
    """An argparse ``type`` for a study size: a positive multiple of 10 (10 lengths x N/10 K)."""
    n = positive_int(text)
    if n % 10:
        raise argparse.ArgumentTypeError(
            f"{n} is not a multiple of 10 (a study is 10 lengths x N/10 values of K)"
        )
    return n


def cells_or_none(text: str) -> int:
    """:func:`study_size`, or 0 (no timed dry run)."""
    return 0 if nonnegative_int(text) == 0 else study_size(text)


def study(name: str, n: int) -> dict[str, Any]:
    """An n-cell copy-task study: 10 lengths x n/10 values of K (memory attention), fractional GPUs."""
    lengths = [10 * (i + 1) for i in range(10)]
    ks = list(range(1, max(1, n // len(lengths)) + 1))
    return {
        "name": name,
        "task": {"name": "copy", "train_size": 64, "val_size": 16},
        "model": {"preset": "tiny"},
        "grid": {"task.max_length": lengths, "model": [{"attention": "memory", "K": ks}]},
        "trainer": {"max_steps": 10, "val_check_interval": 10},
        "resources": {"cpu": 1, "gpu": 0.5},
        "wandb": {"mode": "disabled"},
    }


def stand_in_trial(config: dict[str, Any], settings) -> None:
    """Reports once, like a real trial's last validation (the same metric keys and checkpoint
    files as :class:`sweeps.trial.callbacks.TuneReport`), and returns. It does not import
    :mod:`sweeps.trial.fitting`: that would import Lightning in every trial's fresh worker, which is training cost, not
    orchestration."""
    import json

    import ray
    from ray import tune

    plan = settings.plan(config)  # what a real trial does first
    ctx = ray.get_runtime_context()
    metrics = {
        "val/bleu": float(plan.model["K"]),
        "val/loss": 1.0,
        "val/token_acc": 0.5,
        "val/decode_seconds": 0.01,
        "step": plan.trainer["max_steps"],
        "epoch": 0,
        "train_time_s": 0.1,
        "node_id": ctx.get_node_id(),
        "gpu_ids": ",".join(map(str, ray.get_gpu_ids())),
    }
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "checkpoint.ckpt").write_bytes(b"x")
        Path(tmp, "trial_state.json").write_text(json.dumps({"train_time_s": 0.1}))
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(tmp))


def folder_bytes(path: Path) -> int:
    """Bytes under ``path``, checkpoint folders excluded."""
    total = 0
    for p in path.rglob("*"):
        if p.is_file() and not any(
            part.startswith("checkpoint_") for part in p.relative_to(path).parts
        ):
            total += p.stat().st_size
    return total


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_one(n: int, out: Path) -> dict[str, Any]:
    from sweeps.driver.cluster import check_cluster, describe_cluster
    from sweeps.plan.sweep_plan import build_plan
    from sweeps.report.results import result_rows, write_results_csv
    from sweeps.spec import build_sweep
    from sweeps.stages.train import make_settings, run_tune

    sweep = build_sweep(study(f"scale{n}", n))
    assert sweep.num_trials == n, sweep.num_trials
    plan = build_plan(sweep, out)
    fit = check_cluster(sweep, plan.paths, address="cluster")
    settings = make_settings(plan, "disabled", fit)
    rss_before = peak_rss_mb()
    start = time.perf_counter()
    with redirect_stdout(io.StringIO()):  # the sweep's console: not what is measured
        grid = run_tune(plan, settings, fit, resume=False, verbose=1, trainable_fn=stand_in_trial)
    rows, _plans = result_rows(grid, settings.plan, sweep.spec.parameters)
    write_results_csv(rows, out / sweep.name)
    seconds = time.perf_counter() - start
    rss_after = peak_rss_mb()
    assert len(rows) == n and all(r["status"] == "done" for r in rows), (
        "every stand-in trial finished"
    )
    stored = folder_bytes(out / sweep.name)
    return {
        "trials": n,
        "cluster": describe_cluster(),
        "seconds_per_trial": seconds / n,
        "bytes_per_trial": stored / n,
        "driver_peak_rss_mb": rss_after,
        "driver_rss_growth_kb_per_trial": (rss_after - rss_before) * 1024 / n,
        "total_seconds": seconds,
        "total_bytes": stored,
        "nodes_used": len({r.get("node_id") for r in (res.metrics for res in grid)}),
    }


def dry_run_seconds(cells: int, tmp: Path) -> dict[str, Any]:
    """Wall seconds of ``launch.py --dry-run`` of a ``cells``-cell study in a fresh process, twice
    with one new signature cache: cold (reads the model and data packages, importing torch and
    Lightning, as the first dry run after a change to them does) and warm (every later dry run),
    and of importing torch and Lightning alone."""
    import yaml

    spec = study("dry", cells)
    path = tmp / "dry.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SWEEPS_CACHE_DIR": str(tmp / "signature-cache")}
    walls = []
    for _ in ("cold", "warm"):
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(ROOT / "sweeps" / "launch.py"), str(path), "--dry-run"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        walls.append(time.perf_counter() - t0)
        assert done.returncode == 0, done.stderr
        assert f"{cells} trials" in done.stdout
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import lightning.pytorch, datamodules.copy_task, lightning_modules.module",
        ],
        cwd=ROOT,
        env=env,
        check=True,
    )
    imports = time.perf_counter() - t0
    return {
        "cells": cells,
        "dry_run_seconds": walls[1],
        "dry_run_cold_seconds": walls[0],
        "import_seconds": imports,
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--trials",
        type=study_size,
        nargs="+",
        default=[100, 1000],
        help="study sizes N, multiples of 10: 10 lengths x N/10 values of K (default 100 1000)",
    )
    p.add_argument(
        "--dry-run-cells",
        type=cells_or_none,
        default=10_000,
        help="cells of the timed dry run, a multiple of 10 (0: skip)",
    )
    p.add_argument(
        "--output",
        type=output_folder,
        default=Path("bench-out"),
        help="where sweep_scale.csv/.md go",
    )
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["WANDB_MODE"] = "disabled"
    args.output.mkdir(parents=True, exist_ok=True)
    lines = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    tmp = Path(tempfile.mkdtemp(prefix="sweep-scale-"))
    rows: list[dict[str, Any]] = []
    if args.trials:
        import ray
        from ray.cluster_utils import Cluster

        say(
            f"starting a simulated cluster: {NODES} nodes x {CPUS_PER_NODE} CPUs, {GPUS_PER_NODE} fake GPUs ..."
        )
        os.environ["MEMATTN_SIMULATED_GPUS"] = "1"  # the fake GPUs are for placement only
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": CPUS_PER_NODE,
                "num_gpus": GPUS_PER_NODE,
                "object_store_memory": 80 * 2**20,
                "include_dashboard": False,
            },
        )
        for _ in range(NODES - 1):
            cluster.add_node(
                num_cpus=CPUS_PER_NODE, num_gpus=GPUS_PER_NODE, object_store_memory=80 * 2**20
            )
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address,
            runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
            log_to_driver=False,
        )
        try:
            for n in args.trials:
                say(f"N={n}: running {n} stand-in trials ...")
                row = run_one(n, tmp / f"n{n}")
                rows.append(row)
                say(
                    f"N={n:>5} on {row['cluster']}: {row['seconds_per_trial']:.3f} s orchestration per trial, "
                    f"{row['bytes_per_trial'] / 1024:.1f} KiB stored per trial (checkpoints excluded), "
                    f"driver peak RSS {row['driver_peak_rss_mb']:.0f} MiB "
                    f"(+{row['driver_rss_growth_kb_per_trial']:.1f} KiB per trial); trials ran on {row['nodes_used']} nodes"
                )
        finally:
            ray.shutdown()
            cluster.shutdown()
        if len(rows) > 1:
            ratio = rows[-1]["bytes_per_trial"] / rows[0]["bytes_per_trial"]
            say(
                f"bytes per trial, N={rows[-1]['trials']} / N={rows[0]['trials']}: {ratio:.2f} (linear growth: near 1.0)"
            )
    if args.dry_run_cells:
        d = dry_run_seconds(args.dry_run_cells, tmp)
        say(
            f"--dry-run of a {d['cells']}-cell study, fresh process: {d['dry_run_seconds']:.1f} s wall with the "
            f"signature cache warm (every run after the first), {d['dry_run_cold_seconds']:.1f} s cold (the first "
            f"after a change to lightning_modules/ or datamodules/: imports torch and Lightning, "
            f"{d['import_seconds']:.1f} s of it measured alone)"
        )
        rows.append(d)
    from _machine import write_csv

    if any("trials" in r for r in rows):
        write_csv([r for r in rows if "trials" in r], args.output / "sweep_scale.csv")
    (args.output / "sweep_scale.md").write_text("\n".join(lines) + "\n")
    return rows


if __name__ == "__main__":
    main()
