"""Attention mechanisms behind one registry: ``build_attention(name, query_dim=, memory_dim=, **options)``."""
from .base import (
    ATTENTION_REGISTRY,
    Attention,
    attention_options,
    beam_groups,
    build_attention,
    map_batch,
    Shared,
    register_attention,
)

# Importing a mechanism's module registers it. One file per mechanism.
from . import none  # noqa: F401  (registers "none")
from . import bahdanau, key_value, local, luong, memory, monotonic  # noqa: F401,E402  (register the rest)

__all__ = [
    "ATTENTION_REGISTRY",
    "Attention",
    "attention_options",
    "beam_groups",
    "build_attention",
    "map_batch",
    "Shared",
    "register_attention",
]
