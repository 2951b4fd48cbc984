"""Attention mechanisms fused over M members by reusing each mechanism's own class.

Every mechanism's maths works row by row (a batch of B sentences is B independent problems)
except where it meets its weights. So the fused mechanism is a copy of a member's module with
each ``nn.Linear`` replaced by a :class:`~lightning_modules.fused.layers.FusedLinear`, run on
the M members' batches folded into one of M * B member-major rows: ``precompute`` and ``step``
are the unfused class's own code, and each projection applies member m's weights to member m's
rows in one ``bmm``. A mechanism that keeps parameters outside ``nn.Linear`` (monotonic
attention's v, g and r) needs the few lines that read them written with the member dimension:
a subclass registered in :data:`FUSED_ATTENTION`. Nothing else is mechanism-specific, so a new
mechanism built from linear maps fuses by being registered.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..attention import Attention
from ..attention.monotonic import MonotonicAttention
from .layers import FusedLinear
from .layout import Leaf, identity, linear_leaves, scalar


class FusedMonotonicAttention(MonotonicAttention):
    """Monotonic attention's energy with per-member v (M, A), g (M, 1, 1) and r (M, 1, 1)."""

    def _energy(self, keys: torch.Tensor, query_proj: torch.Tensor) -> torch.Tensor:
        """As :meth:`MonotonicAttention._energy` on member-major rows: keys (M * B, S, A)."""
        members, A = self.v.shape
        v_hat = self.v / self.v.norm(dim=1, keepdim=True)  # (M, A)
        hidden = torch.tanh(keys + query_proj).reshape(members, -1, A)  # (M, B*S, A)
        dots = torch.bmm(hidden, v_hat.unsqueeze(-1))  # (M, B*S, 1)
        energy = torch.addcmul(self.r, self.g, dots)  # (M, B*S, 1) g * v_hat^T tanh(.) + r
        return self._noisy(energy.view(keys.shape[:-1]))  # (M*B, S)

    def _with_scan_inputs(self, cache):
        raise ValueError(
            "fused monotonic attention trains in its soft modes only; the hard scan runs on each "
            "member's own module (FusedSeq2Seq.member_module)"
        )

    @staticmethod
    def extra_leaves(module: nn.Module, attention: MonotonicAttention) -> list[Leaf]:
        A = attention.attention_dim
        return [
            Leaf(module, "v", (A,), {"v": identity}),
            Leaf(module, "g", (1, 1), {"g": scalar}),
            Leaf(module, "r", (1, 1), {"r": scalar}),
        ]


#: unfused class -> the subclass whose code reads its non-``nn.Linear`` parameters per member
FUSED_ATTENTION: dict[type[Attention], type[Attention]] = {
    MonotonicAttention: FusedMonotonicAttention,
}


def fuse_attention(attention: Attention, prefix: str) -> tuple[Attention, list[Leaf]]:
    """A member-batched copy of ``attention`` (any member's: the weights come from the leaves)
    and its leaves, whose parts are named ``prefix + <the parameter's name in the mechanism>``.

    Raises:
        ValueError: the mechanism has parameters outside ``nn.Linear`` and no fused subclass.
    """
    fused = copy.deepcopy(attention)
    leaves: list[Leaf] = []
    linears = {name for name, m in attention.named_modules() if isinstance(m, nn.Linear)}
    for name in sorted(linears):
        linear = attention.get_submodule(name)
        replacement = FusedLinear.like(linear)
        fused.set_submodule(name, replacement)
        leaves += linear_leaves(
            replacement,
            prefix + name,
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
        )
    others = sorted(name for name, _ in attention.named_parameters() if _owner(name) not in linears)
    subclass = FUSED_ATTENTION.get(type(attention))
    extra = subclass.extra_leaves(fused, attention) if subclass is not None else []
    covered = {name for leaf in extra for name in leaf.parts}
    if set(others) - covered:
        raise ValueError(
            f"attention {attention.name!r} has parameters outside nn.Linear "
            f"({', '.join(sorted(set(others) - covered))}) that no fused form reads: register a "
            "subclass reading them per member in lightning_modules/fused/attention.py "
            "(FUSED_ATTENTION)"
        )
    if subclass is not None:
        fused.__class__ = subclass
    for leaf in extra:
        delattr(fused, leaf.attr)
        leaf.parts = {prefix + name: part for name, part in leaf.parts.items()}
    leaves += extra
    return fused, leaves


def fold(x: torch.Tensor) -> torch.Tensor:
    """(M, B, ...) -> (M * B, ...): the member-major rows the mechanisms see."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _owner(name: str) -> str:
    """The path of the module that holds parameter ``name`` ("" for the mechanism itself)."""
    return name.rsplit(".", 1)[0] if "." in name else ""
