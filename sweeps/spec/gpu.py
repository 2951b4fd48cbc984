"""The GPU settings' checks that need more than one key: ``trainer.cuda_graphs`` and
``resources.mps: on`` want trials on a GPU, and are refused before Ray starts when the sweep's
trials ask for none (:func:`check_gpu_settings`, called by :func:`sweeps.spec.load.build_sweep`)."""

from __future__ import annotations

from sweeps.errors import SpecError
from sweeps.spec.schema import SweepSpec


def asks_for_cuda_graphs(spec: SweepSpec) -> bool:
    """``trainer.cuda_graphs`` true in the trainer section, or among a grid's or a search's values."""
    if spec.trainer.cuda_graphs:
        return True
    grid_values = spec.grid.get("trainer.cuda_graphs", [])
    values = list(grid_values) if isinstance(grid_values, list) else [grid_values]
    searched = spec.parameters.get("trainer.cuda_graphs")
    values += list(searched.values or []) if searched is not None else []
    return any(v is True for v in values)


def check_gpu_settings(spec: SweepSpec, source: str) -> None:
    """Raises :class:`SpecError` naming the key and the fix."""
    r = spec.resources
    if r.mps == "on" and r.gpu == 0:
        raise SpecError(
            "resources.mps",
            "on shares a GPU between trial processes, but the trials use no GPU (resources.gpu: "
            "0); set resources.gpu (e.g. 0.5), or resources.mps: auto",
            source,
        )
    if not asks_for_cuda_graphs(spec):
        return
    if r.gpu == 0:
        raise SpecError(
            "trainer.cuda_graphs",
            "captures training steps on a GPU, but the trials train on the CPU (resources.gpu: "
            "0); set resources.gpu (e.g. 1 or 0.5), or remove cuda_graphs",
            source,
        )
    if r.workers > 1:
        raise SpecError(
            "trainer.cuda_graphs",
            f"is for single-process trials; DDP trials (resources.workers: {r.workers}) train "
            "eagerly: remove cuda_graphs, or set resources.workers: 1",
            source,
        )
