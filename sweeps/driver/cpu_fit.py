"""Whether a sweep's trials fit the CPUs and GPUs Ray offers, said before any trial starts: a
trial larger than every node (or a DDP trial larger than the cluster) would wait without end, and
float16 mixed precision on a machine without a GPU would train at bf16-mixed. Each refusal names
the fix, the one a ``--resume`` can take where the launch resumes; ``--dry-run`` says the same of
the local Ray a launch would start (:func:`local_cpu_note`). Used by
:func:`sweeps.driver.cluster.check_cluster`."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from typing import Any


def ddp_cpu_fixes(resources: Any, have: float) -> str:
    """The ``--set`` that fit a DDP trial on ``have`` CPUs: each worker's share of what its
    driver leaves (in quarter CPUs), or as many workers of ``resources.cpu`` as fit (one: no DDP)."""
    spare = have - 1  # the trial's driver holds one
    fixes = []
    share = int(spare / resources.workers * 4) / 4
    if share > 0:
        fixes.append(f"--set resources.cpu={share:g}")
    workers = int(spare // resources.cpu) if spare > 0 else 0
    fixes.append(
        f"--set resources.workers={workers}"
        if workers >= 2
        else "--set resources.workers=1 (no DDP)"
    )
    return " or ".join(fixes)


def resumed_fix(where: str, cpus: float | None = None) -> str:
    """The fix for a ``--resume`` that meets a machine its first run's resources do not fit: it
    keeps them (the trials already run were planned from them), so a ``--set`` of another value is
    refused. ``where``: what the resume needs; ``cpus``: the CPUs a local Ray would have to count
    (``--num-cpus``: the trials then share this machine's cores)."""
    more = (
        f", or --num-cpus {math.ceil(cpus)} (this machine's Ray counts that many)" if cpus else ""
    )
    return (
        f"--resume keeps the first run's resources and trainer settings: resume it where {where} "
        f"(--address){more}"
    )


def too_few_cpus(resources: Any, nodes: list[dict[str, Any]], resuming: bool = False) -> str | None:
    """Why no trial of the sweep could ever start on ``nodes`` (Ray's ``ray.nodes()``), with the
    fix, or None: a trial's process needs ``resources.cpu`` CPUs on one node; a DDP trial its
    driver's and each worker's, on the cluster. Tune would wait for them without end.
    ``resuming``: the fix a ``--resume`` can take (:func:`resumed_fix`)."""
    cpus = [float(n.get("Resources", {}).get("CPU", 0)) for n in nodes if n.get("Alive")]
    if not cpus:
        return None
    if resources.workers > 1:
        need, have = 1 + resources.workers * resources.cpu, sum(cpus)
        if need <= have:
            return None
        return (
            f"a DDP trial needs {need:g} CPUs (its driver, and {resources.workers} workers of "
            f"resources.cpu {resources.cpu:g}) and the cluster has {have:g}: no trial would "
            f"start; "
            + (
                resumed_fix(f"the cluster has {need:g} CPUs", need)
                if resuming
                else ddp_cpu_fixes(resources, have)
            )
        )
    if resources.cpu <= max(cpus):
        return None
    return (
        f"a trial needs resources.cpu {resources.cpu:g} CPUs on one node and the largest node "
        f"has {max(cpus):g}: no trial would start; "
        + (
            resumed_fix(f"a node has {resources.cpu:g} CPUs", resources.cpu)
            if resuming
            else f"--set resources.cpu={max(1, int(max(cpus)))}"
        )
    )


def too_few_gpus(
    resources: Any, gpu: float, gpus: float, local: bool, resuming: bool = False
) -> str | None:
    """Why no DDP trial of the sweep could ever start where Ray holds ``gpus`` GPUs in all, with
    the fix, or None: each of its ``resources.workers`` workers holds ``gpu`` GPUs, and Tune
    would wait for them without end. ``local``: the launcher's own Ray, on this machine;
    ``resuming``: the fix a ``--resume`` can take (:func:`resumed_fix`)."""
    if resources.workers <= 1:
        return None
    need = resources.workers * gpu
    if need <= gpus:
        return None
    where = "the machine" if local else "the cluster"
    fits = int(gpus // gpu)
    if resuming:
        fix = resumed_fix(f"Ray holds {need:g} GPUs")
    else:
        fix = (
            f"--set resources.workers={fits} for fewer workers"
            if fits >= 2
            else "--set resources.workers=1 for one process a trial"
        ) + ("; or launch on a cluster with more (--address)" if local else "")
    return (
        f"a DDP trial needs {need:g} GPUs ({resources.workers} workers of resources.gpu "
        f"{gpu:g}) and {where} has {gpus:g}: no trial would start; {fix}"
    )


def cpu_float16_problem(float16: Sequence[str], resources: Any, resuming: bool = False) -> str:
    """Why a local launch whose trials asked for GPUs (``resources.gpu``) on a machine without one
    stops at float16 mixed precision (``float16``: the sweep's), with the fix (``resuming``: the
    one a ``--resume`` can take, :func:`resumed_fix`)."""
    return (
        f"trainer.precision {float16[0]} is float16 mixed precision, which Lightning runs on a "
        "GPU only, and this machine has none: the trials would train on the CPU (resources.gpu "
        f"{resources.asked_gpu} -> 0), at bf16-mixed in its place; "
        + (
            resumed_fix("there are GPUs")
            if resuming
            else "--set trainer.precision=bf16-mixed, or launch on a cluster with GPUs (--address)"
        )
    )


def local_cpu_note(
    resources: Any, address: str | None, num_cpus: int | None, float16: Sequence[str] = ()
) -> str | None:
    """``--dry-run``'s line where the launch would start a local Ray here whose CPUs no trial
    fits in (:func:`too_few_cpus`; Ray is not started by a dry run), or that no GPU here leaves
    the trials of ``float16`` mixed precision (the sweep's) on the CPU
    (:func:`cpu_float16_problem`); None otherwise, or where a GPU here would give the trials the
    arrangement's CPUs instead (``resources.gpu: auto``; a share of a GPU holds ``resources.cpu``
    as on the CPU, as :func:`check_cluster` counts it)."""
    if address not in (None, "local") or (address is None and os.environ.get("RAY_ADDRESS")):
        return None
    gpu_here = bool(resources.gpu and shutil.which("nvidia-smi"))
    if gpu_here and resources.auto_gpu:
        return None
    cpus = num_cpus or os.cpu_count() or 1
    if resources.gpu and float16 and not gpu_here:
        problem = cpu_float16_problem(float16, resources)
    else:
        problem = too_few_cpus(resources, [{"Alive": True, "Resources": {"CPU": cpus}}])
    if problem is None:
        return None
    return (
        f"note: on a local Ray instance here ({cpus} CPUs{'' if gpu_here else ', no GPU'}) the "
        f"launch would stop: {problem}"
    )
