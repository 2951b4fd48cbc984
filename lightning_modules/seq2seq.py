"""Encoder-decoder with pluggable attention: teacher-forced training, greedy and beam decoding.

Plain ``nn.Module`` code (no Lightning) so the model can be reused anywhere::

    model = Seq2Seq.from_preset("tiny", src_vocab_size=24, tgt_vocab_size=24, attention="memory",
                                attention_kwargs={"K": 16}, max_source_len=11)
    logits = model(src, src_lengths, tgt_in)                       # (B, T, V), teacher forcing
    tokens, lengths = model.greedy_decode(src, src_lengths, max_len=20)
    tokens = model.beam_search(src, src_lengths, beam_size=10, max_len=20)

The decoding methods run under ``torch.inference_mode``: what they return are inference tensors,
to read, or to ``.clone()`` before changing them in place or feeding them to a training step
(``Seq2SeqModule.decode`` returns the copy).

Architecture choices (documented once, here):

* Encoder: embeddings -> dropout -> (bi)LSTM stack over packed sequences. ``hidden_size`` is the
  number of units *per direction* (google/seq2seq's reading of the paper's "256-unit
  bidirectional LSTM"), so a bidirectional encoder's memory has size ``D = 2 * hidden_size``
  (``Encoder.output_size``), twice the decoder's query size H; every mechanism takes H and D
  separately (luong_dot, which needs H == D, raises and names the fix).
* Bridge: ``tanh(W [final states of every encoder layer and direction])`` gives the decoder's
  initial (h, c) for every decoder layer (separate linears for h and c), so the encoder and
  decoder may have different depths and the no-attention baseline is a real seq2seq model.
* Decoder (the previous context fed back): step i reads ``x_i = [emb(y_{i-1}); c_{i-1}]``,
  runs one ``nn.LSTMCell`` per layer, queries the attention with the top state ``h_i`` to get the
  context ``c_i``, and predicts ``softmax(W [h_i; c_i] + b)``. ``c_0 = 0``. No extra tanh layer:
  the fed-back vector is the raw context ``c_{i-1}``.
* Dropout as the paper ("applied to the input of each cell"): on the encoder's embeddings and
  between its layers, on the decoder's whole first-cell input ``[emb(y_{i-1}); c_{i-1}]`` (the
  fed-back context included) and between its layers; nowhere else (not before the output layer).
* Beam search keeps ``beam_size`` unfinished hypotheses per sentence and a separate pool of
  finished ones. Each step ranks the ``2 * beam_size`` best extensions by log-probability (all
  unfinished hypotheses have the same length, so this is also the length-normalised order);
  those ending in EOS among the first ``beam_size`` enter the pool with their normalised score
  ``score / len ** length_penalty`` (len counts EOS), the best ``beam_size`` others stay alive.
  A sentence is done once ``beam_size`` hypotheses finished and no live hypothesis can still
  beat the pool's best: with ``length_penalty`` alpha > 0 a completion's raw log-probability is
  at most its live prefix's (<= 0) while its length may grow to the sentence's limit, so the
  bound is ``best live raw / limit ** alpha``; with alpha <= 0 it is ``best live raw /
  current_len ** alpha``. The result is the pool's best by normalised score (an unfinished
  hypothesis only where none finished by the sentence's limit). A finished hypothesis is never
  lost to partial ones. ``beam_size=1`` is exactly greedy when alpha = 0; with alpha > 0 it may
  go on past greedy's EOS and return a longer hypothesis with a better normalised score.
* Length limit: ``max_len`` steps for every sentence when given; by default each sentence's own
  ``2 * source length + 10``, so a sentence decodes the same alone and in any batch. A sentence
  at its limit is closed without EOS (its length is the limit).
* Never emitted: greedy decoding, beam search and the attention trace never extend a hypothesis
  with padding or BOS (unless BOS is also EOS): greedy's logits (through the output layer's bias
  in the decode tables: no extra operation a step) and beam search's log-probabilities (after the
  softmax, so that a score stays the model's own log-probability) are -inf there. Neither is
  ever a target, and an output holding one would be a wrong token that the text for BLEU drops
  without a trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from datamodules.ranges import check_ranges
from datamodules.vocab import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
)  # the defaults; a datamodule passes its own ids

from . import packed_lstm
from .attention import attention_options, build_attention, map_batch
from .attention.base import Attention
from .presets import PRESETS, attention_dims, get_preset  # noqa: F401  (re-exported)

LSTMState = tuple[list[torch.Tensor], list[torch.Tensor]]  # per-layer h (B, H) and c (B, H)


def source_mask(src_lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B, S) bool, True at real tokens."""
    positions = torch.arange(max_len, device=src_lengths.device)  # (S,)
    return positions.unsqueeze(0) < src_lengths.unsqueeze(1)  # (B, S)


class Encoder(nn.Module):
    """Embeddings -> dropout -> (bi)LSTM stack, run on packed sequences, plus the bridge.

    Args:
        vocab_size: source vocabulary size.
        embedding_dim: embedding size E.
        hidden_size: LSTM units per direction; the memory has size ``output_size`` =
            ``hidden_size`` x directions.
        num_layers: LSTM layers.
        dropout: dropout on the input of each layer (the embeddings, and between LSTM layers).
        bidirectional: run a backward LSTM as well.
        decoder_layers: number of decoder layers the bridge initialises.
        decoder_hidden_size: size of each decoder layer's state.
        pad_id: padding id (its embedding is zero and gets no gradient).
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        hidden_size: int,
        num_layers: int,
        dropout: float,
        bidirectional: bool,
        decoder_layers: int,
        decoder_hidden_size: int,
        pad_id: int = PAD_ID,
    ) -> None:
        super().__init__()
        self.num_directions = 2 if bidirectional else 1
        self.hidden_size = hidden_size
        self.output_size = hidden_size * self.num_directions
        self.num_layers = num_layers
        self.decoder_layers = decoder_layers
        self.decoder_hidden_size = decoder_hidden_size
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_id)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.LSTM(
            embedding_dim,
            hidden_size,
            num_layers=num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
            bidirectional=bidirectional,
            batch_first=True,
        )
        final_size = num_layers * self.output_size  # every layer's final state, both directions
        self.bridge_h = nn.Linear(final_size, decoder_layers * decoder_hidden_size)
        self.bridge_c = nn.Linear(final_size, decoder_layers * decoder_hidden_size)

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, LSTMState]:
        """Encode a padded batch.

        Args:
            src: (B, S) source ids, right-padded.
            src_lengths: (B,) real lengths (>= 1).
        Returns:
            memory (B, S, D) (zeros at padding), mask (B, S) True at real tokens, and the decoder's
            initial state: lists (one entry per decoder layer) of h (B, H) and c (B, H).
        """
        batch, seq_len = src.shape
        emb = self.dropout(self.embedding(src))  # (B, S, E)
        packed = pack_padded_sequence(
            emb, src_lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        if packed_lstm.applies(
            self.rnn, packed.data, packed.batch_sizes
        ):  # CPU training: the same bits, faster
            steps, h_n, c_n = packed_lstm.packed_lstm(self.rnn, packed.data, packed.batch_sizes)
            unsort = packed.unsorted_indices
            memory = packed_lstm.pad_steps(steps, seq_len).index_select(0, unsort)  # (B, S, D)
            h_n, c_n = h_n.index_select(1, unsort), c_n.index_select(1, unsort)
        else:
            out, (h_n, c_n) = self.rnn(packed)  # h_n, c_n: (layers * dirs, B, hidden_size)
            memory, _ = pad_packed_sequence(out, batch_first=True, total_length=seq_len)
        mask = source_mask(src_lengths, seq_len)  # (B, S)
        h0 = torch.tanh(self.bridge_h(h_n.transpose(0, 1).reshape(batch, -1)))  # (B, L_dec * H)
        c0 = torch.tanh(self.bridge_c(c_n.transpose(0, 1).reshape(batch, -1)))  # (B, L_dec * H)
        h0 = h0.view(batch, self.decoder_layers, self.decoder_hidden_size)  # (B, L_dec, H)
        c0 = c0.view(batch, self.decoder_layers, self.decoder_hidden_size)  # (B, L_dec, H)
        hs = [h0[:, layer].contiguous() for layer in range(self.decoder_layers)]
        cs = [c0[:, layer].contiguous() for layer in range(self.decoder_layers)]
        return memory, mask, (hs, cs)


class Decoder(nn.Module):
    """LSTM-cell stack with input feeding and attention; one call of :meth:`step` per target token.

    Args:
        vocab_size: target vocabulary size V.
        embedding_dim: embedding size E.
        hidden_size: state size H of every layer (the attention's query size).
        num_layers: LSTM layers.
        dropout: dropout on the input of each cell: [embedding; fed-back context], and between layers.
        attention: a built mechanism (query_dim H, memory_dim D).
        pad_id: padding id.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        hidden_size: int,
        num_layers: int,
        dropout: float,
        attention: Attention,
        pad_id: int = PAD_ID,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.attention = attention
        self.context_dim = attention.context_dim
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_id)
        self.dropout_p = dropout
        self.dropout = nn.Dropout(dropout)
        sizes = [embedding_dim + self.context_dim] + [hidden_size] * (num_layers - 1)
        self.cells = nn.ModuleList(nn.LSTMCell(size, hidden_size) for size in sizes)
        self.out = nn.Linear(hidden_size + self.context_dim, vocab_size)

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x) if self.training and self.dropout_p > 0 else x

    def _cells(
        self, x: torch.Tensor, hs: list[torch.Tensor], cs: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        new_h, new_c = [], []
        last = self.num_layers - 1
        for layer, cell in enumerate(self.cells):
            h, c = cell(x, (hs[layer], cs[layer]))  # (B, H), (B, H)
            new_h.append(h)
            new_c.append(c)
            x = self._drop(h) if layer < last else h
        return new_h, new_c

    # ---------------------------------------------------------------- the fused form (decoding)
    # The same LSTM maths as ``nn.LSTMCell`` (gates i, f, g, o; c' = f c + i g; h' = o tanh c'),
    # with the gate products grouped differently: layer 0's embedding part W_e emb(y) + both
    # biases as a (V, 4H) table computed once per decode and read by token, the per-step rest as
    # ONE product [c_{i-1}; h] [W_c; W_hh]^T (layer l > 0: [h_{l-1}; h_l] [W_ih; W_hh]^T). The
    # float sums run in another order: logits agree with the cells' to rounding (~1e-7), not bit
    # for bit. Teacher forcing keeps the cells: grouping the products there did not pay on CPU
    # (the products are as large either way) and would change a seeded training run's last bits.

    def _fused_weights(self) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Per layer the (4H, K) weight of the per-step product and its (4H,) bias (None for
        layer 0, whose biases go with the embedding part)."""
        E = self.embedding.embedding_dim
        weights, biases = [], []
        for layer, cell in enumerate(self.cells):
            w_in = cell.weight_ih[:, E:] if layer == 0 else cell.weight_ih  # (4H, C) | (4H, H)
            weights.append(torch.cat([w_in, cell.weight_hh], dim=1))  # (4H, K)
            biases.append(None if layer == 0 else cell.bias_ih + cell.bias_hh)  # (4H,)
        return weights, biases

    def _embedding_gates(self, emb: torch.Tensor) -> torch.Tensor:
        """Layer 0's embedding part of the gates, biases included: (N, E) -> (N, 4H)."""
        cell = self.cells[0]
        E = self.embedding.embedding_dim
        return torch.addmm(cell.bias_ih + cell.bias_hh, emb, cell.weight_ih[:, :E].t())  # (N, 4H)

    @staticmethod
    def _lstm(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The LSTM cell's pointwise part, as ``nn.LSTMCell`` computes it: (B, 4H), (B, H) ->
        h, c (B, H)."""
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # (B, H)
        return torch.sigmoid(o) * torch.tanh(c), c

    def _fused_cells(
        self,
        gates0_in: torch.Tensor,
        ctx_in: torch.Tensor,
        hs: list[torch.Tensor],
        cs: list[torch.Tensor],
        weights: list[torch.Tensor],
        biases: list[torch.Tensor | None],
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One step of the stack in the fused form (no dropout).

        Args:
            gates0_in: (B, 4H) layer 0's embedding part (biases included).
            ctx_in: (B, C) the fed-back context.
            hs, cs: per-layer state; weights, biases: :meth:`_fused_weights`.
        """
        new_h, new_c = [], []
        x = ctx_in
        for layer in range(self.num_layers):
            inp = torch.cat([x, hs[layer]], dim=1)  # (B, K)
            if layer == 0:
                gates = torch.addmm(gates0_in, inp, weights[0].t())  # (B, 4H)
            else:
                gates = torch.addmm(biases[layer], inp, weights[layer].t())  # (B, 4H)
            h, c = self._lstm(gates, cs[layer])
            new_h.append(h)
            new_c.append(c)
            x = h
        return new_h, new_c

    def decode_tables(self, never_emitted: Sequence[int] = ()) -> dict[str, Any]:
        """What every decoding step reuses, computed once per decode (eval mode): layer 0's
        embedding part of the gates for every token (V, 4H), and :meth:`_fused_weights`. With
        ``never_emitted`` ids, the output layer's bias with -inf at those ids (``out_bias``, (V,)):
        the step's logits come out masked, at no extra operation a step."""
        weights, biases = self._fused_weights()
        tables = {
            "embedding_gates": self._embedding_gates(self.embedding.weight),  # (V, 4H)
            "weights": weights,
            "biases": biases,
        }
        if never_emitted:
            bias = self.out.bias.detach().clone()  # (V,)
            bias[list(never_emitted)] = float("-inf")
            tables["out_bias"] = bias
        return tables

    def step(
        self,
        y_prev: torch.Tensor,
        state: LSTMState,
        ctx_prev: torch.Tensor,
        cache: Any,
        attn_state: Any,
        need_weights: bool = False,
        tables: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, LSTMState, torch.Tensor, Any, torch.Tensor | None]:
        """One decoding step.

        Args:
            y_prev: (B,) previous tokens.
            state: per-layer h and c lists.
            ctx_prev: (B, C) previous context (input feeding).
            cache, attn_state: the attention's cache and recurrent state.
            need_weights: ask the attention for its alignment.
            tables: :meth:`decode_tables`, for the fused form (used when no dropout applies).
        Returns:
            logits (B, V), new LSTM state, context (B, C), new attention state, weights (B, S) or None.
        """
        if tables is not None and not (self.training and self.dropout_p > 0):
            gates0 = tables["embedding_gates"].index_select(0, y_prev)  # (B, 4H)
            hs, cs = self._fused_cells(
                gates0, ctx_prev, state[0], state[1], tables["weights"], tables["biases"]
            )
        else:
            x = self._drop(torch.cat([self.embedding(y_prev), ctx_prev], dim=-1))  # (B, E + C)
            hs, cs = self._cells(x, state[0], state[1])
        ctx, attn_state, weights = self.attention.step(
            hs[-1], cache, attn_state, need_weights
        )  # (B, C)
        bias = self.out.bias if tables is None else tables.get("out_bias", self.out.bias)
        logits = F.linear(torch.cat([hs[-1], ctx], dim=-1), self.out.weight, bias)  # (B, V)
        return logits, (hs, cs), ctx, attn_state, weights

    def forward(
        self, tgt_in: torch.Tensor, state: LSTMState, cache: Any, attn_state: Any
    ) -> torch.Tensor:
        """Teacher forcing over a whole target.

        Args:
            tgt_in: (B, T) decoder inputs (BOS followed by the shifted target).
            state: initial per-layer h and c from the bridge.
        Returns:
            logits (B, T, V).
        """
        return self.out(self.features(tgt_in, state, cache, attn_state))  # (B, T, V)

    def features(
        self, tgt_in: torch.Tensor, state: LSTMState, cache: Any, attn_state: Any
    ) -> torch.Tensor:
        """Teacher forcing's output-layer inputs ``[h_i; c_i]`` (B, T, H + C): the top decoder
        state and the attention context of every target step (:meth:`forward` without ``out``)."""
        batch, steps = tgt_in.shape
        # unbind, not emb[:, t]: an index's backward writes a zero (B, T, E) gradient per step
        # and adds them all up; unbind's stacks the T slices once (the same values)
        emb = self.embedding(tgt_in).unbind(1)  # T x (B, E)
        hs, cs = state
        ctx = emb[0].new_zeros(batch, self.context_dim)  # (B, C)
        outputs = []
        for t in range(steps):
            x = self._drop(torch.cat([emb[t], ctx], dim=-1))  # (B, E + C)
            hs, cs = self._cells(x, hs, cs)
            ctx, attn_state, _ = self.attention.step(hs[-1], cache, attn_state, False)  # (B, C)
            outputs.append(torch.cat([hs[-1], ctx], dim=-1))  # (B, H + C)
        return torch.stack(outputs, dim=1)  # (B, T, H + C)


def check_special_ids(
    src_vocab_size: int, tgt_vocab_size: int, pad_id: int, bos_id: int, eos_id: int
) -> None:
    """Raise ValueError naming a special id outside the vocabularies that hold it (a source holds
    pad and EOS, a target pad, BOS and EOS: docs/CONTRACTS.md), or a pad id shared with BOS or EOS
    (padding is left out of the loss and has a zero embedding). BOS and EOS may share an id."""
    sides = {
        "src": (src_vocab_size, ("pad_id", "eos_id")),
        "tgt": (tgt_vocab_size, ("pad_id", "bos_id", "eos_id")),
    }
    ids = {"pad_id": pad_id, "bos_id": bos_id, "eos_id": eos_id}
    for side, (size, names) in sides.items():
        for name in names:
            if not 0 <= ids[name] < size:
                raise ValueError(
                    f"{name}={ids[name]} is not an id of the {side} vocabulary "
                    f"({side}_vocab_size={size}: ids 0 to {size - 1}); pass {name} below {size}, "
                    f"or {side}_vocab_size={ids[name] + 1} or more"
                )
    why = {
        "eos_id": "padding is left out of the loss, so the model would never learn to end",
        "bos_id": "the padding id's embedding is fixed at zero, so BOS would carry nothing",
    }
    for name in ("eos_id", "bos_id"):
        if ids[name] == pad_id:
            raise ValueError(
                f"pad_id and {name} are both {pad_id}: {why[name]}; give them different ids"
            )


def ids_error(where: str, side: str, low: int, high: int, own: int) -> ValueError | None:
    """The error for ids of ``side`` ("src"/"tgt") outside ``0 .. own - 1`` (``low``/``high``:
    the smallest and largest seen; ``where``: the tensor that holds them), or None when in range.
    Shared by the model's input checks and the training/evaluation steps' batch check."""
    if low < 0:
        return ValueError(
            f"{side} ids in {where} go down to {low}, but ids are 0 to {own - 1} "
            f"({side}_vocab_size={own}); pass token ids, not negative values"
        )
    if high >= own:
        return ValueError(
            f"{side} ids go up to {high} but the model was built for {side}_vocab_size={own} "
            f"(ids 0 to {own - 1}), in {where}; pass {side}_vocab_size={high + 1} or "
            f"more (the data's {side} vocabulary size) to Seq2SeqModule, or ids below {own}"
        )
    return None


def _capturing(tensor: torch.Tensor) -> bool:
    """Whether a CUDA graph is being captured on ``tensor``'s device: no host reads then."""
    return tensor.is_cuda and torch.cuda.is_current_stream_capturing()


def _tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def _described(value: Any, as_tensor: str) -> str:
    """What an input check says it got: ``as_tensor`` for a tensor, else the value's type."""
    return as_tensor if _tensor(value) else type(value).__name__


def _is_ids(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.dtype in (torch.long, torch.int)


def check_inputs(
    src: Any,
    src_lengths: Any,
    src_vocab_size: int,
    tgt_in: Any = None,
    tgt_vocab_size: int | None = None,
) -> None:
    """Raise ValueError naming the argument and the fix when ``src`` is not a (B, S) integer
    tensor, ``src_lengths`` not a (B,) integer tensor of lengths 1 to S, ``tgt_in`` (when given)
    not a (B, T) integer tensor, or an id lies outside its vocabulary. The shape and type checks
    read nothing from the device; the value checks read four to six numbers in one transfer (the
    encoder reads the lengths back anyway) and are skipped while a CUDA graph is captured."""
    if not _is_ids(src) or src.dim() != 2:
        got = _described(src, f"a {src.dim()}-D {src.dtype} tensor" if _tensor(src) else "")
        raise ValueError(
            f"src must be a (B, S) LongTensor of token ids (a batch of right-padded sentences), "
            f"got {got}; for one sentence pass src.unsqueeze(0) with src_lengths of shape (1,), "
            "and convert other types with torch.as_tensor(..., dtype=torch.long)"
        )
    batch, width = src.shape
    rule = f"src_lengths must be a (B,) LongTensor with 1 <= length <= src.shape[1] (here B={batch}, S={width})"
    if not _is_ids(src_lengths):
        got = _described(src_lengths, str(src_lengths.dtype) if _tensor(src_lengths) else "")
        raise ValueError(
            f"{rule}, got {got}; pass torch.tensor(lengths, dtype=torch.long, device=src.device)"
        )
    if tuple(src_lengths.shape) != (batch,):
        raise ValueError(
            f"{rule}, got shape {tuple(src_lengths.shape)}; give one length (incl. EOS) per row "
            "of src"
        )
    if tgt_in is not None:
        if not _is_ids(tgt_in) or tgt_in.dim() != 2 or tgt_in.shape[0] != batch:
            shown = f"{tgt_in.dtype} of shape {tuple(tgt_in.shape)}" if _tensor(tgt_in) else ""
            got = _described(tgt_in, shown)
            raise ValueError(
                f"tgt_in must be a (B, T) LongTensor of decoder inputs with src's B={batch} rows "
                f"(BOS then the target shifted right: shift_target(tgt)), got {got}"
            )
    if batch == 0 or _capturing(src):
        return
    parts = [src_lengths.min(), src_lengths.max(), src.min(), src.max()]
    if tgt_in is not None and tgt_in.numel():
        parts += [tgt_in.min(), tgt_in.max()]
    # one device read (src_lengths may sit on the CPU beside a CUDA src: the encoder allows it)
    values = torch.stack([p.to(device=src.device, dtype=torch.long) for p in parts]).tolist()
    shortest, longest = values[0], values[1]
    if shortest < 1 or longest > width:
        bad = shortest if shortest < 1 else longest
        raise ValueError(
            f"{rule}, got a length of {bad}; a length counts a sentence's real tokens incl. EOS "
            "(padding excluded), so it is at least 1 and at most the padded width"
        )
    error = ids_error("src", "src", values[2], values[3], src_vocab_size)
    if error is None and len(values) > 4 and tgt_vocab_size is not None:
        error = ids_error("tgt_in", "tgt", values[4], values[5], tgt_vocab_size)
    if error is not None:
        raise error


class Seq2Seq(nn.Module):
    """Encoder, bridge, attention and input-feeding decoder.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (ids per docs/CONTRACTS.md).
        attention: registered mechanism name (``lightning_modules.attention.ATTENTION_REGISTRY``).
        attention_kwargs: the mechanism's own options (e.g. ``{"K": 16}``).
        embedding_dim, hidden_size, encoder_layers, decoder_layers, dropout, bidirectional: sizes
            (``hidden_size``: decoder units, and encoder units per direction).
        max_source_len: longest source (incl. EOS) the model must handle; passed to mechanisms that
            take a ``max_source_len`` option (memory, luong_location) unless set in attention_kwargs.
        pad_id, bos_id, eos_id: special token ids.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        attention: str = "bahdanau",
        attention_kwargs: dict[str, Any] | None = None,
        embedding_dim: int = 32,
        hidden_size: int = 64,
        encoder_layers: int = 1,
        decoder_layers: int = 1,
        dropout: float = 0.0,
        bidirectional: bool = True,
        max_source_len: int = 256,
        pad_id: int = PAD_ID,
        bos_id: int = BOS_ID,
        eos_id: int = EOS_ID,
    ) -> None:
        super().__init__()
        check_ranges(Seq2Seq.__init__, locals(), owner="Seq2Seq")  # bidirectional: a bool
        check_special_ids(src_vocab_size, tgt_vocab_size, pad_id, bos_id, eos_id)
        if attention_kwargs is not None and not isinstance(attention_kwargs, Mapping):
            positional = (
                "; pass it by name: the argument after attention is attention_kwargs, not an option"
                if isinstance(attention_kwargs, (int, float, str))
                else ""
            )
            raise ValueError(
                f"attention_kwargs must be a dict of the mechanism's own options, e.g. "
                f'attention_kwargs={{"K": 16}}, got {attention_kwargs!r}{positional}'
            )
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        # what decoding never emits: padding and BOS are never targets, so an output holding one is
        # a wrong token that the text for BLEU would drop without a trace (fairseq masks padding
        # alike); BOS stays where it is also EOS
        self.never_emitted: tuple[int, ...] = tuple(sorted({pad_id, bos_id} - {eos_id}))
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.max_source_len = max_source_len
        options = dict(attention_kwargs or {})
        if (
            "max_source_len" in attention_options(attention)
            and options.get("max_source_len") is None
        ):
            options["max_source_len"] = max_source_len
        self.attention_name = attention
        self.attention_kwargs = options
        self.encoder = Encoder(
            src_vocab_size,
            embedding_dim,
            hidden_size,
            encoder_layers,
            dropout,
            bidirectional,
            decoder_layers=decoder_layers,
            decoder_hidden_size=hidden_size,
            pad_id=pad_id,
        )
        memory_dim = self.encoder.output_size  # D = 2 * hidden_size when bidirectional
        attn = build_attention(attention, query_dim=hidden_size, memory_dim=memory_dim, **options)
        self.decoder = Decoder(
            tgt_vocab_size, embedding_dim, hidden_size, decoder_layers, dropout, attn, pad_id
        )

    @classmethod
    def from_preset(
        cls, preset: str, src_vocab_size: int, tgt_vocab_size: int, **overrides: Any
    ) -> Seq2Seq:
        """Build from a :data:`PRESETS` entry; keyword arguments that are not None override it."""
        sizes = get_preset(preset)
        sizes.update({k: v for k, v in overrides.items() if v is not None})
        return cls(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **sizes)

    @property
    def attention(self) -> Attention:
        return self.decoder.attention

    # ---------------------------------------------------------------- shared pieces
    def _decode_step(self, masked: bool = False) -> Any:
        """The decoder's step for a decoding loop: with :meth:`Decoder.decode_tables` computed
        once for the whole decode where the decoder has them (a stand-in decoder, as in the
        tests, may have only ``step``). ``masked``: its logits are -inf at :attr:`never_emitted`
        (through the output layer's bias where the decoder has tables, else set each step)."""
        step = self.decoder.step
        if isinstance(self.decoder, Decoder):
            tables = self.decoder.decode_tables(self.never_emitted if masked else ())
            return lambda *args: step(*args, tables=tables)
        if not masked:
            return step

        def masked_step(*args):
            logits, *rest = step(*args)
            never = self._never_emitted(logits.device)
            # out of place: a stand-in's logits may be a view of its own tensors
            return (logits.index_fill(1, never, float("-inf")), *rest)

        return masked_step

    def _never_emitted(self, device: torch.device) -> torch.Tensor:
        """The ids of :attr:`never_emitted` (padding, BOS) as an index on ``device``."""
        return torch.tensor(self.never_emitted, dtype=torch.long, device=device)

    def _start(self, src: torch.Tensor, src_lengths: torch.Tensor) -> tuple[LSTMState, Any, Any]:
        memory, mask, state = self.encoder(src, src_lengths)  # (B, S, D), (B, S)
        cache = self.attention.precompute(memory, mask)
        return state, cache, self.attention.initial_state(cache)

    @staticmethod
    def _length_limits(
        src_lengths: torch.Tensor, max_len: int | None, device: torch.device
    ) -> tuple[torch.Tensor, int]:
        """Each sentence's step limit (B,) and the most steps any of them takes.

        ``max_len`` for every sentence when given, else the sentence's own ``2 * source length + 10``
        (never the batch's longest: a sentence's output must not depend on its batch).
        """
        if max_len is not None:
            return torch.full(
                src_lengths.shape, int(max_len), dtype=torch.long, device=device
            ), int(max_len)
        limits = src_lengths.to(device=device, dtype=torch.long) * 2 + 10  # (B,)
        return limits, int(src_lengths.max()) * 2 + 10

    def _finish(
        self, tokens: torch.Tensor, limits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad after the first EOS, trim to the longest output; lengths count EOS, and a sentence
        without EOS (closed at its limit, ``limits`` (B,)) has its limit's length."""
        steps = tokens.shape[1]
        is_eos = tokens == self.eos_id  # (B, T)
        no_eos = limits.clamp(max=steps)  # (B,)
        lengths = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, no_eos)  # (B,)
        keep = torch.arange(steps, device=tokens.device).unsqueeze(0) < lengths.unsqueeze(
            1
        )  # (B, T)
        tokens = tokens.masked_fill(~keep, self.pad_id)
        width = int(lengths.max()) if tokens.shape[0] else 0
        return tokens[:, :width], lengths

    # ---------------------------------------------------------------- training
    def forward(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        *,
        check: bool = True,
    ) -> torch.Tensor:
        """Teacher-forced logits.

        Args:
            src: (B, S) source ids; src_lengths: (B,) real lengths incl. EOS.
            tgt_in: (B, T) decoder inputs: BOS then the target shifted right.
            check: refuse malformed inputs first (:func:`check_inputs`); the module's own steps
                pass False: their batches follow the datamodule contract, and an id past the
                vocabulary is named when torch raises (no device read every step).
        Returns:
            logits (B, T, V).
        """
        if check:
            check_inputs(src, src_lengths, self.src_vocab_size, tgt_in, self.tgt_vocab_size)
        state, cache, attn_state = self._start(src, src_lengths)
        return self.decoder(tgt_in, state, cache, attn_state)

    def forward_with_contexts(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        *,
        check: bool = True,
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """:meth:`forward`, with what the distillation objective reads beside the logits: the
        attention's cache (memory attention's ``C``: (B, K, D)) and the context of every target
        step (B, T, C). The same operations as :meth:`forward`, so the logits are the same bits.

        Returns:
            logits (B, T, V), the attention cache, contexts (B, T, C).
        """
        if check:  # (as in forward)
            check_inputs(src, src_lengths, self.src_vocab_size, tgt_in, self.tgt_vocab_size)
        state, cache, attn_state = self._start(src, src_lengths)
        features = self.decoder.features(tgt_in, state, cache, attn_state)  # (B, T, H + C)
        logits = self.decoder.out(features)  # (B, T, V)
        return logits, cache, features[..., self.decoder.hidden_size :]  # (B, T, C)

    def shift_target(self, tgt: torch.Tensor) -> torch.Tensor:
        """(B, T) target -> (B, T) decoder input: BOS followed by tgt[:, :-1]."""
        bos = tgt.new_full((tgt.shape[0], 1), self.bos_id)  # (B, 1)
        return torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, T)

    # ---------------------------------------------------------------- decoding
    @torch.inference_mode()
    def greedy_decode(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        max_len: int | None = None,
        check_every: int = 4,
        min_len: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding of a batch (call ``eval()`` first).

        Args:
            src: (B, S); src_lengths: (B,).
            max_len: most target steps for every sentence (default: each sentence's own
                2 * source length + 10).
            check_every: steps between the (syncing) "all finished?" checks.
            min_len: EOS is masked out for the first ``min_len`` steps; ``min_len=max_len`` makes
                every sentence take exactly ``max_len`` steps (fixed work, for speed benchmarks).
        Returns:
            tokens (B, T') ending in EOS then padding, and lengths (B,) incl. EOS (the sentence's
            limit if no EOS).
        """
        check_inputs(src, src_lengths, self.src_vocab_size)
        limits, max_steps = self._length_limits(src_lengths, max_len, src.device)  # (B,), int
        state, cache, attn_state = self._start(src, src_lengths)
        batch = src.shape[0]
        y = src.new_full((batch,), self.bos_id)  # (B,)
        ctx = state[0][0].new_zeros(batch, self.decoder.context_dim)  # (B, C)
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)  # (B,)
        outputs = []
        step = self._decode_step(masked=True)  # padding and BOS at -inf
        for t in range(max_steps):
            logits, state, ctx, attn_state, _ = step(
                y, state, ctx, cache, attn_state, False
            )  # (B, V)
            if t < min_len:
                logits[:, self.eos_id] = float("-inf")
            y = logits.argmax(-1).masked_fill_(finished, self.pad_id)  # (B,)
            outputs.append(y)
            finished = finished | (y == self.eos_id)  # (B,)
            if (t + 1) % check_every == 0 and bool((finished | (limits <= t + 1)).all()):
                break
        tokens = torch.stack(outputs, dim=1)  # (B, T)
        # a sentence is closed at its own limit: what it decoded past it (while others ran on) goes
        past_limit = torch.arange(tokens.shape[1], device=src.device).unsqueeze(
            0
        ) >= limits.unsqueeze(1)  # (B, T)
        return self._finish(tokens.masked_fill_(past_limit, self.pad_id), limits)

    @torch.inference_mode()
    def beam_search(
        self,
        src: torch.Tensor,
        src_lengths: torch.Tensor,
        beam_size: int = 10,
        max_len: int | None = None,
        length_penalty: float = 1.0,
        return_scores: bool = False,
        check_every: int = 4,
        min_len: int = 0,
        share_cache: bool = True,
    ) -> Any:
        """Beam search over all sentences and beams at once (call ``eval()`` first).

        ``beam_size`` unfinished hypotheses per sentence, plus a pool of finished ones (see the
        module docstring). Finished hypotheses are ranked by ``sum log p / len ** length_penalty``
        (len counts EOS; 0 disables the normalisation); the early stop is exact for that rule
        (module docstring). The attention's source-only cache stays at
        one row per sentence, shared by its beams, when the mechanism allows it
        (``Attention.shares_cache``); otherwise it is copied to every beam once. LSTM and
        attention state are reordered with one generic ``index_select`` per step.

        Args:
            src: (B, S); src_lengths: (B,).
            beam_size: beams per sentence (<= target vocabulary size).
            max_len: most target steps for every sentence (default: each sentence's own
                2 * source length + 10).
            length_penalty: the exponent alpha.
            return_scores: also return lengths (B,) and normalised scores (B,).
            check_every: steps between the (syncing) "all sentences done?" checks.
            min_len: EOS is masked out (before the softmax) for the first ``min_len`` steps;
                ``min_len=max_len`` makes every hypothesis take exactly ``max_len`` steps.
            share_cache: False copies the cache to every beam even where it could be shared (the
                generic path, kept as the reference the shared one is tested against).
        Returns:
            tokens (B, T') of the best hypothesis per sentence (EOS then padding), or
            (tokens, lengths, scores) when ``return_scores``.
        """
        check_inputs(src, src_lengths, self.src_vocab_size)
        if not 1 <= beam_size <= self.tgt_vocab_size:
            raise ValueError(
                f"beam_size must be in [1, {self.tgt_vocab_size}] (the target vocabulary size); got {beam_size}"
            )
        batch, k, vocab = src.shape[0], beam_size, self.tgt_vocab_size
        device = src.device
        limits, max_steps = self._length_limits(src_lengths, max_len, device)  # (B,), int
        state, cache, attn_state = self._start(src, src_lengths)
        expand = torch.arange(batch, device=device).repeat_interleave(k)  # (B*k,)
        if not (share_cache and self.attention.shares_cache):
            cache = map_batch(
                lambda x: x.index_select(0, expand), cache
            )  # (B*k, ...) a copy per beam
        attn_state = map_batch(lambda x: x.index_select(0, expand), attn_state)
        state = map_batch(lambda x: x.index_select(0, expand), state)
        n = batch * k
        y = src.new_full((n,), self.bos_id)  # (B*k,)
        ctx = state[0][0].new_zeros(n, self.decoder.context_dim)  # (B*k, C)
        # scores at the model's precision, fp32 at least (a float64 model keeps float64 sums; fp32
        # and bf16 autocast keep fp32, as before)
        score_dtype = torch.promote_types(ctx.dtype, torch.float32)
        scores = torch.zeros(batch, k, device=device, dtype=score_dtype)  # (B, k) log-prob sums
        scores[:, 1:] = float("-inf")  # only the first beam is alive at the start
        scores = scores.view(n)  # (B*k,)
        row_offset = (torch.arange(batch, device=device) * k).unsqueeze(1)  # (B, 1)
        width = 2 * k  # candidates ranked per sentence: at most k of them end in EOS
        in_first_k = (torch.arange(width, device=device) < k).unsqueeze(0)  # (1, 2k)
        # the finished pool, kept as its best member per sentence: normalised score, the step whose
        # token was its EOS, and the live row (of the step before) it extended
        pool_score = torch.full((batch,), float("-inf"), device=device, dtype=score_dtype)  # (B,)
        pool_step = torch.full((batch,), -1, dtype=torch.long, device=device)  # (B,)
        pool_parent = torch.zeros(batch, dtype=torch.long, device=device)  # (B,)
        pool_count = torch.zeros(
            batch, dtype=torch.long, device=device
        )  # (B,) hypotheses finished so far
        done = torch.zeros(batch, dtype=torch.bool, device=device)  # (B,)
        if length_penalty > 0:
            # every completion of a live hypothesis has raw log-prob <= its prefix's (<= 0) and length
            # <= the sentence's limit, so its normalised score is <= prefix raw / limit ** alpha
            bound_divisor = limits.to(score_dtype) ** length_penalty  # (B,)
        history_tokens, history_parents, history_best = [], [], []
        step = self._decode_step()
        never = self._never_emitted(device)
        for t in range(max_steps):
            logits, state, ctx, attn_state, _ = step(
                y, state, ctx, cache, attn_state, False
            )  # (B*k, V)
            if t < min_len:
                logits[:, self.eos_id] = float("-inf")
            logp = torch.log_softmax(logits.to(score_dtype), dim=-1)  # (B*k, V)
            # after the softmax: a hypothesis's score stays the model's own log-probability
            logp.index_fill_(1, never, float("-inf"))
            cand = (scores.unsqueeze(1) + logp).view(batch, k * vocab)  # (B, k*V)
            top_scores, top = cand.topk(width, dim=1)  # (B, 2k) best first
            top_tokens = top % vocab  # (B, 2k)
            top_parents = row_offset + top // vocab  # (B, 2k) flat index of the live parent row
            is_eos = top_tokens == self.eos_id  # (B, 2k)
            # EOS among the first k candidates finishes a hypothesis (of a sentence still searching)
            finishing = (
                is_eos & in_first_k & ~done.unsqueeze(1) & torch.isfinite(top_scores)
            )  # (B, 2k)
            norm = (
                top_scores / float(t + 1) ** length_penalty if length_penalty else top_scores
            )  # (B, 2k)
            best_new, best_at = torch.where(finishing, norm, float("-inf")).max(dim=1)  # (B,), (B,)
            better = best_new > pool_score  # (B,)
            pool_score = torch.where(better, best_new, pool_score)
            pool_step = torch.where(better, torch.full_like(pool_step, t), pool_step)
            pool_parent = torch.where(
                better, top_parents.gather(1, best_at.unsqueeze(1)).squeeze(1), pool_parent
            )
            # the k best candidates that do not end in EOS stay alive (stable: best first)
            keep = (
                (~is_eos).to(torch.uint8).argsort(dim=1, descending=True, stable=True)[:, :k]
            )  # (B, k)
            live_scores = top_scores.gather(1, keep)  # (B, k)
            y = top_tokens.gather(1, keep).view(n)  # (B*k,)
            parent = top_parents.gather(1, keep).view(n)  # (B*k,)
            scores = live_scores.view(n)  # (B*k,)
            # done once k hypotheses finished and no live one can beat the best of them, or at the limit
            if length_penalty > 0:
                live_bound = live_scores[:, 0] / bound_divisor  # (B,)
            elif (
                length_penalty < 0
            ):  # the divisor shrinks as the length grows: the current length bounds
                live_bound = live_scores[:, 0] / float(t + 1) ** length_penalty  # (B,)
            else:
                live_bound = live_scores[:, 0]  # (B,)
            pool_count = pool_count + finishing.sum(dim=1)  # (B,)
            done = (
                done | ((pool_count >= k) & (pool_score >= live_bound)) | (limits <= t + 1)
            )  # (B,)
            history_tokens.append(y)
            history_parents.append(parent)
            history_best.append(live_scores[:, 0])  # (B,) raw score of the best live hypothesis
            state = map_batch(lambda x: x.index_select(0, parent), state)
            attn_state = map_batch(lambda x: x.index_select(0, parent), attn_state)
            ctx = ctx.index_select(0, parent)  # (B*k, C)
            if (t + 1) % check_every == 0 and bool(done.all()):
                break
        steps = len(history_tokens)
        # where nothing finished, the best live hypothesis at the sentence's limit (slot 0: the live
        # beams are best first); only a sentence that reached its limit can have nothing finished
        unfinished = pool_step < 0  # (B,)
        best_live = row_offset.squeeze(1)  # (B,)
        closed_at = limits.clamp(max=steps)  # (B,)
        live_norm = (
            torch.stack(history_best, dim=1).gather(1, (closed_at - 1).unsqueeze(1)).squeeze(1)
        )  # (B,)
        if length_penalty:
            live_norm = live_norm / closed_at.to(score_dtype) ** length_penalty
        best_score = torch.where(unfinished, live_norm, pool_score)  # (B,)
        end = torch.where(unfinished, closed_at, pool_step)  # (B,) tokens before it
        slot = torch.where(unfinished, best_live, pool_parent)  # (B,) live row at step end - 1
        out = torch.full((batch, steps), self.pad_id, dtype=torch.long, device=device)  # (B, T)
        for t in range(steps - 1, -1, -1):
            active = t < end  # (B,)
            out[:, t] = torch.where(active, history_tokens[t].index_select(0, slot), out[:, t])
            slot = torch.where(active, history_parents[t].index_select(0, slot), slot)
        rows = torch.arange(batch, device=device)[~unfinished]  # the finished sentences
        out[rows, end[~unfinished]] = self.eos_id
        tokens, out_lengths = self._finish(out, limits)  # (B, T')
        if return_scores:
            return tokens, out_lengths, best_score
        return tokens

    @torch.inference_mode()
    def attention_trace(
        self, src: torch.Tensor, src_lengths: torch.Tensor, max_len: int | None = None
    ) -> dict[str, torch.Tensor]:
        """Greedy-decode one batch, collecting the alignments (for plots, not speed).

        Returns:
            a dict with ``tokens`` (B, T), ``lengths`` (B,), ``weights`` (B, T, S), and each of the
            mechanism's :meth:`~Attention.extra_weights` stacked per step as (B, T, ...) (memory
            attention: ``alpha`` (B, T, S, K), the same at every step, and ``beta`` (B, T, K)).
        """
        check_inputs(src, src_lengths, self.src_vocab_size)
        limits, max_steps = self._length_limits(src_lengths, max_len, src.device)  # (B,), int
        state, cache, attn_state = self._start(src, src_lengths)
        batch = src.shape[0]
        y = src.new_full((batch,), self.bos_id)  # (B,)
        ctx = state[0][0].new_zeros(batch, self.decoder.context_dim)  # (B, C)
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
        never = self._never_emitted(src.device)
        outputs, weights = [], []
        extras: dict[str, list[torch.Tensor]] = {}
        for t in range(max_steps):
            # the query the attention will see is the top state after this step's LSTM update,
            # so run the step first and ask for the extras with the same query and prior state
            prev_attn_state = attn_state
            x = torch.cat([self.decoder.embedding(y), ctx], dim=-1)  # (B, E + C)
            hs, cs = self.decoder._cells(x, state[0], state[1])
            query = hs[-1]  # (B, H)
            ctx, attn_state, w = self.attention.step(
                query, cache, prev_attn_state, True
            )  # (B, C), (B, S)
            for key, value in self.attention.extra_weights(query, cache, prev_attn_state).items():
                extras.setdefault(key, []).append(value)
            logits = self.decoder.out(torch.cat([query, ctx], dim=-1))  # (B, V)
            logits.index_fill_(1, never, float("-inf"))  # as greedy_decode
            state = (hs, cs)
            y = logits.argmax(-1).masked_fill_(finished, self.pad_id)  # (B,)
            outputs.append(y)
            weights.append(w if w is not None else query.new_zeros(batch, src.shape[1]))
            finished = finished | (y == self.eos_id) | (limits <= t + 1)
            if bool(finished.all()):
                break
        tokens, lengths = self._finish(torch.stack(outputs, dim=1), limits)
        steps = tokens.shape[1]
        result: dict[str, torch.Tensor] = {
            "tokens": tokens,
            "lengths": lengths,
            "weights": torch.stack(weights[:steps], dim=1),  # (B, T, S)
        }
        for key, values in extras.items():
            result[key] = torch.stack(values[:steps], dim=1)  # (B, T, ...)
        return result
