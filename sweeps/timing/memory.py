"""Peak memory of a training step and of decoding, for a trained model (:func:`measure_peaks`).

What is measured is the memory the work adds to a process that already holds the model and its
batches: activations, gradients and the optimiser's state for a training step (on a fresh copy
with a fresh optimiser, so Adam's two moments are allocated as at a run's first step), the
encoder states, caches and beams for decoding.

- GPU: the caching allocator's peak (``torch.cuda.max_memory_allocated``) above what was
  allocated when the work started.
- CPU: the process's resident peak (``VmHWM`` in ``/proc/self/status``) above its resident size
  (``VmRSS``) when the work started. Before each measurement the peak is reset
  (``/proc/self/clear_refs``, Linux >= 4.0) and freed heap memory is handed back to the system
  (glibc's ``malloc_trim``), so each measurement starts from what the process holds, not from the
  high-water mark of earlier work. A first, unmeasured run of each kind takes the one-time
  allocations (kernel libraries' buffers, thread pools) out of the figure. The timing stage
  measures each model in a fresh process of its own with a fixed glibc mmap threshold
  (:data:`MEMORY_ENV`, which says why).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweeps.errors import TimingError

if TYPE_CHECKING:  # torch is imported where memory is measured: the records below are torch-free
    import torch

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
MB = 2**20

# Peak memory on CPU is measured in a fresh process per model, where glibc hands every block of
# 64 KiB or more back to the system when it is freed (a fixed mmap threshold). With glibc's default
# the threshold moves with what was freed before and freed heap is reused without a resident page
# more: one tiny model's training peak read 24.1-27.6 MiB in three processes that timed it first
# (20.2-21.1 with the fixed threshold); and a model measured after others in one process read
# decode peaks up to 1.7x those of the same model measured first. The timing processes keep
# glibc's default: a fixed threshold maps and faults in every large tensor afresh, which would
# slow the very steps they time.
MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


@dataclass(frozen=True)
class MemoryPeaks:
    """Peak memory, in MiB, above the process's (or the GPU allocator's) footprint before the work."""

    train_peak_mb: float | None  # one timed pass of training steps (None: not measured)
    decode_peak_mb: float | None  # decoding the split, batch after batch
    how: str  # "resident" (CPU: VmHWM - VmRSS) or "cuda allocator"
    device: str
    train_samples: tuple[float, ...] = ()  # one per fresh process; the figure is their median
    decode_samples: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "train_samples": list(self.train_samples),
            "decode_samples": list(self.decode_samples),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryPeaks:
        tuples = ("train_samples", "decode_samples")
        return cls(
            **{
                k: (tuple(v) if k in tuples else v)
                for k, v in data.items()
                if k in cls.__dataclass_fields__
            }
        )


def combine(peaks: Sequence[MemoryPeaks]) -> MemoryPeaks:
    """Several processes' peaks of one model: the median of each, every sample kept."""

    def median(values: list[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return statistics.median(got) if got else None

    train = [p.train_peak_mb for p in peaks]
    decode = [p.decode_peak_mb for p in peaks]
    return MemoryPeaks(
        train_peak_mb=median(train),
        decode_peak_mb=median(decode),
        how=peaks[0].how,
        device=peaks[0].device,
        train_samples=tuple(v for v in train if v is not None),
        decode_samples=tuple(v for v in decode if v is not None),
    )


def _status_kb(field: str) -> int:
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise TimingError(f"{STATUS} has no {field}: measuring CPU memory needs Linux's /proc")


def _trim() -> None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        libc = None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def peak_above(work: Callable[[], Any], device: torch.device) -> float:
    """MiB that ``work()`` added at its peak to what was held when it started (see the module)."""
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        work()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / MB
    _trim()
    try:
        CLEAR_REFS.write_text("5")  # resets VmHWM to the current VmRSS
    except OSError as exc:
        raise TimingError(
            f"cannot reset the resident peak ({CLEAR_REFS}: {exc}); measuring CPU memory needs "
            "Linux >= 4.0: drop memory from timing.measure on this machine"
        ) from None
    base = _status_kb("VmRSS")
    work()
    return max(0, _status_kb("VmHWM") - base) / 1024


def measure_peaks(
    train: Callable[[], Callable[[], Any]] | None,
    decode: Callable[[], Any] | None,
    device: torch.device,
) -> MemoryPeaks:
    """The peak of a training pass and of decoding the split.

    Args:
        train: makes a fresh training pass (a new model copy and optimiser, the batches) and
            returns it; called twice: once unmeasured, then the pass it returns is measured with
            the copy already made. None: not measured.
        decode: decodes the split (under ``torch.inference_mode``); run once unmeasured first.
            None: not measured.
        device: where the work runs.
    """
    train_mb = decode_mb = None
    if decode is not None:  # first: on the heap the model's loading left, not training's
        decode()
        decode_mb = peak_above(decode, device)
    if train is not None:
        train()()  # one-time allocations, off the record
        run = train()
        train_mb = peak_above(run, device)
        del run
    return MemoryPeaks(
        train_peak_mb=None if train_mb is None else round(train_mb, 2),
        decode_peak_mb=None if decode_mb is None else round(decode_mb, 2),
        how="cuda allocator" if device.type == "cuda" else "resident",
        device=str(device),
    )
