"""Whether this process's torch can train on a GPU that Ray gives it: the one line, naming the
torch build and the fix, that the launcher (:mod:`sweeps.plan.folders`) and each trial
(:func:`sweeps.trial.fitting.pick_accelerator`) stop with. Imports torch only."""

from __future__ import annotations

import os

import torch

#: set to 1 where Ray's GPUs are declared for placement only (a simulated cluster on one
#: machine: ``ray.cluster_utils.Cluster(...).add_node(num_gpus=1)``); trials then train on the CPU
SIMULATED_GPUS = "MEMATTN_SIMULATED_GPUS"


def torch_build() -> str:
    """Which torch this is: ``torch 2.13.0+cpu (CPU-only, no CUDA)``,
    ``torch 2.5.1+cu124 (CUDA 12.4)``."""
    if torch.version.cuda:
        return f"torch {torch.__version__} (CUDA {torch.version.cuda})"
    if getattr(torch.version, "hip", None):
        return f"torch {torch.__version__} (ROCm {torch.version.hip})"
    return f"torch {torch.__version__} (CPU-only, no CUDA)"


def cpu_only_torch() -> bool:
    """True for a torch built without CUDA or ROCm: it can never train on a GPU."""
    return not (torch.version.cuda or getattr(torch.version, "hip", None))


def gpu_torch_problem(where: str) -> str | None:
    """Why this process's torch cannot train on a GPU that Ray gives ``where`` (one line, short
    enough for results.csv's ``error``, naming the torch build and the fix), or None when it can
    or the GPUs are declared only (:data:`SIMULATED_GPUS`)."""
    if os.environ.get(SIMULATED_GPUS) == "1" or torch.cuda.is_available():
        return None
    if not cpu_only_torch():
        return (
            f"{where}: {torch_build()} cannot reach the GPU Ray gave it (torch.cuda.is_available() "
            f"is False): check `nvidia-smi` there and the driver's CUDA version, or --set resources.gpu=0"
        )
    return (
        f"{where}: {torch_build()} would train on the CPU while Ray holds a GPU; install a CUDA "
        f"build of torch on every node (where nvidia-smi lists a GPU: `rm -rf .venv && make venv`; "
        f'cluster/README.md, "A CUDA build of torch"), or --set resources.gpu=0'
    )
