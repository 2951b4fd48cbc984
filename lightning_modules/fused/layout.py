"""The fused model's parameters as one flat (M, P) tensor, member i in row i.

Every parameter of the fused model (a *leaf*: its own ``nn.Parameter``, shape (M, *shape)) is a
view of one row-per-member buffer, its gradient a view of a second one, so that clipping and
Adam run as a handful of operations on whole (M, P) tensors whatever the number of weights, with
each member's settings broadcast over its row. A leaf may hold one or several of the unfused
model's parameters in whatever arrangement its products want (a weight stored transposed for
``bmm``, an LSTM's input and recurrent weights stacked, both directions side by side); ``parts``
names them and gives each as a view of one member's slice, so the same functions read and write
the weights, the gradients and Adam's moments of member i under their unfused names.

Members whose weights differ in size (memory attention's K) share a leaf of the group's largest
shape: ``Leaf.member_shapes`` holds each member's own, a member's slice is cut to it (from the
start of every dimension) before ``parts`` read it, and the rest of its row is *padding*: zeros
that the mechanism masks out, so their gradients, Adam's moments and the weights stay exactly 0
(:meth:`FlatParameters.padding`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

#: a view of one member's slice of a leaf (shape ``Leaf.shape``) as one unfused parameter
Part = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Leaf:
    """One fused parameter: set as ``owner.<attr>``, (M, *shape), holding the unfused parameters
    ``parts`` (name -> view of a member's slice). ``member_shapes``: each member's own shape
    where members differ (each at most ``shape``; None: all are ``shape``)."""

    owner: nn.Module
    attr: str
    shape: tuple[int, ...]
    parts: dict[str, Part] = field(default_factory=dict)
    member_shapes: list[tuple[int, ...]] | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def padded(self) -> bool:
        """Whether some member's own shape is smaller than the leaf's."""
        return self.member_shapes is not None and any(s != self.shape for s in self.member_shapes)

    def member_slice(self, row: torch.Tensor, member: int) -> torch.Tensor:
        """Member ``member``'s own part of its row ``row`` (``shape``): a view."""
        if self.member_shapes is None:
            return row
        return row[tuple(slice(0, n) for n in self.member_shapes[member])]


def identity(t: torch.Tensor) -> torch.Tensor:
    return t


def transposed(t: torch.Tensor) -> torch.Tensor:
    return t.t()


def first_row(t: torch.Tensor) -> torch.Tensor:
    return t[0]


def scalar(t: torch.Tensor) -> torch.Tensor:
    return t.view(())


def linear_leaves(
    owner: nn.Module,
    name: str,
    in_features: int,
    out_features: int,
    bias: bool,
    member_out: Sequence[int] | None = None,
) -> list[Leaf]:
    """A linear map's weight stored transposed, (in, out), and its bias as (1, out): the operands
    ``torch.baddbmm`` takes as they are.

    Args:
        member_out: each member's own output size where members differ (``out_features`` is then
            their largest; the columns past a member's own are padding).
    """
    weight_shapes = bias_shapes = None
    if member_out is not None:
        weight_shapes = [(in_features, n) for n in member_out]
        bias_shapes = [(1, n) for n in member_out]
    leaves = [
        Leaf(
            owner,
            "weight_t",
            (in_features, out_features),
            {f"{name}.weight": transposed},
            weight_shapes,
        )
    ]
    if bias:
        leaves.append(
            Leaf(owner, "bias", (1, out_features), {f"{name}.bias": first_row}, bias_shapes)
        )
    return leaves


class FlatParameters:
    """The flat buffers of a list of leaves: values, gradients and Adam's two moments, each
    (M, P); :meth:`bind` sets every leaf on its owner as a view of them."""

    def __init__(self, leaves: Sequence[Leaf], members: int, device: torch.device) -> None:
        self.leaves = list(leaves)
        self.offsets = []
        total = 0
        for leaf in self.leaves:
            self.offsets.append(total)
            total += leaf.numel
        self.size = total
        zeros = lambda: torch.zeros(members, total, device=device)  # noqa: E731
        self.data, self.grad = zeros(), zeros()
        self.exp_avg, self.exp_avg_sq = zeros(), zeros()

    @property
    def members(self) -> int:
        return self.data.shape[0]

    def buffers(self) -> dict[str, torch.Tensor]:
        return {
            "data": self.data,
            "grad": self.grad,
            "exp_avg": self.exp_avg,
            "exp_avg_sq": self.exp_avg_sq,
        }

    def leaf_view(self, buffer: torch.Tensor, index: int) -> torch.Tensor:
        """Leaf ``index`` of ``buffer``, (M, *shape): a view, writable."""
        leaf, start = self.leaves[index], self.offsets[index]
        return buffer[:, start : start + leaf.numel].view(buffer.shape[0], *leaf.shape)

    def bind(self) -> None:
        """Set every leaf on its owner as a Parameter viewing ``data``, its ``.grad`` viewing
        ``grad`` (autograd then accumulates into the flat gradient in place)."""
        for index, leaf in enumerate(self.leaves):
            param = nn.Parameter(self.leaf_view(self.data, index))
            param.grad = self.leaf_view(self.grad, index)
            setattr(leaf.owner, leaf.attr, param)

    def named_parts(self, buffer: torch.Tensor, member: int) -> Iterator[tuple[str, torch.Tensor]]:
        """Member ``member``'s unfused parameters in ``buffer`` (values, gradients or a moment),
        as views under their unfused names."""
        for index, leaf in enumerate(self.leaves):
            row = leaf.member_slice(self.leaf_view(buffer, index)[member], member)
            for name, part in leaf.parts.items():
                yield name, part(row)

    def padding(self) -> torch.Tensor | None:
        """(M, P) bool, True at the elements no member owns (its row past its own shapes), which
        stay exactly 0 in every buffer; None when no leaf is padded."""
        if not any(leaf.padded for leaf in self.leaves):
            return None
        mask = torch.zeros(self.members, self.size, dtype=torch.bool, device=self.data.device)
        for index, leaf in enumerate(self.leaves):
            if not leaf.padded:
                continue
            view = self.leaf_view(mask, index)  # (M, *shape)
            view.fill_(True)
            for member in range(self.members):
                leaf.member_slice(view[member], member).fill_(False)
        return mask

    def copy_members(self, source: FlatParameters, members: Sequence[int]) -> None:
        """Member ``members[j]`` of ``source`` (a layout of the same parameters, maybe padded
        otherwise) into member j of every buffer here, part by part; the rest stays as it is
        (zeros in a new layout)."""
        with torch.no_grad():
            for name, mine in self.buffers().items():
                theirs = source.buffers()[name]
                for j, i in enumerate(members):
                    parts = dict(source.named_parts(theirs, i))
                    for part, view in self.named_parts(mine, j):
                        view.copy_(parts[part])

    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace every buffer by ``fn(buffer)`` (moving, selecting rows) and bind again."""
        self.data, self.grad = fn(self.data), fn(self.grad)
        self.exp_avg, self.exp_avg_sq = fn(self.exp_avg), fn(self.exp_avg_sq)
        self.bind()
