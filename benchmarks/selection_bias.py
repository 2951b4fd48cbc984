"""The bias of reporting the figure a configuration was chosen on, in the two seed modes.

    .venv/bin/python benchmarks/selection_bias.py                 # 3 search seeds: 4.5 min on 2 loaded cores
    .venv/bin/python benchmarks/selection_bias.py --search-seeds 0 1 2 3 --samples 6

A small, noisy study (one cell: memory attention K=4 on the copy task of length 6, a small
validation set, the learning rate searched by Optuna's TPE) is run by the launcher twice per
search seed (``search.seed``):

- **per unit** (``seeds: [0, 1]``): each (cell, seed) its own Optuna study of ``--samples`` trials;
  the reported figure is results.md's summary rule, the mean over seeds of each seed's best
  ``val/bleu``;
- **per configuration** (``seeds: {values: [0, 1], per_configuration: true}``): one study per cell,
  each configuration trained on both seeds; the reported figure is the chosen configuration's mean
  ``val/bleu`` over its seeds.

In both, the held-out stage evaluates the chosen trials on the copy task's test draw (400
sequences, none in train or validation): ``test`` is the same trials' mean ``test/bleu``, and
``gap`` = reported validation - test (the optimism of reporting the selection figure). It prints
ONE JSON line: per mode the mean over search seeds of ``valid``, ``test`` and ``gap``, each search
seed's figures, the seconds it took, the machine and its load (1-minute load average before and
after). Both modes train the same number of trials (``--samples`` x 2 seeds).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import positive_int  # noqa: E402

from sweeps.layout import nonnegative_int  # noqa: E402
from sweeps.timing.devices import cpu_model  # noqa: E402


def study(name: str, search_seed: int, samples: int, per_configuration: bool) -> dict[str, Any]:
    seeds: Any = {"values": [0, 1], "per_configuration": True} if per_configuration else [0, 1]
    return {
        "name": name,
        "task": {
            "name": "copy",
            "max_length": 6,
            "train_size": 512,
            "val_size": 24,
            "test_size": 400,
            "batch_size": 32,
        },
        "model": {"preset": "tiny"},
        "grid": {"model": [{"attention": "memory", "K": 4}]},
        "parameters": {
            "model.lr": {"min": 3e-4, "max": 3e-2, "distribution": "log_uniform_values"}
        },
        "num_samples": samples,
        "search": {"sampler": "tpe", "seed": search_seed},
        "seeds": seeds,
        "trainer": {"max_steps": 60, "val_check_interval": 30},
        "resources": {"cpu": 1},
        "wandb": {"mode": "disabled"},
        "timing": {"enabled": False},
        "heldout": {"enabled": True},
    }


def reported(results: Path) -> dict[str, float]:
    """The validation figure the report gives for the chosen trials, and their test figure."""
    import pandas as pd

    df = pd.read_csv(results)
    chosen = df[df["chosen"].astype(str).str.lower() == "true"]
    per_seed = chosen.groupby("seed")[["val/bleu", "test/bleu"]].mean()
    valid, test = float(per_seed["val/bleu"].mean()), float(per_seed["test/bleu"].mean())
    return {"valid": valid, "test": test, "gap": valid - test}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # checked here: the spec refuses a negative search.seed only after earlier seeds have trained
    p.add_argument("--search-seeds", type=nonnegative_int, nargs="+", default=[0, 1, 2])
    p.add_argument("--samples", type=positive_int, default=4, help="Optuna samples per study")
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["WANDB_MODE"] = "disabled"
    import ray

    from sweeps.launch import main as launch

    load_before = os.getloadavg()[0]
    started = time.time()
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=80 * 2**20
    )
    out: dict[str, dict[str, Any]] = {"per_unit": {"runs": []}, "per_configuration": {"runs": []}}
    with tempfile.TemporaryDirectory() as tmp:
        for s in args.search_seeds:
            for mode in out:
                name = f"bias-{mode.replace('_', '-')}-{s}"
                path = Path(tmp) / f"{name}.yaml"
                path.write_text(
                    yaml.safe_dump(study(name, s, args.samples, mode == "per_configuration"))
                )
                # the launcher's own lines go to stderr: stdout holds the one JSON line alone
                with contextlib.redirect_stdout(sys.stderr):
                    code = launch([str(path), "--output", str(Path(tmp) / "out"), "--verbose", "0"])
                if code != 0:
                    raise SystemExit(f"the sweep {name} failed (exit {code})")
                out[mode]["runs"].append(
                    {"search_seed": s, **reported(Path(tmp) / "out" / name / "results.csv")}
                )
    ray.shutdown()
    for mode in out.values():
        for k in ("valid", "test", "gap"):
            mode[k] = statistics.mean(r[k] for r in mode["runs"])
    line = {
        "benchmark": "selection_bias",
        "search_seeds": args.search_seeds,
        "samples": args.samples,
        "trials_per_mode_and_search_seed": args.samples * 2,
        **out,
        "gap_shrinks": abs(out["per_configuration"]["gap"]) < abs(out["per_unit"]["gap"]),
        "seconds": round(time.time() - started, 1),
        "machine": cpu_model(),
        "cores": os.cpu_count(),
        "load_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()
