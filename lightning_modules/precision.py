"""Reduced precision, opt-in: where the hardware computes bf16 natively, Lightning's
``precision="bf16-mixed"`` (``torch.autocast`` to bfloat16: matrix products and the encoder's
LSTM in bf16, weights, optimiser state and the loss in fp32) trains and decodes this model
faster at (nearly) the same results::

    import lightning.pytorch as pl
    from lightning_modules.precision import fastest_precision

    trainer = pl.Trainer(precision=fastest_precision("cpu"))   # "bf16-mixed" or "32-true"

Full precision ("32-true") stays the default everywhere: bf16 changes results beyond the last bits,
so a study must choose it (and say so). On a CPU without native bf16 (no AVX512_BF16 / AMX) the
bf16 products are emulated and slower, so :func:`fastest_precision` keeps fp32 there. It pays at
the paper's sizes (paper_copy on an AVX512_BF16 EPYC, one thread: training and decoding 1.6-1.7x
faster, benchmarks/peers.py); at the tiny preset's 32/64 units the casts cost more than the small
products save (200 steps took 1.4x as long). Every attention mechanism runs under CPU bf16
autocast (tests/lightning_modules/test_fast_paths.py).

On a GPU, native bf16 is not the same as faster for these recurrent models: on an H200, bf16-mixed
training steps at the paper_copy sizes took 1.06-1.31x as long as fp32's (kernel launches, not
products, bound a step there), and the quickstart's tiny models trained no faster at the same
BLEU (benchmarks/README.md, "On a GPU"). Time both with ``benchmarks/peers.py --device cuda``
before choosing it for a GPU study.
"""

from __future__ import annotations

from pathlib import Path

import torch


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``); empty where they cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def native_bf16(device: str | torch.device = "cpu") -> bool:
    """Whether ``device`` computes bf16 products in hardware: a CUDA GPU with bf16 (Ampere or
    later), or a CPU with AVX512_BF16 or AMX-BF16."""
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return False
        try:  # torch 2.4 on counts a GPU that emulates bf16 (before Ampere) unless told not to
            return torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # an older torch: hardware support only
            return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    return False


def fastest_precision(device: str | torch.device = "cpu") -> str:
    """Lightning's ``precision`` for ``device``: ``"bf16-mixed"`` where bf16 is native, else
    ``"32-true"``. Measured faster on CPUs with AVX512_BF16 at the paper's sizes; on a GPU, check
    first (the module's docstring)."""
    return "bf16-mixed" if native_bf16(device) else "32-true"
