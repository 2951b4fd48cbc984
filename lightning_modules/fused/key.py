"""Which trials fuse: the group key of a :class:`~lightning_modules.module.Seq2SeqModule`'s
constructor arguments, and the member axes along which the members of a group may differ.

Two modules train as one fused model iff their :func:`shape_key` values are equal. The key holds
every argument that fixes a shared tensor's shape or the computation's structure, resolved the way
the module resolves it (the preset's sizes with the explicit sizes laid over them, the mechanism's
options with its defaults filled in and ``max_source_len`` passed on), so ``preset="tiny"`` and
the same sizes written out fuse.

Left out of the key, because members may differ in them (the lists are
:mod:`lightning_modules.fused.axes`', which imports no torch):

- ``lr``, ``weight_decay``: Adam's settings, applied per member (Adam is elementwise);
- ``dropout``: a probability, drawn per member (the masks' shapes do not depend on it);
- ``distill_weight``, ``teacher_checkpoint``, ``init_from_teacher``: a §3.1 student's teacher,
  its term's weight and its start, per member (each member's teacher runs on its own batch);
- ``val_beam_size``, ``length_penalty``, ``max_decode_len``, ``val_decode``: evaluation only;
  a member is evaluated as its own plain module (:meth:`FusedSeq2Seq.member_module`);
- the *member axes* (:func:`member_axes`): ``max_source_len`` (for every mechanism listed in
  ``MAX_SOURCE_LEN_PER_MEMBER``) and the mechanism's per-member options
  (``MEMBER_ATTENTION_OPTIONS``: memory attention's K, scoring functions, encoder normalisation
  and position encoding, ...), computed per member with padding and masks
  (:mod:`lightning_modules.fused.memory`); :func:`padded_axes` gives what a group of members
  computes (its padded sizes, the branches it evaluates), for a planner to cost it;
- ``preset``: only through the sizes it resolves to;
- the seed, which is no constructor argument: each member's initial weights are its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from ..attention import attention_options
from ..presets import get_preset
from .axes import (
    EVALUATION_SETTINGS,
    MEMBER_SETTINGS,
    PADDED_ATTENTION_OPTIONS,
    STEP_ARGUMENTS,
    member_attention_options,
    member_module_axes,
)

__all__ = [
    "EVALUATION_SETTINGS",
    "MEMBER_SETTINGS",
    "member_axes",
    "padded_axes",
    "shape_difference",
    "shape_key",
    "step_gaps",
    "unfusable_reason",
]

SIZES = ("embedding_dim", "hidden_size", "encoder_layers", "decoder_layers", "bidirectional")


def module_arguments(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """``hparams`` with Seq2SeqModule's defaults filled in; an unknown name raises, listing the
    valid ones."""
    from ..module import Seq2SeqModule  # deferred: the module imports Lightning

    signature = inspect.signature(Seq2SeqModule.__init__)
    valid = [name for name in signature.parameters if name != "self"]
    unknown = sorted(set(hparams) - set(valid))
    if unknown:
        raise ValueError(
            f"shape_key: {unknown} are not Seq2SeqModule arguments; valid: {', '.join(valid)}"
        )
    bound = signature.bind_partial(**dict(hparams))
    bound.apply_defaults()
    return {name: value for name, value in bound.arguments.items() if name != "self"}


def resolved_sizes(args: Mapping[str, Any]) -> dict[str, Any]:
    """The preset's sizes (dropout included) with the explicit ones laid over it, as the module
    builds them."""
    sizes = get_preset(args["preset"])
    sizes.update({k: args[k] for k in (*SIZES, "dropout") if args.get(k) is not None})
    return sizes


def resolved_attention_options(args: Mapping[str, Any]) -> dict[str, Any]:
    """The mechanism's options as the model builds it: defaults, the given ones, and
    ``max_source_len`` passed on where the mechanism takes it and it is not set."""
    options = attention_options(args["attention"])
    given = dict(args.get("attention_kwargs") or {})
    options.update(given)
    if "max_source_len" in options and given.get("max_source_len") is None:
        options["max_source_len"] = args["max_source_len"]  # as Seq2Seq passes it on
    return options


def shape_items(hparams: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The key as (setting, value) pairs, named so a mismatch can say which setting differs."""
    args = module_arguments(hparams)
    sizes = resolved_sizes(args)
    options = resolved_attention_options(args)
    per_member = set(member_attention_options(args["attention"]))
    items: list[tuple[str, Any]] = [
        ("src_vocab_size", args["src_vocab_size"]),
        ("tgt_vocab_size", args["tgt_vocab_size"]),
        ("attention", args["attention"]),
    ]
    items += [
        (f"attention_kwargs.{k}", _hashable(options[k]))
        for k in sorted(options)
        if k not in per_member
    ]
    items += [(k, sizes[k]) for k in SIZES]
    shared = ("max_source_len", "pad_id", "bos_id", "eos_id")
    axes = set(member_module_axes(args["attention"]))
    items += [(k, args[k]) for k in shared if k not in axes]
    return tuple(items)


def shape_key(hparams: Mapping[str, Any]) -> tuple:
    """The hashable group key: everything that must be equal for modules to train as one
    (module docstring). Two Seq2SeqModules fuse iff their keys are equal; their member axes
    (:func:`member_axes`) and settings may differ.

    Args:
        hparams: Seq2SeqModule constructor arguments (``module.hparams``, or a trial's subset of
            them: missing ones take the constructor's defaults).
    """
    return shape_items(hparams)


def member_axes(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A module's values along the member axes, resolved as the module builds them: what may
    differ between the members of one group besides the settings (lr, dropout, ...).

    Args:
        hparams: Seq2SeqModule constructor arguments, as for :func:`shape_key`.
    Returns:
        ``{"max_source_len": 11, "attention_kwargs.K": 16, "attention_kwargs.encoder_scoring":
        "softmax", ...}``: the module argument where it may differ per member, then the
        mechanism's per-member options (empty for a mechanism that has none).
    """
    args = module_arguments(hparams)
    options = resolved_attention_options(args)
    out = {k: args[k] for k in member_module_axes(args["attention"])}
    out.update(
        {f"attention_kwargs.{k}": options[k] for k in member_attention_options(args["attention"])}
    )
    return out


def padded_axes(members: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What one fused group of these members computes along the member axes, for costing it.

    Args:
        members: the members' Seq2SeqModule arguments (equal :func:`shape_key`).
    Returns:
        per member axis (:func:`member_axes`' names): the group's padded size for the options
        whose weights are padded to the largest member's (memory attention's K,
        luong_location's ``max_source_len``), else the sorted tuple of the values the members
        use (two values: both branches are computed).
    Raises:
        ValueError: no members, or their group keys differ.
    """
    if not members:
        raise ValueError("padded_axes needs at least one member")
    keys = {shape_key(h) for h in members}
    if len(keys) > 1:
        raise ValueError(
            "padded_axes: the members do not fuse; differing settings: "
            + "; ".join(d for h in members[1:] for d in shape_difference(members[0], h))
        )
    axes = [member_axes(h) for h in members]
    attention = module_arguments(members[0])["attention"]
    padded = {f"attention_kwargs.{k}" for k in PADDED_ATTENTION_OPTIONS.get(attention, ())}
    out: dict[str, Any] = {}
    for name in axes[0]:
        values = [a[name] for a in axes]
        if name in padded:
            out[name] = max(values)
        else:
            out[name] = tuple(_sorted(set(values)))
    return out


def shape_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The settings whose values differ between two modules' keys, as ``name: x != y``."""
    left, right = dict(shape_items(a)), dict(shape_items(b))
    return [
        f"{name}: {left.get(name)!r} != {right.get(name)!r}"
        for name in dict.fromkeys([*left, *right])
        if left.get(name) != right.get(name)
    ]


def step_gaps(hparams: Mapping[str, Any]) -> list[str]:
    """The Seq2SeqModule arguments set away from their defaults that the fused and the graphed
    training steps do not implement (not in :data:`~lightning_modules.fused.axes.STEP_ARGUMENTS`):
    a module with any trains with its own eager step, alone."""
    from ..module import Seq2SeqModule  # deferred: the module imports Lightning

    parameters = inspect.signature(Seq2SeqModule.__init__).parameters
    return [
        name
        for name, value in hparams.items()
        if name in parameters and name not in STEP_ARGUMENTS and value != parameters[name].default
    ]


def unfusable_reason(hparams: Mapping[str, Any]) -> str | None:
    """Why a module with these arguments cannot train fused, or None when it can: monotonic
    attention forced to its hard (test-time) mode in training has no fused form, nor has an
    argument the fused step does not implement (:func:`step_gaps`). (A student of a teacher
    fuses: each member's teacher pass runs beside the group's step, see
    :meth:`FusedSeq2Seq.train_step`.)"""
    args = module_arguments(hparams)
    gaps = step_gaps(args)
    if gaps:
        return (
            f"Seq2SeqModule's {', '.join(gaps)} set away from the default has no fused form "
            "(lightning_modules/fused/ does not implement it): it trains unfused"
        )
    if args["attention"] == "monotonic" and resolved_attention_options(args).get("mode") == "hard":
        return (
            "monotonic attention with mode='hard' trains on its hard scan, which has no fused "
            "form; leave mode unset (soft in training) or train it unfused"
        )
    return None


def _sorted(values: set) -> list:
    try:
        return sorted(values)
    except TypeError:  # values of several types
        return sorted(values, key=repr)


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value
