"""Helpers shared by the benchmark scripts: naming the machine, timing a callable, writing results."""
from __future__ import annotations

import csv
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_info(device: torch.device) -> dict[str, Any]:
    """CPU model, logical cores, torch threads, torch version and the device's name."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": str(device),
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    else:
        info["device_name"] = info["cpu"]
    return info


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"machine: {info['cpu']} | {info['cores']} logical cores | torch {info['torch']} with "
        f"{info['torch_threads']} thread(s) | device {info['device']} ({info['device_name']})"
    )


def resolve_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but torch sees no CUDA device")
    return device


def time_call(fn: Callable[[], Any], device: torch.device, warmup: int, repeats: int) -> tuple[float, list[float]]:
    """Median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` untimed runs."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


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


def announce(device_name: str, threads: int, settings: str) -> str:
    """Set torch's thread count, print the machine line and the run's settings; return the
    machine line (for the Markdown report)."""
    torch.set_num_threads(threads)
    header = machine_line(machine_info(resolve_device(device_name)))
    print(header, flush=True)
    print(settings, flush=True)
    return header


def save_png(fig, path: Path) -> Path:
    """Lay out, write and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
