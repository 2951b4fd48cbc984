"""The GPU settings' checks that need more than one key: ``trainer.cuda_graphs`` and
``resources.mps: on`` want trials on a GPU, and are refused before Ray starts when the sweep's
trials ask for none, as is ``trainer.precision: 16-mixed``, which Lightning swaps for bf16-mixed on
a CPU (:func:`check_gpu_settings`, called by :func:`sweeps.spec.load.build_sweep`); graphs are
refused for distilling students too (:func:`check_graphed_students`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sweeps.errors import SpecError
from sweeps.spec.schema import SweepSpec

#: the precisions that are float16 mixed precision (the legacy spelling too): a GPU's only.
#: Lightning trains bf16-mixed in their place on a CPU, with a warning in the trial's log alone
FLOAT16_MIXED = ("16-mixed", "16")


def trainer_values(spec: SweepSpec, key: str) -> list[Any]:
    """The values the sweep gives ``trainer.<key>``: its trainer section's where it sets the key
    (a profile's or a ``--set``'s included), a grid's (``trainer.<key>: [...]``, or ``trainer:``
    as a list of settings) and a search's; ``[]`` where it sets none."""
    values = [getattr(spec.trainer, key)] if key in spec.trainer.model_fields_set else []
    grid_values = spec.grid.get(f"trainer.{key}", [])
    values += list(grid_values) if isinstance(grid_values, list) else [grid_values]
    variants = spec.grid.get("trainer", [])
    if isinstance(variants, list):
        values += [v[key] for v in variants if isinstance(v, dict) and key in v]
    searched = spec.parameters.get(f"trainer.{key}")
    values += list(searched.values or []) if searched is not None else []
    return values


def float16_precisions(spec: SweepSpec) -> list[str]:
    """The float16 mixed precisions (:data:`FLOAT16_MIXED`) the sweep trains at anywhere: its
    trainer section, a grid or a search (:func:`trainer_values`); ``[]`` where none."""
    return sorted({str(v) for v in trainer_values(spec, "precision")} & set(FLOAT16_MIXED))


def cuda_graphs_values(spec: SweepSpec) -> list[Any]:
    """The values the sweep gives ``trainer.cuda_graphs`` (:func:`trainer_values`)."""
    return trainer_values(spec, "cuda_graphs")


def asks_for_cuda_graphs(spec: SweepSpec) -> bool:
    """``trainer.cuda_graphs`` true in the trainer section, or among a grid's or a search's values."""
    return any(v is True for v in cuda_graphs_values(spec))


def sets_cuda_graphs(spec: SweepSpec) -> bool:
    """The sweep sets ``trainer.cuda_graphs`` itself, true or false: the GPU plan keeps that
    choice (:func:`sweeps.plan.arrangement.plan_arrangement`)."""
    return bool(cuda_graphs_values(spec))


def check_gpu_settings(spec: SweepSpec, source: str, cpu_profile: str | None = None) -> None:
    """Raises :class:`SpecError` naming the key and the fix. ``cpu_profile``: the profile
    (``profiles.smoke``) that set ``resources.gpu``, where the file's own ``trainer:`` section
    asks for graphs: that profile's fix is ``trainer.cuda_graphs: false`` in it."""
    r = spec.resources
    if r.mps == "on" and r.gpu == 0:
        raise SpecError(
            "resources.mps",
            "on shares a GPU between trial processes, but the trials use no GPU (resources.gpu: "
            "0); set resources.gpu (e.g. 0.5), or resources.mps: auto",
            source,
        )
    float16 = float16_precisions(spec)
    if float16 and r.gpu == 0:
        raise SpecError(
            "trainer.precision",
            f"{float16[0]} is float16 mixed precision, which Lightning runs on a GPU only, but "
            "the trials train on the CPU (resources.gpu: 0): Lightning would train bf16-mixed in "
            f"its place while every record said {float16[0]}; set trainer.precision: bf16-mixed, "
            "or set resources.gpu (e.g. 1 or 0.5)",
            source,
        )
    if not asks_for_cuda_graphs(spec):
        return
    if r.gpu == 0 and cpu_profile is not None:
        raise SpecError(
            "trainer.cuda_graphs",
            "captures training steps on a GPU, but the trials train on the CPU (resources.gpu: "
            f"0); set trainer.cuda_graphs: false in {cpu_profile}, or set resources.gpu there "
            "(e.g. 1 or 0.5), or remove cuda_graphs",
            source,
        )
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


def check_graphed_students(spec: SweepSpec, plans: Sequence[Any], source: str) -> None:
    """``trainer.cuda_graphs`` for a distilling student (``distill_weight`` > 0), in a cell or
    through a search, is refused with the fix: its teacher runs outside the graph, so the trial
    would fail at fit, after its teacher cell's trials (as ``resources.gpu: auto`` never graphs
    such a sweep: :func:`sweeps.plan.arrangement.graphs_problem`)."""
    searched_graphs = spec.parameters.get("trainer.cuda_graphs")
    graphs_sampled = searched_graphs is not None and True in (searched_graphs.values or [])
    searched_weight = spec.parameters.get("model.distill_weight")
    weight_sampled = searched_weight is not None and any(
        isinstance(v, (int, float)) and v > 0
        for v in [*(searched_weight.values or []), searched_weight.max]
    )
    for plan in plans:
        graphed = plan.trainer.get("cuda_graphs") is True or graphs_sampled
        weight = float(plan.model.get("distill_weight") or 0)
        if not graphed or not (weight > 0 or weight_sampled):
            continue
        key = (
            "parameters.trainer.cuda_graphs"
            if plan.trainer.get("cuda_graphs") is not True
            else plan.cell.origins.get("trainer.cuda_graphs", "trainer.cuda_graphs")
        )
        student = (
            "a sampled model.distill_weight above 0"
            if weight <= 0
            else f"distill_weight {weight:g}"
        )
        off = (
            "trainer.cuda_graphs: false, e.g. --set trainer.cuda_graphs=false"
            if key == "trainer.cuda_graphs"
            else f"take true out of {key}"
        )
        raise SpecError(
            key,
            f"does not capture a distilling student's teacher, which runs outside the graph: "
            f"cell {plan.cell.name!r} ({student}) would fail when it starts (after its "
            f"teacher cell's trials, where it has one); train distilling students without "
            f"graphs ({off}), or set their distill_weight to 0",
            source,
        )
