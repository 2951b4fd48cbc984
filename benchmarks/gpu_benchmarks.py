"""The GPU tests and the GPU benchmarks in one run: the tests marked ``gpu`` and the measurements of
fused trials, CUDA graphs and MPS, each phase within its own time limit and all within ``--budget``
seconds.

Run it on the GPU machine (from the repository root; the device's own Python, which has torch
and Lightning; nothing here needs Ray, Optuna or W&B):

    python benchmarks/gpu_benchmarks.py --out "$OUT" --budget 470 --phases environment cuda_graphs gpu_tests share share_mps
    python benchmarks/gpu_benchmarks.py --out "$OUT" --budget 310 --phases fusion peers
    python benchmarks/gpu_benchmarks.py --dry-run --budget 470             # the plan: commands, limits, fit
    python benchmarks/gpu_benchmarks.py --device cpu --out /tmp/s          # the plumbing, on a CPU

Prints one JSON line per phase as it ends (``phase``, ``rc``, ``seconds``, ``timed_out``,
``summary``: the phase's figures in short; a phase skipped, or every phase of a dry run: ``phase``,
``limit_s``, ``cmd``, and ``skipped`` with the reason), the phase's whole output
in ``OUT/<phase>.out`` and ``.err`` (a benchmark's full JSON line is the last JSON line of its ``.out``),
and a last line ``{"phase": "all", ...}``. A phase that runs past its limit is stopped
(SIGTERM, then SIGKILL) and the next one starts; a phase whose limit no longer fits the budget is
skipped, so the run ends in time; the dry run marks ``may_not_fit`` each phase that would be
skipped if the phases before it took their whole limits. The phases, in order (the most wanted first):

- ``environment``: torch, CUDA, the driver, the GPU and its compute mode, nvidia-cuda-mps-control,
  which packages import;
- ``cuda_graphs``: benchmarks/cuda_graphs.py, graphed against eager steps (tiny, paper_copy, L=40);
- ``gpu_tests``: the tests marked ``gpu`` (test_cuda.py, test_cuda_graphs.py, test_fused_cuda.py);
- ``share`` / ``share_mps``: benchmarks/gpu_share.py, P = 1, 2, 4, 8 processes side by side,
  eager and graphed, time-sliced and under an MPS daemon (``python -m sweeps.driver.mps run``);
- ``fusion``: benchmarks/fusion.py --device cuda (fused groups of M = 1, 4, 16 against M unfused
  processes side by side);
- ``peers``: benchmarks/peers.py --device cuda at L=40, fp32, the project eager and graphed
  against the peers that import.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from _args import positive_float  # noqa: E402
from _children import run_child  # noqa: E402

from sweeps.layout import output_folder  # noqa: E402  (the standard library only)

PY = sys.executable
MPS_RUN = [PY, "-m", "sweeps.driver.mps", "run", "--want", "required", "--dir", "/tmp/memattn-mps-bench", "--"]  # fmt: skip
#: what fits the phase's limit on an H100 (2026-11-27): paper_copy and tiny at these three counts of
#: members and 3 rounds took 220 s (M = 1, 2, 4, 8, 16 at 5 rounds printed nothing within 110 s);
#: paper_copy alone, each fused group also graphed, is what the plan's cost table needs
FUSION = ["--preset", "paper_copy", "--lengths", "40", "--members", "1", "4", "16",
          "--repeats", "3", "--graphs"]  # fmt: skip

ENVIRONMENT = r"""
import importlib, json, os, platform, shutil, subprocess
out = {"python": platform.python_version()}
try:
    import torch
    out["torch"], out["torch_cuda"] = torch.__version__, torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        out["cudnn"] = torch.backends.cudnn.version()
except ImportError as exc:
    out["torch"] = f"missing: {exc}"
smi = shutil.which("nvidia-smi")
if smi:
    q = "--query-gpu=driver_version,compute_mode,memory.total,name"
    r = subprocess.run([smi, q, "--format=csv,noheader"], capture_output=True, text=True)
    out["nvidia_smi"] = r.stdout.strip()
out["mps_control"] = shutil.which("nvidia-cuda-mps-control")
out["mps_pipe_env"] = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
out["cpus"] = len(os.sched_getaffinity(0))
mods = ["lightning", "numpy", "sacrebleu", "pydantic", "yaml", "annotated_types", "pytest",
        "ray", "optuna", "wandb", "joeynmt", "onmt"]
out["imports"] = {}
for m in mods:
    try:
        out["imports"][m] = getattr(importlib.import_module(m), "__version__", "yes")
    except Exception as exc:
        out["imports"][m] = f"no ({type(exc).__name__})"
print(json.dumps(out))
"""


@dataclass
class Phase:
    name: str
    limit: float  # seconds
    cmd: list[str]
    needs: str | None = None  # a file the phase needs
    mps: bool = False  # needs nvidia-cuda-mps-control


def phases(device: str) -> list[Phase]:
    """The phases on ``device`` (``cpu``: their quick, plumbing-only forms)."""
    cpu = device == "cpu"
    quick = ["--quick"] if cpu else []
    graphs = quick or ["--device", "cuda", "--repeats", "3"]
    share = quick or ["--rounds", "2"]
    tests = [f"tests/lightning_modules/{name}.py" for name in ("test_cuda", "test_cuda_graphs", "test_fused_cuda")]  # fmt: skip
    peers = [
        "benchmarks/peers.py",
        *(["--quick"] if cpu else ["--device", "cuda", "--lengths", "40"]),
        "--systems",
        "project",
        "project:graphed",
        "joeynmt",
        "opennmt",
    ]
    fusion = [
        "benchmarks/fusion.py",
        *(["--quick", "--graphs"] if cpu else ["--device", "cuda", *FUSION]),
    ]
    return [
        Phase("environment", 30, [PY, "-c", ENVIRONMENT]),
        # the limits: what each took on an H100 (2026-11-27), with room (benchmarks/README.md)
        Phase("cuda_graphs", 90, [PY, "benchmarks/cuda_graphs.py", *graphs]),
        Phase(
            "gpu_tests",
            90,
            [
                PY,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "-q",
                "-p",
                "no:randomly",
                "-p",
                "no:cacheprovider",
                *tests,
            ],
        ),  # fmt: skip
        Phase("share", 150, [PY, "benchmarks/gpu_share.py", *share]),
        Phase("share_mps", 100, [*MPS_RUN, PY, "benchmarks/gpu_share.py", *share], mps=True),
        # a fused group is one process: MPS changes only its unfused arms, which share_mps measures
        Phase("fusion", 240, [PY, *fusion], needs=fusion[0]),
        Phase("peers", 60, [PY, *peers]),
    ]


def last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def summary(name: str, out: str, err: str) -> Any:
    """The phase's figures in short (the whole line stays in OUT/<phase>.out)."""
    if name == "gpu_tests":
        lines = [ln for ln in out.splitlines() if ln.strip()]
        failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
        return {"result": lines[-1] if lines else "", "failed": failed[:20]}
    data = last_json(out)
    if data is None:
        return None
    if name == "environment":
        return data
    keep = {
        k: data[k] for k in ("speedup", "mps", "device", "torch", "cuda", "ratios") if k in data
    }
    if name == "cuda_graphs":
        keep["steps"] = {
            r["cell"]: {
                k: r[k]
                for k in (
                    "eager_step_seconds",
                    "graphed_step_seconds",
                    "static_eager_step_seconds",
                    "graphs",
                )
            }  # fmt: skip
            for r in data.get("rows", [])
        }
    if name.startswith("share"):
        keep["steps_per_gpu_second"] = {r["cell"]: r["steps_per_gpu_second"] for r in data["rows"]}
    if name.startswith("fusion"):
        keep["member_steps_per_gpu_second"] = {  # unfused, fused, fused graphed (with --graphs)
            r["cell"]: [
                r["unfused_member_steps_per_unit_second"],
                r["fused_member_steps_per_unit_second"],
                *[r[k] for k in ("fused_graphed_member_steps_per_unit_second",) if k in r],
            ]
            for r in data.get("rows", [])
        }
        for key in ("graphed_speedup", "graphed_over_one_trial"):
            if key in data:
                keep[key] = data[key]
    if name == "peers":
        keep = {"train": {s: v.get("train") for s, v in data.get("systems", {}).items()},
                "ratios": data.get("ratios"), "unavailable": data.get("unavailable")}  # fmt: skip
    return keep


def run_phase(phase: Phase, out_dir: Path, limit: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}  # fmt: skip
    start = time.monotonic()
    out_path, err_path = out_dir / f"{phase.name}.out", out_dir / f"{phase.name}.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        # its own session: past its limit the phase's group gets SIGTERM (an MPS wrapper quits its
        # daemon on the way out), then 20 s, then SIGKILL; a SIGTERM or Ctrl-C to this script
        # reaches the phase the same way, so a stopped run leaves no phase (and no launch) behind
        done = run_child(phase.cmd, cwd=ROOT, env=env, stdout=out, stderr=err, timeout=limit,
                         grace=20, signal_group=True)  # fmt: skip
        timed_out = done.timed_out
    text, errors = out_path.read_text(), err_path.read_text()
    line = {
        "phase": phase.name,
        "rc": done.returncode,
        "seconds": round(time.monotonic() - start, 1),
        "timed_out": timed_out,
        "summary": summary(phase.name, text, errors),
    }
    if done.returncode != 0:
        line["stderr_tail"] = errors.strip().splitlines()[-8:]
    return line


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out", type=output_folder, default="gpu-benchmarks", help="folder for each phase's output"
    )
    p.add_argument(
        "--budget", type=positive_float, default=510, help="seconds for the whole run (510)"
    )
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--phases", nargs="+", help="only these phases, in the run's order")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = p.parse_args(argv)
    plan = phases(args.device)
    unknown = set(args.phases or []) - {ph.name for ph in plan}
    if unknown:
        p.error(f"unknown phase(s) {', '.join(sorted(unknown))}; the phases: "
                + ", ".join(ph.name for ph in plan))  # fmt: skip
    plan = [ph for ph in plan if not args.phases or ph.name in args.phases]
    out_dir = Path(args.out)
    if not args.dry_run:  # the dry run prints the plan and writes nothing
        out_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    has_mps = bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY")) or _which("nvidia-cuda-mps-control")
    ran = 0
    planned = 0.0  # the dry run: the limits of the phases before this one, each taken in full
    for phase in plan:
        skipped = None
        if phase.needs and not (ROOT / phase.needs).exists():
            skipped = f"{phase.needs} is not in this checkout"
        elif phase.mps and not has_mps:
            skipped = "no nvidia-cuda-mps-control on this machine's PATH"
        elif not args.dry_run and deadline - time.monotonic() < phase.limit:
            skipped = f"its {phase.limit:g} s no longer fit the budget ({args.budget:g} s)"
        if args.dry_run or skipped:
            line = {"phase": phase.name, "limit_s": phase.limit, "cmd": shown(phase.cmd)}
            if skipped:
                line["skipped"] = skipped
            elif args.budget - planned < phase.limit:  # a dry run: would it start, whatever
                line["may_not_fit"] = (  # the phases before it take? (skipped, it takes nothing)
                    f"if the phases before it take their limits ({planned:g} s), "
                    f"{max(0.0, args.budget - planned):g} s of the budget ({args.budget:g} s) "
                    f"are left for its {phase.limit:g} s, and it is skipped"
                )
            else:
                planned += phase.limit
            print(json.dumps(line), flush=True)
            continue
        print(json.dumps(run_phase(phase, out_dir, phase.limit)), flush=True)
        ran += 1
    left = round(deadline - time.monotonic(), 1)
    print(json.dumps({"phase": "all", "phases_run": ran, "budget_left_s": left,
                      "out": str(out_dir.resolve())}), flush=True)  # fmt: skip
    return 0


def shown(cmd: list[str]) -> str:
    """A phase's command as a shell line (an inline script as ``<script>``)."""
    import shlex

    return " ".join("<script>" if "\n" in a else shlex.quote(a) for a in cmd).replace(PY, "python")


def _which(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None


if __name__ == "__main__":
    sys.exit(main())
