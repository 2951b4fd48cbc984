"""The special token ids every datamodule and model share (docs/CONTRACTS.md), declared once.
Plain Python, no torch: the model package (defaults, decoding), the data package (batches,
sentencepiece training) and the sweeps (heatmaps) all import them from here.

    from datamodules.vocab import EOS_ID, ids_to_text
    ids_to_text([7, 12, 5, EOS_ID, PAD_ID])   # "7 12 5"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
#: the first id of a real symbol (the copy task's symbols are FIRST_SYMBOL .. FIRST_SYMBOL + vocab_size - 1)
FIRST_SYMBOL = 4
#: what text for BLEU leaves out of ids: padding (a row's fill, and a decode's after a sentence's
#: limit) and BOS (where a row starts with it). Not the unknown token: where a model emits it, it
#: is a wrong token and counts as one. Decoding never emits padding or BOS (lightning_modules.seq2seq).
DROPPED_IDS: tuple[int, ...] = (PAD_ID, BOS_ID)
#: how the special tokens are written (sentencepiece pieces, heatmap labels)
PIECES: dict[int, str] = {PAD_ID: "<pad>", BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>"}


def content_ids(
    ids: Sequence[int], eos_id: int = EOS_ID, specials: Iterable[int] = DROPPED_IDS
) -> list[int]:
    """The ids before the first ``eos_id``, ``specials`` dropped: ``[1, 7, 3, 5, 2, 0] -> [7, 3, 5]``
    (:data:`DROPPED_IDS` by default: the unknown token 3 stays). ``ids`` may be a tensor or array
    (anything with ``tolist``)."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    drop = set(specials)
    out = []
    for token in ids:
        if token == eos_id:
            break
        if token not in drop:
            out.append(int(token))
    return out


def ids_to_text(
    ids: Sequence[int], eos_id: int = EOS_ID, specials: Iterable[int] = DROPPED_IDS
) -> str:
    """Space-joined :func:`content_ids`: ``[7, 12, 5, 2, 0] -> "7 12 5"``, ``[7, 3, 5, 2] -> "7 3 5"``
    (the copy task's text)."""
    return " ".join(str(token) for token in content_ids(ids, eos_id, specials))
