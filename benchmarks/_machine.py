"""Helpers shared by the benchmark scripts: naming the machine, timing a callable, writing results."""

from __future__ import annotations

import csv
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from _args import refusal

from sweeps.timing.devices import cpu_model, device_name, highest_cpus, pinned, resolve_device


def machine_info(device: torch.device) -> dict[str, Any]:
    """CPU model, logical cores, torch threads, torch version and the device's name."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": str(device),
    }
    info["device_name"] = device_name(device)
    return info


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"machine: {info['cpu']} | {info['cores']} logical cores | torch {info['torch']} with "
        f"{info['torch_threads']} thread(s) | device {info['device']} ({info['device_name']})"
    )


def time_interleaved(
    fns: dict[str, Callable[[], Any]], device: torch.device, warmup: int, repeats: int
) -> dict[str, tuple[float, list[float]]]:
    """Median wall time of each ``fns[name]()`` over ``repeats`` rounds, the calls interleaved (one
    call of each per round, after ``warmup`` untimed rounds): a slow spell of the machine (another
    process, a frequency change) then lands on every function alike instead of on whichever ran
    during it, so ratios between them hold still. Returns name -> (median, times)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(t), t) for name, t in times.items()}


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Rows (dicts with the same keys) to CSV, columns in first-row order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return path


def markdown_table(table: Any, fmt: str, column_prefix: str = "", index_prefix: str = "") -> str:
    """A pandas table as Markdown (plain text when tabulate is missing), labels prefixed."""
    table = table.copy()
    if index_prefix:
        table.index = [f"{index_prefix}{i}" for i in table.index]
    table.columns = [f"{column_prefix}{c}" for c in table.columns]
    try:
        return table.to_markdown(floatfmt=fmt)
    except ImportError:  # tabulate missing
        return table.to_string(float_format=lambda v: format(v, fmt))


def write_outputs(
    rows: Sequence[dict[str, Any]],
    output: Path,
    stem: str,
    title: str,
    header: str,
    settings: str,
    summarise: Callable[[Sequence[dict[str, Any]]], str],
    plot: Callable[[Sequence[dict[str, Any]], Path], Any],
) -> dict[str, Path]:
    """Write ``<stem>.csv``, ``<stem>.md`` (machine, settings, summary) and ``<stem>.png``; print
    the summary; return the paths written."""
    paths = {"csv": write_csv(rows, output / f"{stem}.csv")}
    summary = summarise(rows)
    print("\n" + summary)
    paths["md"] = output / f"{stem}.md"
    paths["md"].write_text(f"# {title}\n\n{header}\n\n{settings}\n\n{summary}\n")
    png = plot(rows, output / f"{stem}.png")
    if png is not None:
        paths["png"] = png
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return paths


def pyplot_or_none():
    """matplotlib.pyplot on the Agg backend, or None (with a note) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        import sys

        print("matplotlib is not installed: no plot", file=sys.stderr)
        return None
    return plt


def cuda_versions() -> dict[str, Any]:
    """torch's CUDA and the NVIDIA driver (nvidia-smi), where there are."""
    out: dict[str, Any] = {"torch_cuda": torch.version.cuda, "driver": None}
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        out["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return out


@contextmanager
def announced(device_name: str, threads: int, settings: str) -> Iterator[str]:
    """For the benchmark's run: set torch's thread count, on CPU pin the process to its ``threads``
    highest-numbered cores (all of them when there are no more), print the machine line and the
    run's settings; yields the machine line (for the Markdown report). The CPU affinity is restored
    on exit (:func:`sweeps.timing.devices.pinned`), so a caller (a test process that goes on to
    start Ray) is not left on one core."""
    torch.set_num_threads(threads)
    try:
        device = resolve_device(device_name)
    except ValueError as exc:
        raise refusal(f"--device: {exc}") from None
    header = machine_line(machine_info(device))
    cpus = highest_cpus(min(threads, len(os.sched_getaffinity(0)))) if device.type == "cpu" else []
    with pinned(cpus) if cpus else nullcontext():
        if cpus:
            header += f" | pinned to CPU {','.join(map(str, cpus))}"
        print(header, flush=True)
        print(settings, flush=True)
        yield header


def save_png(fig, path: Path) -> Path:
    """Lay out, write and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
