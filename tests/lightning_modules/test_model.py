"""Seq2Seq: shapes, greedy vs beam search, beam reordering, configuration errors (fast)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.copy_task import collate_copy
from lightning_modules import ATTENTION_REGISTRY, PRESETS, Seq2Seq
from lightning_modules.attention import attention_options
from lightning_modules.seq2seq import EOS_ID, Decoder, attention_dims

MECHANISMS = sorted(ATTENTION_REGISTRY)
VOCAB = 24  # 20 symbols + 4 specials
MAX_SOURCE_LEN = 16


def size_overrides(attention: str) -> dict:
    """Mechanisms that need H == D (luong_dot) get a unidirectional encoder (D = H)."""
    return {"bidirectional": False} if ATTENTION_REGISTRY[attention].equal_sizes else {}


def make_model(attention: str, seed: int = 0, **overrides) -> Seq2Seq:
    torch.manual_seed(seed)
    overrides = {**size_overrides(attention), **overrides}
    return Seq2Seq.from_preset(
        "tiny", VOCAB, VOCAB, attention=attention, max_source_len=MAX_SOURCE_LEN, **overrides
    ).eval()


def make_batch(lengths: list[int], seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return collate_copy([rng.integers(4, VOCAB, size=n) for n in lengths])


def rescore(
    model: Seq2Seq, batch, tokens: torch.Tensor, lengths: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Teacher-forced log-probability of given outputs (up to and incl. EOS) / len ** alpha: (B,)."""
    with torch.no_grad():
        logits = model(batch["src"], batch["src_lengths"], model.shift_target(tokens))  # (B, T, V)
    logp = torch.log_softmax(logits, -1).gather(2, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
    real = torch.arange(tokens.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
    return (logp * real).sum(1) / lengths.float() ** alpha


@pytest.mark.parametrize("attention", MECHANISMS)
def test_forward_and_decode_shapes(attention):
    model = make_model(attention)
    batch = make_batch([0, 3, 7, 12])
    src, src_lengths = batch["src"], batch["src_lengths"]
    logits = model(src, src_lengths, model.shift_target(batch["tgt"]))
    assert logits.shape == (4, 13, VOCAB)
    assert torch.isfinite(logits).all()
    tokens, lengths = model.greedy_decode(src, src_lengths, max_len=9)
    assert tokens.shape[0] == 4 and tokens.shape[1] <= 9 and tokens.shape[1] == int(lengths.max())
    for row, length in zip(tokens, lengths):
        assert (row[length:] == model.pad_id).all()  # padding after the end
        assert (row[: length - 1] != model.eos_id).all()  # EOS only at the end, if at all


@pytest.mark.parametrize("attention", MECHANISMS)
def test_training_gradients_reach_encoder_and_attention(attention):
    model = make_model(attention).train()
    batch = make_batch([2, 5, 9])
    logits = model(batch["src"], batch["src_lengths"], model.shift_target(batch["tgt"]))
    torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch["tgt"].flatten(), ignore_index=0
    ).backward()
    assert model.encoder.embedding.weight.grad is not None
    assert model.encoder.embedding.weight.grad.abs().sum() > 0
    for (
        name,
        param,
    ) in model.attention.named_parameters():  # the mechanism's own parameters learn too
        assert param.grad is not None, f"{attention}.{name} got no gradient"
        assert param.grad.abs().sum() > 0, f"{attention}.{name} got an all-zero gradient"


@pytest.mark.parametrize("attention", MECHANISMS)
def test_greedy_equals_beam_of_one(attention):
    """Without length normalisation beam 1 is greedy. With alpha > 0 the exact early stop keeps
    the runner-up alive past greedy's EOS (a longer completion may normalise better), so beam 1
    returns greedy's hypothesis or a better-scoring one."""
    model = make_model(attention)
    batch = make_batch([0, 1, 4, 8, 12], seed=1)
    greedy, greedy_lengths = model.greedy_decode(batch["src"], batch["src_lengths"], max_len=15)
    beam, beam_lengths, _ = model.beam_search(
        batch["src"],
        batch["src_lengths"],
        beam_size=1,
        max_len=15,
        length_penalty=0.0,
        return_scores=True,
    )
    assert torch.equal(greedy, beam)
    assert torch.equal(greedy_lengths, beam_lengths)
    _, _, beam_scores = model.beam_search(
        batch["src"],
        batch["src_lengths"],
        beam_size=1,
        max_len=15,
        length_penalty=1.0,
        return_scores=True,
    )
    greedy_scores = rescore(model, batch, greedy, greedy_lengths, 1.0)  # (B,)
    finished = (greedy == EOS_ID).any(dim=1)  # (B,) greedy's hypothesis is in beam 1's pool
    assert (beam_scores[finished] >= greedy_scores[finished] - 1e-5).all()


@pytest.mark.parametrize("attention", MECHANISMS)
def test_beam_scores_are_real_and_finished_outputs_win(attention):
    """Beam 10's scores equal an independent teacher-forced rescoring of its outputs, and a
    sentence greedy finishes also gets a finished beam output (finished hypotheses are preferred
    to unfinished ones). Beam search is not guaranteed to beat greedy on every sentence, so the
    test does not claim it; tests below check the finished pool on constructed decoders.
    """
    model = make_model(attention, seed=3)
    batch = make_batch([0, 3, 7, 10, 5, 1], seed=3)
    alpha = 1.0
    for _ in range(20):  # raise EOS's logit until greedy finishes some sentences
        with torch.no_grad():
            model.decoder.out.bias[EOS_ID] += 0.02
        greedy, greedy_lengths = model.greedy_decode(batch["src"], batch["src_lengths"], max_len=15)
        if (greedy == EOS_ID).any():
            break
    beam, beam_lengths, beam_scores = model.beam_search(
        batch["src"],
        batch["src_lengths"],
        beam_size=10,
        max_len=15,
        length_penalty=alpha,
        return_scores=True,
    )
    rescored = rescore(model, batch, beam, beam_lengths, alpha)
    torch.testing.assert_close(rescored, beam_scores, atol=1e-4, rtol=1e-4)
    greedy_finished = (greedy == EOS_ID).any(dim=1)  # (B,)
    assert greedy_finished.any()
    assert (beam == EOS_ID).any(dim=1)[greedy_finished].all()


@pytest.mark.parametrize("attention", MECHANISMS)
def test_beam_batched_equals_one_sentence_at_a_time(attention):
    """Reordering of LSTM and attention state across beams is right: batching changes nothing."""
    model = make_model(attention, seed=2)
    lengths = [9, 2, 5]
    batch = make_batch(lengths, seed=2)
    together, together_lengths, _ = model.beam_search(
        batch["src"], batch["src_lengths"], beam_size=4, max_len=14, return_scores=True
    )
    for i, n in enumerate(lengths):
        src = batch["src"][i : i + 1, : n + 1]
        alone, alone_lengths, _ = model.beam_search(
            src, batch["src_lengths"][i : i + 1], beam_size=4, max_len=14, return_scores=True
        )
        length = int(alone_lengths[0])
        assert length == int(together_lengths[i])
        assert torch.equal(alone[0, :length], together[i, :length])


@pytest.mark.parametrize("attention", MECHANISMS)
def test_attention_trace(attention):
    model = make_model(attention)
    batch = make_batch([3, 6])
    trace = model.attention_trace(batch["src"], batch["src_lengths"], max_len=8)
    greedy, _ = model.greedy_decode(batch["src"], batch["src_lengths"], max_len=8)
    assert torch.equal(trace["tokens"], greedy)
    steps, source = trace["tokens"].shape[1], batch["src"].shape[1]
    assert trace["weights"].shape == (2, steps, source)
    assert (trace["weights"][0, :, 4:] == 0).all()  # nothing on padding
    if attention == "memory":
        K = model.attention_kwargs.get("K", attention_options("memory")["K"])
        assert trace["alpha"].shape == (2, steps, source, K)
        assert trace["beta"].shape == (2, steps, K)


def test_decoding_never_emits_padding_or_bos_and_beam_scores_stay_the_models():
    """A model whose output layer prefers padding, then BOS, to every other token: greedy, beam
    search and the attention trace emit neither (the text for BLEU would drop them, crediting a
    wrong output), and take the best of the rest. Beam scores stay the model's own
    log-probabilities (padding and BOS keep their share of the softmax). Where BOS is also EOS,
    it stays: it ends sentences."""
    model = make_model("bahdanau", seed=4)
    batch = make_batch([2, 5, 9], seed=4)
    src, lengths = batch["src"], batch["src_lengths"]
    with torch.no_grad():
        model.decoder.out.bias[model.pad_id] += 50.0
        model.decoder.out.bias[model.bos_id] += 40.0
        greedy, greedy_lengths = model.greedy_decode(src, lengths, max_len=10)
        beam, beam_lengths, scores = model.beam_search(
            src, lengths, beam_size=3, max_len=10, length_penalty=1.0, return_scores=True
        )
        trace = model.attention_trace(src, lengths, max_len=10)
        logits = model(src, lengths, model.shift_target(greedy))  # (B, T, V)
    for tokens, ends in ((greedy, greedy_lengths), (beam, beam_lengths)):
        real = torch.arange(tokens.shape[1]).unsqueeze(0) < ends.unsqueeze(1)  # (B, T)
        assert not (((tokens == model.pad_id) | (tokens == model.bos_id)) & real).any(), tokens
    assert torch.equal(trace["tokens"], greedy)
    # greedy took the best token after padding and BOS (the unmasked argmax is padding)
    real = torch.arange(greedy.shape[1]).unsqueeze(0) < greedy_lengths.unsqueeze(1)
    assert (logits.argmax(-1)[real] == model.pad_id).all()
    assert torch.equal(logits[..., 2:].argmax(-1)[real] + 2, greedy[real])
    torch.testing.assert_close(
        rescore(model, batch, beam, beam_lengths, 1.0), scores, atol=1e-4, rtol=1e-4
    )
    shared = Seq2Seq.from_preset("tiny", VOCAB, VOCAB, attention="bahdanau", bos_id=2, eos_id=2)
    assert shared.never_emitted == (0,) and model.never_emitted == (0, 1)
    # a decoder without the output layer's tables (TableDecoder, below): masked each step
    probs = torch.full((1, VOCAB, VOCAB), 0.01)
    probs[0, :, model.pad_id], probs[0, :, model.bos_id], probs[0, :, 7] = 0.5, 0.3, 0.1
    table = torch.log(probs / probs.sum(-1, keepdim=True))
    model.decoder = TableDecoder(table, model.decoder)
    tokens, _ = model.greedy_decode(src, lengths, max_len=4)
    assert (tokens == 7).all()


@pytest.mark.parametrize(
    "attention", [n for n in MECHANISMS if "max_source_len" in attention_options(n)]
)
def test_max_source_len_comes_from_the_model_unless_given(attention):
    model = Seq2Seq.from_preset("tiny", VOCAB, VOCAB, attention=attention, max_source_len=37)
    assert model.attention_kwargs["max_source_len"] == 37
    model = Seq2Seq.from_preset(
        "tiny",
        VOCAB,
        VOCAB,
        attention=attention,
        attention_kwargs={"max_source_len": 50},
        max_source_len=37,
    )
    assert model.attention_kwargs["max_source_len"] == 50


def test_paper_copy_is_the_papers_model():
    """Britz et al. §4.1: 2-layer 256-unit bidirectional encoder (256 per direction, memory 512),
    2-layer 256-unit decoder, 256-d embeddings, dropout 0.2; parameter count for vocab 24, K=32."""
    model = Seq2Seq.from_preset(
        "paper_copy", VOCAB, VOCAB, attention="memory", attention_kwargs={"K": 32}
    )
    assert model.encoder.rnn.hidden_size == 256 and model.encoder.rnn.bidirectional
    assert model.encoder.output_size == 512 and model.attention.memory_dim == 512
    assert model.attention.query_dim == 256 and model.decoder.context_dim == 512
    assert model.encoder.embedding.embedding_dim == 256 == model.decoder.embedding.embedding_dim
    assert model.decoder.cells[0].input_size == 256 + 512  # [embedding; fed-back context]
    assert model.encoder.rnn.num_layers == 2 and len(model.decoder.cells) == 2
    assert (
        model.attention.W_alpha.bias is None and model.attention.W_beta.bias is None
    )  # eqs. 5, 7, 9
    # encoder LSTM 2,629,632 + bridge 2 x (1024*512 + 512) + decoder cells 1,050,624 + 526,336
    # + output (768*24 + 24) + embeddings 2 x 24*256 + W_alpha 512*32 + W_beta 256*32
    assert sum(p.numel() for p in model.encoder.rnn.parameters()) == 2_629_632
    assert sum(p.numel() for p in model.parameters()) == 5_311_512
    assert sum(p.numel() for p in model.attention.parameters()) == 512 * 32 + 256 * 32


def test_attention_dims_match_the_built_model():
    for preset, overrides in [
        ("paper_copy", {}),
        ("tiny", {"bidirectional": False}),
        ("paper_wmt", {"hidden_size": 64}),
    ]:
        model = Seq2Seq.from_preset(preset, VOCAB, VOCAB, attention="none", **overrides)
        assert attention_dims(preset, **overrides) == (
            model.attention.query_dim,
            model.attention.memory_dim,
        )
    assert attention_dims("paper_copy") == (256, 512)


def test_dropout_is_on_each_cell_input_and_nowhere_else():
    """Dropout 0.2 on the decoder's first-cell input [emb; fed-back context] and between layers;
    none before the output layer: with every cell input dropped to zero, the logits depend only on
    the bridge state, never on the embedding or the context."""
    model = Seq2Seq.from_preset(
        "tiny", VOCAB, VOCAB, attention="bahdanau", dropout=0.2, decoder_layers=2
    )
    model.train()
    model.decoder.dropout.p = 1.0  # drop every input element: each cell sees zeros
    batch = make_batch([4, 6])
    state, cache, attn_state = model._start(batch["src"], batch["src_lengths"])
    ctx_prev = torch.randn(2, model.decoder.context_dim)  # (B, C) a fed-back context
    y = torch.tensor([5, 9])
    logits_a, *_ = model.decoder.step(y, state, ctx_prev, cache, attn_state)
    logits_b, *_ = model.decoder.step(y + 1, state, ctx_prev * 3, cache, attn_state)
    torch.testing.assert_close(logits_a, logits_b)  # input (embedding and context) fully dropped
    bias_only = model.decoder.out.bias.expand_as(logits_a)  # what a dropped output layer would give
    assert not torch.allclose(
        logits_a, bias_only
    )  # the output layer's input [h; ctx] is not dropped


def test_presets_and_overrides():
    assert {"tiny", "paper_copy", "paper_wmt"} <= set(PRESETS)
    model = Seq2Seq.from_preset(
        "tiny", VOCAB, VOCAB, attention="none", hidden_size=48, decoder_layers=2
    )
    assert model.decoder.hidden_size == 48 and len(model.decoder.cells) == 2
    with pytest.raises(ValueError, match="valid presets: .*paper_copy"):
        Seq2Seq.from_preset("huge", VOCAB, VOCAB, attention="none")
    with pytest.raises(ValueError, match="valid names: .*none"):
        Seq2Seq(VOCAB, VOCAB, attention="no_such_attention")


def test_beam_size_larger_than_vocab_fails():
    model = make_model("none")
    batch = make_batch([2])
    with pytest.raises(ValueError, match="beam_size"):
        model.beam_search(batch["src"], batch["src_lengths"], beam_size=VOCAB + 1, max_len=5)


class TableDecoder(torch.nn.Module):
    """A constructed decoder: the next-token distribution is ``table[step, previous token]``.

    The step counter rides in the (generic, beam-reordered) LSTM state, so beam search runs it
    exactly as it runs the real decoder.
    """

    def __init__(self, log_probs: torch.Tensor, real: Decoder) -> None:
        super().__init__()
        self.register_buffer("table", log_probs)  # (T, V, V): step, previous token -> next token
        self.attention = real.attention
        self.context_dim = real.context_dim

    def step(self, y_prev, state, ctx_prev, cache, attn_state, need_weights=False):
        hs, cs = state
        t = hs[0][:, 0].long().clamp(max=self.table.shape[0] - 1)  # (B,) the step counter
        logits = self.table[t, y_prev]  # (B, V)
        return logits, ([h + 1 for h in hs], cs), ctx_prev, attn_state, None


def test_beam_search_returns_an_early_eos_that_is_the_best_hypothesis():
    """[EOS] at step 0 is the best finished hypothesis (normalised log 0.4 = -0.916); two partial
    hypotheses (a a, a b) score better at step 1 (-0.65, -0.70) and would have pushed it out of a
    beam of 2, but every later completion is worse. The finished pool keeps it."""
    V, a, b, max_len = 8, 4, 5, 6
    probs = torch.full((3, V, V), 1e-9)  # (step, previous, next)
    probs[0, :, EOS_ID], probs[0, :, a], probs[0, :, b] = 0.4, 0.55, 0.05
    probs[1, :, EOS_ID], probs[1, :, a], probs[1, :, b] = 0.05, 0.5, 0.45
    probs[2, :, EOS_ID], probs[2, :, a], probs[2, :, b] = 0.01, 0.5, 0.49
    log_probs = torch.log_softmax(probs.log(), dim=-1)  # (3, V, V)
    model = Seq2Seq(V, V, attention="none", embedding_dim=4, hidden_size=4).eval()
    with torch.no_grad():  # the bridge gives h = tanh(0) = 0: the step counter starts at 0
        for bridge in (model.encoder.bridge_h, model.encoder.bridge_c):
            bridge.weight.zero_()
            bridge.bias.zero_()
    model.decoder = TableDecoder(log_probs, model.decoder)
    # brute force: the best finished hypothesis up to max_len tokens, by log p / len
    best, best_score, frontier = None, float("-inf"), [((), 0.0)]
    for t in range(max_len):
        step_lp = log_probs[min(t, 2), 0]  # (V,) the same for every previous token
        for prefix, score in frontier:
            finished = (score + float(step_lp[EOS_ID])) / (t + 1)
            if finished > best_score:
                best, best_score = prefix + (EOS_ID,), finished
        frontier = [(p + (tok,), s + float(step_lp[tok])) for p, s in frontier for tok in (a, b)]
    assert best == (EOS_ID,)
    src, src_lengths = torch.tensor([[4, 5, EOS_ID]]), torch.tensor([3])
    tokens, lengths, scores = model.beam_search(
        src, src_lengths, beam_size=2, max_len=max_len, return_scores=True
    )
    assert tokens.tolist() == [[EOS_ID]] and lengths.tolist() == [1]
    assert abs(float(scores[0]) - float(log_probs[0, 0, EOS_ID])) < 1e-5
    batched = model.beam_search(
        src.repeat(3, 1), src_lengths.repeat(3), beam_size=2, max_len=max_len
    )
    assert batched.tolist() == [[EOS_ID]] * 3


@pytest.mark.parametrize("attention", MECHANISMS)
def test_beam_search_with_a_shared_cache_equals_the_expanded_one(attention):
    """Sharing each sentence's source-only cache across its beams changes no output: the same
    tokens and scores as copying the cache to every beam (the generic reference path)."""
    model = make_model(attention, seed=5)
    batch = make_batch([9, 2, 5, 12, 1], seed=5)
    args = dict(beam_size=4, max_len=16, return_scores=True)
    shared = model.beam_search(batch["src"], batch["src_lengths"], **args)
    expanded = model.beam_search(batch["src"], batch["src_lengths"], share_cache=False, **args)
    assert model.attention.shares_cache  # every registered mechanism shares its cache
    assert torch.equal(shared[0], expanded[0]) and torch.equal(shared[1], expanded[1])
    torch.testing.assert_close(shared[2], expanded[2], rtol=0, atol=1e-5)


_SRC = torch.tensor([[5, 6, 2, 0, 0], [7, 8, 9, 10, 2]])  # (2, 5)
_LENGTHS = torch.tensor([3, 5])
_MISUSE = {
    "1-D src": ((_SRC[0], _LENGTHS[:1]), r"src must be a \(B, S\) LongTensor.*src\.unsqueeze\(0\)"),
    "float src": ((_SRC.float(), _LENGTHS), r"src must be a \(B, S\) LongTensor.*float32"),
    "lengths a list": ((_SRC, [3, 5]), r"src_lengths must be a \(B,\) LongTensor.*got list"),
    "lengths 2-D": ((_SRC, _LENGTHS.unsqueeze(1)), r"src_lengths must .* got shape \(2, 1\)"),
    "lengths not B": ((_SRC, torch.tensor([3, 5, 1])), r"src_lengths must .* got shape \(3,\)"),
    "length past S": ((_SRC, torch.tensor([3, 6])), r"1 <= length <= src\.shape\[1\].*of 6"),
    "length 0": ((_SRC, torch.tensor([0, 5])), r"1 <= length <= src\.shape\[1\].*of 0"),
    "id past vocab": ((_SRC + VOCAB, _LENGTHS), r"src ids go up to \d+ .*src_vocab_size=24"),
    "negative id": ((_SRC - 3, _LENGTHS), r"src ids in src go down to -3"),
}


@pytest.mark.parametrize("entry", ["forward", "greedy_decode", "beam_search", "attention_trace"])
@pytest.mark.parametrize("case", list(_MISUSE))
def test_misused_inputs_are_refused_naming_the_argument_and_the_fix(entry, case):
    """Each gave torch's internal error (a failed unpack, `'list' object has no attribute 'to'`,
    a narrow() range error, a matmul shape error, an embedding IndexError)."""
    model = make_model("memory")
    (src, lengths), message = _MISUSE[case]
    if entry == "forward":
        tgt_in = torch.ones((2, 4), dtype=torch.long) if isinstance(src, torch.Tensor) else None
        call = lambda: model(src, lengths, tgt_in if src.dim() == 2 else tgt_in[:1])  # noqa: E731
    else:
        call = lambda: getattr(model, entry)(src, lengths)  # noqa: E731
    with pytest.raises(ValueError, match=message):
        call()


def test_forward_refuses_decoder_inputs_of_another_batch_or_past_the_vocabulary():
    model = make_model("bahdanau")
    tgt_in = torch.ones((2, 4), dtype=torch.long)
    with pytest.raises(ValueError, match=r"tgt_in must be a \(B, T\) LongTensor .*B=2 rows"):
        model(_SRC, _LENGTHS, tgt_in[:1])
    with pytest.raises(ValueError, match=r"tgt ids go up to 30 .*tgt_vocab_size=24.*in tgt_in"):
        model(_SRC, _LENGTHS, tgt_in * 30)
    assert model(_SRC, _LENGTHS, tgt_in).shape == (2, 4, VOCAB)  # well-formed inputs still pass
