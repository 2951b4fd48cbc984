"""Gradient clipping and Adam for M members on the flat (M, P) buffers, each member its own
settings.

Both are elementwise or per member, so one operation over the (M, P) tensor with a member's
setting broadcast over its row does every member's work at once. The maths is
``torch.nn.utils.clip_grad_norm_`` (as Lightning's ``gradient_clip_val`` calls it) and
``torch.optim.Adam``'s (its single-tensor form, L2 weight decay, bias correction in double
precision per member), with the norm summed in another order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .layout import FlatParameters

BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which Seq2SeqModule.configure_optimizers uses
EPS = 1e-8


def clip_grad_norms_(grad: torch.Tensor, clip: Sequence[float | None]) -> None:
    """Scale row m of ``grad`` (M, P) by min(1, clip[m] / (norm_m + 1e-6)) where clip[m] is a
    positive number (Lightning's ``gradient_clip_val``; None or 0 leaves the row alone)."""
    on = [c is not None and c > 0 for c in clip]
    if not any(on):
        return
    norms = torch.linalg.vector_norm(grad, dim=1)  # (M,)
    max_norm = torch.tensor([float(c) if o else 1.0 for c, o in zip(clip, on)], device=grad.device)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # (M,)
    if not all(on):
        coef = torch.where(torch.tensor(on, device=grad.device), coef, 1.0)
    grad.mul_(coef.unsqueeze(1))


def _column(values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device).unsqueeze(1)  # (M, 1)


#: elements of the (M, P) buffers one pass of Adam works on, on a CPU: 1 MiB of float32, so that
#: its temporaries stay in the core's cache (one pass over the whole of paper_copy's 3 x 5.3 M
#: weights streams each temporary through memory and took 3x as long per element). A GPU takes
#: the whole buffer in one pass: there each pass is a handful of kernel launches.
CPU_CHUNK = 1 << 18


@torch.no_grad()
def adam_step_(
    flat: FlatParameters,
    steps: list[int],
    lr: Sequence[float],
    weight_decay: Sequence[float],
) -> None:
    """One Adam step of every member (``steps`` counted up in place)."""
    beta1, beta2 = BETAS
    for m in range(len(steps)):
        steps[m] += 1
    # bias corrections in double precision per member, as Adam computes them from its step count
    step_size = _column([-rate / (1 - beta1**step) for rate, step in zip(lr, steps)], flat.data)
    correction2_sqrt = _column([(1 - beta2**step) ** 0.5 for step in steps], flat.data)
    decay = _column(weight_decay, flat.data) if any(weight_decay) else None
    chunk = CPU_CHUNK if flat.data.device.type == "cpu" else flat.data.numel()
    width = max(1, chunk // flat.members)
    for start in range(0, flat.size, width):
        cols = slice(start, start + width)
        param, grad = flat.data[:, cols], flat.grad[:, cols]
        exp_avg, exp_avg_sq = flat.exp_avg[:, cols], flat.exp_avg_sq[:, cols]
        if decay is not None:
            grad = torch.addcmul(grad, param, decay)  # grad + wd * param
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = (exp_avg_sq.sqrt() / correction2_sqrt).add_(EPS)
        param.addcdiv_(exp_avg * step_size, denom)


@torch.no_grad()
def clip_grad_norms_on_device_(grad: torch.Tensor, clip: torch.Tensor) -> None:
    """:func:`clip_grad_norms_` with each member's value a tensor on the device, clip (M, 1) (0:
    no clipping): no host value read or copied, so a CUDA graph can capture it."""
    norms = torch.linalg.vector_norm(grad, dim=1, keepdim=True)  # (M, 1)
    coef = (clip / (norms + 1e-6)).clamp(max=1.0)  # (M, 1)
    grad.mul_(torch.where(clip > 0, coef, 1.0))


@torch.no_grad()
def adam_step_on_device_(
    flat: FlatParameters,
    steps: torch.Tensor,
    lr: torch.Tensor,
    weight_decay: torch.Tensor | None,
) -> None:
    """:func:`adam_step_` with the step counts and settings tensors on the device: steps (M, 1)
    float32, counted up in place; lr and weight_decay (M, 1) (None: no decay). Its bias
    corrections are computed on the device in float32 (``torch.optim.Adam(capturable=True)``
    computes them so), not in double precision on the host: the same step to float32 rounding,
    and nothing a CUDA graph cannot capture."""
    beta1, beta2 = BETAS
    steps.add_(1)
    step_size = -lr / (1 - torch.pow(beta1, steps))  # (M, 1)
    correction2_sqrt = (1 - torch.pow(beta2, steps)).sqrt()  # (M, 1)
    grad = flat.grad
    if weight_decay is not None:
        grad = torch.addcmul(grad, flat.data, weight_decay)  # grad + wd * param
    flat.exp_avg.lerp_(grad, 1 - beta1)
    flat.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (flat.exp_avg_sq.sqrt() / correction2_sqrt).add_(EPS)
    flat.data.addcdiv_(flat.exp_avg * step_size, denom)


def adam_state_dict(
    flat: FlatParameters,
    member: int,
    names: Sequence[str],
    step: int,
    lr: float,
    weight_decay: float,
) -> dict[str, Any]:
    """Member ``member``'s Adam state in ``torch.optim.Adam.state_dict()``'s format, for an
    optimiser over the unfused module's parameters in the order ``names``."""
    group = torch.optim.Adam([torch.zeros(1)], lr=lr, weight_decay=weight_decay).state_dict()
    group = dict(group["param_groups"][0], params=list(range(len(names))))
    state: dict[int, dict[str, torch.Tensor]] = {}
    if step > 0:
        avg = dict(flat.named_parts(flat.exp_avg, member))
        avg_sq = dict(flat.named_parts(flat.exp_avg_sq, member))
        for index, name in enumerate(names):
            state[index] = {
                "step": torch.tensor(float(step)),
                "exp_avg": avg[name].clone(),
                "exp_avg_sq": avg_sq[name].clone(),
            }
    return {"state": state, "param_groups": [group]}


@torch.no_grad()
def load_adam_state_dict(
    flat: FlatParameters, member: int, names: Sequence[str], state_dict: dict[str, Any]
) -> int:
    """Copy an Adam state dict of the unfused module (parameters in the order ``names``) into
    member ``member``'s moments; returns its step count (0 for an optimiser that never stepped)."""
    state = state_dict["state"]
    if not state:
        flat.exp_avg[member].zero_()
        flat.exp_avg_sq[member].zero_()
        return 0
    avg = dict(flat.named_parts(flat.exp_avg, member))
    avg_sq = dict(flat.named_parts(flat.exp_avg_sq, member))
    steps = set()
    for index, name in enumerate(names):
        entry = state[index]
        avg[name].copy_(entry["exp_avg"])
        avg_sq[name].copy_(entry["exp_avg_sq"])
        steps.add(int(entry["step"]))
    if len(steps) != 1:
        raise ValueError(f"the Adam state's parameters have different step counts {sorted(steps)}")
    return steps.pop()
