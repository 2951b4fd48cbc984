"""What may differ between the members of one fused model: plain lists, standard library only.

A planner that decides which trials fuse, before torch is imported (``--dry-run``), reads the same
lists as the fused model (:mod:`lightning_modules.fused.key`) from here::

    from lightning_modules.fused.axes import member_keys
    member_keys("memory")    # the model settings that may differ inside a group of memory attention

Four kinds of per-member settings:

- :data:`MEMBER_SETTINGS`: Adam's settings and the dropout probability, applied per member;
- :data:`TEACHER_SETTINGS`: a §3.1 student's teacher, its weight and its start, each member's
  own (a group may hold students of different teachers beside members with no teacher);
- :data:`EVALUATION_SETTINGS`: read only when a member is evaluated, as its own plain module;
- the *member axes*: settings that change what a member computes but not what it shares with the
  others. A member's memory attention may have its own K (its weights are padded to the group's
  largest K, the padded slots masked out), its own scoring functions and position encoding (each
  member's branch picked by a mask), and every member its own ``max_source_len`` (the length it
  was built for: its position encodings use it; luong_location's output layer is padded to the
  group's largest). :data:`MEMBER_ATTENTION_OPTIONS` lists them per mechanism,
  :data:`PADDED_ATTENTION_OPTIONS` those whose largest value sets the group's padded size (and so
  its cost), :data:`MAX_SOURCE_LEN_PER_MEMBER` the mechanisms whose members may have been built
  for different lengths.

Everything else (the mechanism, its other options, the sizes, the vocabularies, the special ids)
must be equal for modules to fuse.
"""

from __future__ import annotations

#: constructor arguments that may differ between the members of one fused model
MEMBER_SETTINGS = ("lr", "weight_decay", "dropout")
#: a student's §3.1 settings: each member's own teacher pass, term and start
TEACHER_SETTINGS = ("distill_weight", "teacher_checkpoint", "init_from_teacher")
#: constructor arguments that only evaluation reads
EVALUATION_SETTINGS = ("val_beam_size", "length_penalty", "max_decode_len", "val_decode")
#: constructor arguments every member of a group holds equal (the group key, resolved as the module
#: resolves them: :mod:`lightning_modules.fused.key`), besides the member axes
SHAPE_ARGUMENTS = (
    "src_vocab_size",
    "tgt_vocab_size",
    "attention",
    "attention_kwargs",
    "preset",
    "embedding_dim",
    "hidden_size",
    "encoder_layers",
    "decoder_layers",
    "bidirectional",
    "max_source_len",
    "pad_id",
    "bos_id",
    "eos_id",
)
#: every Seq2SeqModule argument that the training steps written apart from the module's own
#: implement: the fused model's (:mod:`lightning_modules.fused`) and the CUDA-graphed one
#: (:mod:`lightning_modules.cuda_graphs`), which compute the loss and the update themselves. A
#: new argument that changes training is implemented in both and listed here (and under the
#: group key or the member settings above); until then a module that sets it away from its
#: default trains alone, with the module's own eager step (:func:`step_gaps`).
STEP_ARGUMENTS = SHAPE_ARGUMENTS + MEMBER_SETTINGS + TEACHER_SETTINGS + EVALUATION_SETTINGS

#: per mechanism, the options that may differ between members (any other option must be equal).
#: memory: K padded to the largest, the scoring functions, the encoder softmax's axis and the
#: position encoding's on/off and normalisation are switches per member, ``max_source_len`` is
#: the S of each member's own position encodings. luong_location: its output layer, one row per
#: position up to ``max_source_len``, padded to the largest. key_value: ``scaled`` multiplies each
#: member's scores by its own factor. local_m/local_p: ``window`` sets each member's own window
#: and Gaussian. monotonic: ``score_bias_init`` only initialises r (copied from the member),
#: ``sigmoid_noise`` is each member's own noise scale, ``scan_chunk`` only reaches the hard scan
#: of evaluation.
MEMBER_ATTENTION_OPTIONS: dict[str, tuple[str, ...]] = {
    "memory": (
        "K",
        "encoder_scoring",
        "decoder_scoring",
        "encoder_normalization",
        "position_encoding",
        "position_encoding_normalization",
        "max_source_len",
    ),
    "luong_location": ("max_source_len",),
    "key_value": ("scaled",),
    "local_m": ("window",),
    "local_p": ("window",),
    "monotonic": ("score_bias_init", "sigmoid_noise", "scan_chunk"),
}

#: the member options whose group value is the largest member's: the weights are padded to it,
#: so a group costs what a model of that size costs
PADDED_ATTENTION_OPTIONS: dict[str, tuple[str, ...]] = {
    "memory": ("K",),
    "luong_location": ("max_source_len",),
}

#: mechanisms whose members may have been built with different ``max_source_len`` (the
#: constructor argument): it changes no shape of theirs, or only padded ones. A mechanism not
#: listed here (a new one) keeps ``max_source_len`` in its group key.
MAX_SOURCE_LEN_PER_MEMBER = (
    "bahdanau",
    "key_value",
    "local_m",
    "local_p",
    "luong_concat",
    "luong_dot",
    "luong_general",
    "luong_location",
    "memory",
    "monotonic",
    "none",
)


def member_attention_options(attention: str) -> tuple[str, ...]:
    """The options of mechanism ``attention`` that may differ between members (maybe none)."""
    return MEMBER_ATTENTION_OPTIONS.get(attention, ())


def member_module_axes(attention: str) -> tuple[str, ...]:
    """The Seq2SeqModule arguments (besides the settings) that may differ between members of
    mechanism ``attention``: ``("max_source_len",)`` or none."""
    return ("max_source_len",) if attention in MAX_SOURCE_LEN_PER_MEMBER else ()


def member_keys(attention: str) -> frozenset[str]:
    """Every model setting that may differ inside a fused group of mechanism ``attention``, by
    its bare name (a constructor argument such as ``lr``, or an attention option such as ``K``):
    what a planner leaves out of the key it groups trials by.

    Args:
        attention: the registered mechanism's name.
    Returns:
        the names; a setting not among them must be equal for trials to fuse.
    """
    return frozenset(
        MEMBER_SETTINGS
        + TEACHER_SETTINGS
        + EVALUATION_SETTINGS
        + member_module_axes(attention)
        + member_attention_options(attention)
    )
