"""Model size presets. Plain data, no torch: the sweep spec checks read them without importing
the models."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        embedding_dim=32,
        hidden_size=64,
        encoder_layers=1,
        decoder_layers=1,
        dropout=0.0,
        bidirectional=True,
    ),
    # Britz et al. (2017) §4.1 / §4.2: 2-layer 256-unit (copy) / 512-unit (WMT) bidirectional LSTM
    # encoder (units per direction, so memory size 512 / 1024), 2-layer decoder of the same units,
    # embeddings 256 / 512, dropout 0.2 on the input of each cell. Adam 1e-4, batch 128 and beam 10
    # are training settings: the studies (sweeps/*.yaml) set them.
    "paper_copy": dict(
        embedding_dim=256,
        hidden_size=256,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.2,
        bidirectional=True,
    ),
    "paper_wmt": dict(
        embedding_dim=512,
        hidden_size=512,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.2,
        bidirectional=True,
    ),
}


def get_preset(name: str) -> dict[str, Any]:
    """A copy of a preset's size arguments; an unknown name raises listing the valid ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(sorted(PRESETS))}")
    return dict(PRESETS[name])


def attention_dims(
    preset: str, hidden_size: int | None = None, bidirectional: bool | None = None
) -> tuple[int, int]:
    """(query_dim H, memory_dim D) of the attention in a model built from ``preset`` with these
    overrides: H = hidden_size, D = hidden_size x directions. For checking a mechanism's options
    (e.g. luong_dot's H == D) before any model is built."""
    sizes = get_preset(preset)
    hidden = hidden_size if hidden_size is not None else sizes["hidden_size"]
    bidi = bidirectional if bidirectional is not None else sizes["bidirectional"]
    return hidden, hidden * (2 if bidi else 1)
