"""The two-phase attention interface shared by every mechanism, and its registry.

Decoding is incremental, so each mechanism splits its work in two:

    cache = attn.precompute(memory, mask)     # once per source sentence
    state = attn.initial_state(cache)          # recurrent alignment, or None
    ctx, state, weights = attn.step(query, cache, state, need_weights=False)   # once per target step

``cache`` and ``state`` are tensors, or (nested) tuples/dicts of tensors, or None, always with the
batch dimension first, so beam search can expand and reorder them generically
(:func:`map_batch`), without mechanism-specific code.

Sharing the cache across beams: a mechanism that sets ``shares_cache = True`` accepts a query
with G times as many rows as the cache (G = beams per sentence, rows sentence-major: query row
i reads cache row ``i // G``; see :func:`beam_groups`). Beam search then keeps the source-only
cache at one row per sentence and expands only the per-beam ``state``; for the other mechanisms
it copies the cache to every beam, as before.

A cache may also hold a :class:`Shared` value: tensors that are the same for every row, such as
weights rearranged once per decode for a faster step. :func:`map_batch` passes it through
untouched, so expanding or reordering rows never copies it.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

Cache = Any  # tensor | tuple | dict of tensors (batch first)
State = Any  # tensor | tuple | dict of tensors (batch first) | None

ATTENTION_REGISTRY: dict[str, type[Attention]] = {}
#: the mechanism a model gets when none is named, and the baseline the reports compare against
DEFAULT_ATTENTION = "bahdanau"


def register_attention(name: str) -> Callable[[type[Attention]], type[Attention]]:
    """Class decorator: make a mechanism buildable by ``build_attention(name, ...)``."""

    def deco(cls: type[Attention]) -> type[Attention]:
        if name in ATTENTION_REGISTRY and ATTENTION_REGISTRY[name] is not cls:
            raise ValueError(f"attention {name!r} is registered twice")
        if (
            cls.headline is not None
            and cls.headline not in inspect.signature(cls.__init__).parameters
        ):
            raise ValueError(
                f"attention {name!r}: headline {cls.headline!r} is not one of its constructor's options"
            )
        cls.name = name
        ATTENTION_REGISTRY[name] = cls
        return cls

    return deco


def attention_options(name: str) -> dict[str, Any]:
    """The options (constructor keyword arguments besides the dims) a mechanism accepts, with defaults."""
    cls = _lookup(name)
    sig = inspect.signature(cls.__init__)
    out = {}
    for pname, p in sig.parameters.items():
        if pname in ("self", "query_dim", "memory_dim") or p.kind in (
            p.VAR_KEYWORD,
            p.VAR_POSITIONAL,
        ):
            continue
        out[pname] = None if p.default is inspect.Parameter.empty else p.default
    return out


def headline_options() -> dict[str, tuple[str, str, Any]]:
    """Per mechanism that declares one, its headline option: ``{"memory": ("K", "memory vectors", 32), ...}``
    (the option, what it counts, its default). Results give it a column, tables and plots show it."""
    out = {}
    for name, cls in ATTENTION_REGISTRY.items():
        if cls.headline is not None:
            out[name] = (cls.headline, cls.headline_meaning, attention_options(name)[cls.headline])
    return out


def step_cost(name: str, options: dict[str, Any] | None = None) -> float:
    """Cost of one decoder step of mechanism ``name`` with ``options``, relative to memory
    attention's at K=1 (:meth:`Attention.relative_step_cost`): orders trials by expected length."""
    return _lookup(name).relative_step_cost(dict(options or {}))


def _lookup(name: str) -> type[Attention]:
    try:
        return ATTENTION_REGISTRY[name]
    except KeyError:
        valid = ", ".join(sorted(ATTENTION_REGISTRY))
        raise ValueError(f"unknown attention {name!r}; valid names: {valid}") from None


def build_attention(name: str, query_dim: int, memory_dim: int, **options: Any) -> Attention:
    """Build a registered mechanism by name.

    Args:
        name: registry name (``none``, ``bahdanau``, ``memory``, ...).
        query_dim: size H of the decoder state that queries the attention.
        memory_dim: size D of the encoder states attended over.
        **options: the mechanism's own options (e.g. ``K`` for memory attention). An option the
            mechanism does not take raises, listing the ones it does.
    """
    cls = _lookup(name)
    allowed = attention_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"attention {name!r} got unknown option(s) {unknown}; it accepts: "
            f"{', '.join(allowed) or '(no options)'}"
        )
    return cls(query_dim=query_dim, memory_dim=memory_dim, **options)


def beam_groups(query: torch.Tensor, cache_rows: int) -> int:
    """G, the query rows that share each cache row (1 outside beam search).

    Args:
        query: (N, ...) with N = cache_rows * G, rows grouped sentence-major.
        cache_rows: the cache's batch size.
    """
    rows = query.shape[0]
    if cache_rows == 0 or rows == cache_rows:
        return 1
    if rows % cache_rows:
        raise ValueError(
            f"attention step: {rows} query rows cannot share a cache of {cache_rows} rows; the query "
            "must have a whole number of rows (beams) per cache row (sentence)"
        )
    return rows // cache_rows


class Shared(types.SimpleNamespace):
    """Cache entries without a batch dimension (the same for every row), as attributes:
    ``Shared(weight=w)``, read as ``cache["shared"].weight``. ``map_batch`` leaves them alone."""


def map_batch(fn: Callable[[torch.Tensor], torch.Tensor], tree: Any) -> Any:
    """Apply ``fn`` to every tensor in a (nested) tuple/list/dict, e.g. ``index_select`` on dim 0."""
    if tree is None:
        return None
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: map_batch(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(map_batch(fn, v) for v in tree)
    return tree  # ints, floats, strings and Shared values pass through unchanged


class Attention(nn.Module):
    """Base class of every mechanism. Subclasses implement ``precompute`` and ``step``.

    Args:
        query_dim: size H of the decoder state (the query).
        memory_dim: size D of the encoder states (the memory).
    """

    name: ClassVar[str] = "?"
    #: whether ``step`` reads ``state`` (recurrent alignment), so the decoder must carry it
    recurrent: ClassVar[bool] = False
    #: whether the mechanism needs query_dim == memory_dim (its constructor raises otherwise)
    equal_sizes: ClassVar[bool] = False
    #: whether ``step`` accepts a cache shared by G query rows each (see the module docstring)
    shares_cache: ClassVar[bool] = False
    #: the option that tells this mechanism's variants apart (memory attention: "K"), or None. The
    #: sweep results give it a column of that name, the tables show it, the plots draw BLEU against it.
    headline: ClassVar[str | None] = None
    #: what the headline option is, for axis labels (memory attention: "memory vectors")
    headline_meaning: ClassVar[str] = ""
    #: cost of one decoder step relative to memory attention's, measured on the committed cpu run
    #: of k_vs_length (seconds per trial at L=40: none 216, memory 266-299, Bahdanau 385). The
    #: default is a mechanism that scores every source position at each step (Bahdanau, Luong,
    #: key-value, local, monotonic); the sweeps use it only to start the longest trials first.
    step_cost: ClassVar[float] = 1.4

    @classmethod
    def relative_step_cost(cls, options: dict[str, Any]) -> float:
        """:attr:`step_cost` for these options (a mechanism whose cost moves with an option
        overrides this)."""
        return cls.step_cost

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.memory_dim = memory_dim

    @property
    def context_dim(self) -> int:
        """Size of the returned context vector (D unless a value map changes it)."""
        return self.memory_dim

    @property
    def longest_source(self) -> int | None:
        """The longest source (incl. EOS) this mechanism as built can attend over; None: any
        length. A mechanism whose scores cover a fixed number of positions overrides this."""
        return None

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor) -> Cache:
        """Source-only work, once per sentence.

        Args:
            memory: encoder states (B, S, D).
            mask: (B, S) bool, True at real tokens.
        Returns:
            the cache ``step`` reads: tensors or tuples/dicts of tensors, batch first.
        """
        raise NotImplementedError

    def initial_state(self, cache: Cache) -> State:
        """The recurrent state before the first target step (None for stateless mechanisms)."""
        return None

    def step(
        self, query: torch.Tensor, cache: Cache, state: State, need_weights: bool = False
    ) -> tuple[torch.Tensor, State, torch.Tensor | None]:
        """One target step.

        Args:
            query: decoder state (B, H).
            cache: what ``precompute`` returned.
            state: what ``initial_state`` or the previous ``step`` returned.
            need_weights: also return the alignment over source positions (costs O(S) for
                mechanisms that otherwise avoid it, e.g. memory attention).
        Returns:
            ctx (B, context_dim), the new state, and weights (B, S) or None.
        """
        raise NotImplementedError

    def extra_weights(
        self, query: torch.Tensor, cache: Cache, state: State
    ) -> dict[str, torch.Tensor]:
        """Mechanism-specific alignments for visualisation (memory attention: alpha and beta)."""
        return {}
