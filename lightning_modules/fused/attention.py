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

Members may differ in a mechanism's per-member options
(:data:`~lightning_modules.fused.axes.MEMBER_ATTENTION_OPTIONS`). The registered subclass reads
each member's value (:meth:`configure_members`, given every member's own module) where the
members differ; where they agree the plain class runs, as for one shape. A linear map whose
output size differs between members (memory attention's K, luong_location's positions) is
padded to the largest, for a subclass that says it masks the padded outputs
(``pads_outputs = True``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from ..attention import Attention
from ..attention.base import beam_groups
from ..attention.functional import masked_softmax
from ..attention.key_value import KeyValueAttention
from ..attention.local import LocalMonotonicAttention, LocalPredictiveAttention
from ..attention.luong import LuongLocationAttention
from ..attention.memory import MemoryAttention
from ..attention.monotonic import MonotonicAttention
from .layers import FusedLinear
from .layout import Leaf, identity, linear_leaves, scalar
from .memory import FusedMemoryAttention


def _values_differ(attentions: Sequence[Attention], attr: str) -> bool:
    return len({getattr(a, attr) for a in attentions}) > 1


def _member_column(values: Sequence[float]) -> torch.Tensor:
    return torch.tensor([float(v) for v in values])  # (M,)


class FusedMonotonicAttention(MonotonicAttention):
    """Monotonic attention's energy with per-member v (M, A), g (M, 1, 1) and r (M, 1, 1), and
    each member's own ``sigmoid_noise``."""

    noise_scales: torch.Tensor | None  # (M,) where members' noise differs

    @staticmethod
    def applies(attentions: Sequence[MonotonicAttention]) -> bool:
        return True  # v, g and r are parameters outside nn.Linear

    def configure_members(self, attentions: Sequence[MonotonicAttention]) -> None:
        scales = [a.sigmoid_noise for a in attentions]
        differ = _values_differ(attentions, "sigmoid_noise")
        self.register_buffer("noise_scales", _member_column(scales) if differ else None, False)
        self.sigmoid_noise = max(scales)  # > 0 where any member draws noise

    def _energy(self, keys: torch.Tensor, query_proj: torch.Tensor) -> torch.Tensor:
        """As :meth:`MonotonicAttention._energy` on member-major rows: keys (M * B, S, A)."""
        members, A = self.v.shape
        v_hat = self.v / self.v.norm(dim=1, keepdim=True)  # (M, A)
        hidden = torch.tanh(keys + query_proj).reshape(members, -1, A)  # (M, B*S, A)
        dots = torch.bmm(hidden, v_hat.unsqueeze(-1))  # (M, B*S, 1)
        energy = torch.addcmul(self.r, self.g, dots)  # (M, B*S, 1) g * v_hat^T tanh(.) + r
        return self._noisy(energy.view(keys.shape[:-1]))  # (M*B, S)

    def _noisy(self, energy: torch.Tensor) -> torch.Tensor:
        """The pre-sigmoid noise, in training mode only, each member at its own scale (energy
        (M * B, S))."""
        if not self.training or self.sigmoid_noise <= 0:
            return energy
        if self.noise_scales is None:  # one scale, as MonotonicAttention draws it
            return energy + self.sigmoid_noise * torch.randn_like(energy)
        scales = self.noise_scales.view(-1, 1)  # (M, 1)
        noise = torch.randn_like(energy).view(scales.shape[0], -1) * scales  # (M, B*S)
        return energy + noise.view_as(energy)

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


class FusedLuongLocationAttention(LuongLocationAttention):
    """luong_location over members built for different ``max_source_len``: W_a has the largest
    one's outputs, a member's positions past its own are padding. They are never attended to
    (each member's sentences are at most its own length long, :meth:`FusedSeq2Seq.train_step`
    checks it), so the masked softmax gives them weight 0 and gradient 0."""

    pads_outputs = True

    @staticmethod
    def applies(attentions: Sequence[LuongLocationAttention]) -> bool:
        return _values_differ(attentions, "max_source_len")

    def configure_members(self, attentions: Sequence[LuongLocationAttention]) -> None:
        self.max_source_len = max(a.max_source_len for a in attentions)


class FusedKeyValueAttention(KeyValueAttention):
    """Key-value attention whose members differ in ``scaled``: each member's scores times its own
    factor (1 or 1/sqrt(d_k))."""

    scales: torch.Tensor  # (M,)

    @staticmethod
    def applies(attentions: Sequence[KeyValueAttention]) -> bool:
        return _values_differ(attentions, "scale")

    def configure_members(self, attentions: Sequence[KeyValueAttention]) -> None:
        self.register_buffer("scales", _member_column([a.scale for a in attentions]), False)

    def step(self, query, cache, state, need_weights=False):
        keys = cache["keys"]  # (M*B, S, d_k)
        Bc, G = keys.shape[0], beam_groups(query, keys.shape[0])
        q = self.query_proj(query).view(Bc, G, -1)  # (M*B, G, d_k)
        scores = torch.einsum("bsk,bgk->bgs", keys, q)  # (M*B, G, S)
        members = self.scales.shape[0]
        scores = (scores.view(members, -1) * self.scales.view(-1, 1)).view_as(scores)
        weights = masked_softmax(scores, cache["mask"].unsqueeze(1))  # (M*B, G, S)
        ctx = torch.bmm(weights, cache["values"]).view(query.shape[0], -1)  # (N, d_v)
        return ctx, state, weights.view(query.shape[0], -1) if need_weights else None


class _FusedWindows:
    """Local attention whose members differ in ``window``: each member's own window and Gaussian
    (sigma = window / 2) on its rows. Mixed into the local_m and local_p classes."""

    windows: torch.Tensor  # (M,)
    spreads: torch.Tensor  # (M,) 2 sigma^2

    @staticmethod
    def applies(attentions: Sequence[Attention]) -> bool:
        return _values_differ(attentions, "window")

    def configure_members(self, attentions: Sequence[Attention]) -> None:
        self.register_buffer("windows", _member_column([a.window for a in attentions]), False)
        spreads = [2 * a.sigma**2 for a in attentions]
        self.register_buffer("spreads", _member_column(spreads), False)

    def step(self, query, cache, state, need_weights=False):
        """As :meth:`_LocalAttention.step`, with the window and sigma of each row's member."""
        mask = cache["mask"]  # (M*B, S)
        Bc, S = mask.shape
        G = beam_groups(query, Bc)
        members = self.windows.shape[0]
        p_t = self.center(query, cache, state)  # (N,)
        positions = torch.arange(S, device=query.device, dtype=p_t.dtype)  # (S,)
        offset = (positions[None, :] - p_t[:, None]).view(members, -1, G, S)  # (M, B, G, S)
        in_window = (offset.abs() <= self.windows.view(-1, 1, 1, 1)).view(Bc, G, S)
        scores = torch.einsum("bsh,bgh->bgs", cache["keys"], query.view(Bc, G, -1))  # (M*B, G, S)
        align = masked_softmax(scores, mask.unsqueeze(1) & in_window)  # (M*B, G, S)
        gaussian = torch.exp(-offset.square() / self.spreads.view(-1, 1, 1, 1))  # (M, B, G, S)
        weights = align * gaussian.view(Bc, G, S).to(align.dtype)  # (M*B, G, S) not renormalised
        ctx = torch.bmm(weights, cache["memory"]).view(query.shape[0], -1)  # (N, D)
        return (
            ctx,
            self._next_state(state),
            weights.view(query.shape[0], S) if need_weights else None,
        )


class FusedLocalMonotonicAttention(_FusedWindows, LocalMonotonicAttention):
    """local_m with each member's own window."""


class FusedLocalPredictiveAttention(_FusedWindows, LocalPredictiveAttention):
    """local_p with each member's own window."""


#: unfused class -> the subclass that reads its members' own options and its non-``nn.Linear``
#: parameters per member (used where its ``applies`` says the members need it)
FUSED_ATTENTION: dict[type[Attention], type[Attention]] = {
    MonotonicAttention: FusedMonotonicAttention,
    MemoryAttention: FusedMemoryAttention,
    LuongLocationAttention: FusedLuongLocationAttention,
    KeyValueAttention: FusedKeyValueAttention,
    LocalMonotonicAttention: FusedLocalMonotonicAttention,
    LocalPredictiveAttention: FusedLocalPredictiveAttention,
}


def fuse_attention(attentions: Sequence[Attention], prefix: str) -> tuple[Attention, list[Leaf]]:
    """A member-batched mechanism for the members' own mechanisms ``attentions`` (one per
    member, in member order: their options and sizes; the weights come from the leaves) and its
    leaves, whose parts are named ``prefix + <the parameter's name in the mechanism>``.

    Raises:
        ValueError: the members' mechanisms differ in class or in a shape no fused form pads, or
            the mechanism has parameters outside ``nn.Linear`` and no fused subclass.
    """
    first = attentions[0]
    if len({type(a) for a in attentions}) > 1:
        raise ValueError(
            f"members have different attention mechanisms {sorted({a.name for a in attentions})}"
        )
    subclass = FUSED_ATTENTION.get(type(first))
    if subclass is not None and not subclass.applies(attentions):
        subclass = None
    fused = copy.deepcopy(first)
    leaves: list[Leaf] = []
    linears = {name for name, m in first.named_modules() if isinstance(m, nn.Linear)}
    for name in sorted(linears):
        members = [a.get_submodule(name) for a in attentions]
        linear = members[0]
        shapes = [(m.in_features, m.bias is not None, m.out_features) for m in members]
        outs = [m.out_features for m in members]
        padded = len(set(outs)) > 1
        if len({s[:2] for s in shapes}) > 1 or (
            padded and not getattr(subclass, "pads_outputs", False)
        ):
            raise ValueError(
                f"attention {first.name!r}: the members' {name} differ in shape (in, bias, out: "
                f"{sorted(set(shapes))}), which no fused form pads: fuse only members of equal "
                "shape_key"
            )
        replacement = FusedLinear(linear.in_features, max(outs))
        fused.set_submodule(name, replacement)
        leaves += linear_leaves(
            replacement,
            prefix + name,
            linear.in_features,
            max(outs),
            linear.bias is not None,
            outs if padded else None,
        )
    others = sorted(name for name, _ in first.named_parameters() if _owner(name) not in linears)
    extra = subclass.extra_leaves(fused, first) if hasattr(subclass, "extra_leaves") else []
    covered = {name for leaf in extra for name in leaf.parts}
    if set(others) - covered:
        raise ValueError(
            f"attention {first.name!r} has parameters outside nn.Linear "
            f"({', '.join(sorted(set(others) - covered))}) that no fused form reads: register a "
            "subclass reading them per member in lightning_modules/fused/attention.py "
            "(FUSED_ATTENTION)"
        )
    if subclass is not None:
        fused.__class__ = subclass
        fused.configure_members(attentions)
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
