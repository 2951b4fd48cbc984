"""Tests of the attention mechanisms. The generic tests are parametrised over the registry, so a
newly registered mechanism is tested by being registered; mechanism-specific ones follow."""

from __future__ import annotations

import math
import typing

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from datamodules.ranges import declared_ranges
from lightning_modules.attention import ATTENTION_REGISTRY, Shared, build_attention, map_batch
from lightning_modules.attention.functional import (
    monotonic_alignment,
    position_encoding,
    sentence_position_encoding,
)

torch.set_num_threads(1)

B, S, H, D = 4, 9, 8, 8  # H == D so luong_dot can be built with the same dims as the rest
LENGTHS = [9, 5, 0, 2]  # row 2 is fully masked
NAMES = sorted(ATTENTION_REGISTRY)

#: small, test-friendly options (anything not listed gets its defaults)
OPTIONS = {
    "memory": {"K": 4},
    "local_m": {"window": 2},
    "local_p": {"window": 2},
    "luong_location": {"max_source_len": 16},
    "monotonic": {"score_bias_init": 0.0},  # so the hard mode both stops and moves on
}

#: mechanisms whose context is a linear map of sum_j w_j s_j rather than that sum itself
CONTEXT_MAPS = {"key_value": lambda attn, x: attn.value_proj(x)}


def build(name: str, training: bool = False, **overrides):
    torch.manual_seed(0)
    attn = build_attention(
        name, query_dim=H, memory_dim=D, **{**OPTIONS.get(name, {}), **overrides}
    )
    return attn.train(training)


def make_inputs(batch=B, src_len=S, lengths=LENGTHS, seed=1):
    g = torch.Generator().manual_seed(seed)
    memory = torch.randn(batch, src_len, D, generator=g)
    mask = torch.arange(src_len)[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
    queries = torch.randn(6, batch, H, generator=g)  # one query per decode step
    return memory, mask, queries


def expected_context(name, attn, weights, memory):
    weighted = torch.einsum("bs,bsd->bd", weights, memory)
    return CONTEXT_MAPS.get(name, lambda a, x: x)(attn, weighted)


def decode(attn, memory, mask, queries, need_weights=True):
    cache = attn.precompute(memory, mask)
    state = attn.initial_state(cache)
    outs = []
    for query in queries:
        ctx, state, weights = attn.step(query, cache, state, need_weights=need_weights)
        outs.append((ctx, weights))
    return outs


# ---- generic, over the registry -------------------------------------------------------------
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_shapes_masking_and_context(name, training):
    attn = build(name, training)
    memory, mask, queries = make_inputs()
    cache = attn.precompute(memory, mask)
    state = attn.initial_state(cache)
    for query in queries[:5]:  # a 5-step decode with the state carried
        ctx, state, weights = attn.step(query, cache, state, need_weights=True)
        assert ctx.shape == (B, attn.context_dim)
        assert weights.shape == (B, S)
        assert torch.isfinite(ctx).all() and torch.isfinite(weights).all()
        assert torch.all(weights[~mask] == 0), "padded positions must get exactly 0"
        assert torch.all(weights[2] == 0) and torch.all(ctx[2] == 0), "fully masked row"
        torch.testing.assert_close(
            ctx, expected_context(name, attn, weights, memory), atol=1e-5, rtol=0
        )


@pytest.mark.parametrize("name", NAMES)
def test_need_weights_false_returns_none(name):
    attn = build(name)
    memory, mask, queries = make_inputs()
    cache = attn.precompute(memory, mask)
    ctx, _, weights = attn.step(queries[0], cache, attn.initial_state(cache), need_weights=False)
    assert weights is None
    ctx_w, _, _ = attn.step(queries[0], cache, attn.initial_state(cache), need_weights=True)
    torch.testing.assert_close(ctx, ctx_w)


@pytest.mark.parametrize("name", NAMES)
def test_eval_is_deterministic(name):
    attn = build(name, training=False)
    memory, mask, queries = make_inputs()
    first, second = decode(attn, memory, mask, queries), decode(attn, memory, mask, queries)
    for (c1, w1), (c2, w2) in zip(first, second):
        assert torch.equal(c1, c2) and torch.equal(w1, w2)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_raises_listing_valid_ones(name):
    with pytest.raises(ValueError, match="accepts"):
        build_attention(name, query_dim=H, memory_dim=D, no_such_option=1)


#: per range symbol, a value just outside it
OUTSIDE = {">=": lambda x: x - 1, ">": lambda x: x, "<=": lambda x: x + 1, "<": lambda x: x}


@pytest.mark.parametrize("name", NAMES)
def test_every_declared_range_is_checked_by_the_constructor(name):
    """docs/CONTRACTS.md: each constructor checks its declared ranges. bahdanau's attention_dim=0
    and key_value's key_dim=0 were replaced by the default without a word, a negative one ended
    in torch's "negative dimension", and luong_location took max_source_len=-2."""
    from datamodules.ranges import declared_ranges

    cls = ATTENTION_REGISTRY[name]
    for option, limits in declared_ranges(cls.__init__).items():
        for symbol, limit in limits:
            value = OUTSIDE[symbol](limit)
            with pytest.raises(ValueError, match=rf"{option} must be {symbol} {limit}, got"):
                build(name, **{option: value})


def test_unknown_name_raises_listing_valid_ones():
    with pytest.raises(ValueError, match="valid names: .*bahdanau.*memory.*monotonic"):
        build_attention("no_such_attention", query_dim=H, memory_dim=D)


@pytest.mark.parametrize("name", NAMES)
def test_cache_and_state_survive_batch_reordering(name):
    """Beam search: expand the cache once (repeat_interleave), reorder the state every step."""
    attn = build(name)
    memory, mask, queries = make_inputs()
    cache = attn.precompute(memory, mask)
    state = attn.initial_state(cache)
    # reference: two plain steps
    _, state1, _ = attn.step(queries[0], cache, state, need_weights=True)
    ctx2, _, w2 = attn.step(queries[1], cache, state1, need_weights=True)
    # beam-style: expand x2, then at step 2 reorder the state by a permutation of the beams
    expand = torch.arange(B).repeat_interleave(2)  # (2B,)
    big_cache = map_batch(lambda t: t.index_select(0, expand), cache)
    big_state = attn.initial_state(big_cache)
    _, big_state1, _ = attn.step(queries[0][expand], big_cache, big_state, need_weights=True)
    order = torch.arange(2 * B).view(B, 2).flip(1).reshape(-1)  # swap beams within each sentence
    big_state1 = map_batch(lambda t: t.index_select(0, order), big_state1)
    big_ctx2, _, big_w2 = attn.step(
        queries[1][expand][order], big_cache, big_state1, need_weights=True
    )
    torch.testing.assert_close(big_ctx2, ctx2[expand][order], atol=1e-6, rtol=0)
    torch.testing.assert_close(big_w2, w2[expand][order], atol=1e-6, rtol=0)
    # a genuine permutation of the sentences: outputs permute with them
    perm = torch.tensor([2, 0, 3, 1])
    p_cache = map_batch(lambda t: t.index_select(0, perm), cache)
    p_state1 = map_batch(lambda t: t.index_select(0, perm), state1)
    p_ctx2, _, p_w2 = attn.step(queries[1][perm], p_cache, p_state1, need_weights=True)
    torch.testing.assert_close(p_ctx2, ctx2[perm], atol=1e-6, rtol=0)
    torch.testing.assert_close(p_w2, w2[perm], atol=1e-6, rtol=0)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", NAMES)
def test_a_cache_shared_by_groups_of_query_rows_equals_a_copied_one(name, training):
    """With ``shares_cache``, G consecutive query rows (a sentence's beams) read one cache row:
    contexts, weights and states equal those from a cache copied to every row."""
    attn = build(name)
    if not attn.shares_cache:
        pytest.skip(f"{name} does not share its cache")
    attn.train(training)
    G = 3
    memory, mask, queries = make_inputs()
    rows = torch.arange(B).repeat_interleave(G)  # (B*G,)
    cache = attn.precompute(memory, mask)
    copied = map_batch(lambda x: x.index_select(0, rows), cache)
    state = map_batch(lambda x: x.index_select(0, rows), attn.initial_state(cache))
    state_copied = state
    for query in queries[:3]:
        q = query.index_select(0, rows) + 0.1 * torch.randn(B * G, H)  # the beams differ
        torch.manual_seed(7)  # the same training noise for both
        ctx, state, w = attn.step(q, cache, state, need_weights=True)
        torch.manual_seed(7)
        ctx_c, state_copied, w_c = attn.step(q, copied, state_copied, need_weights=True)
        torch.testing.assert_close(ctx, ctx_c, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(w, w_c, rtol=1e-5, atol=1e-6)
        flat, flat_c = [], []
        map_batch(flat.append, state)
        map_batch(flat_c.append, state_copied)
        assert len(flat) == len(flat_c) and all(torch.equal(x, y) for x, y in zip(flat, flat_c))
    with pytest.raises(ValueError, match="whole number of rows"):
        attn.step(queries[0][:3], cache, attn.initial_state(cache))


@pytest.mark.parametrize("name", NAMES)
def test_non_recurrent_mechanisms_ignore_state(name):
    attn = build(name)
    memory, mask, queries = make_inputs()
    cache = attn.precompute(memory, mask)
    if attn.recurrent:
        assert attn.initial_state(cache) is not None
        return
    assert attn.initial_state(cache) is None
    ctx, state, _ = attn.step(queries[0], cache, None)
    assert state is None and torch.isfinite(ctx).all()


@pytest.mark.parametrize("name", ["bahdanau", "luong_concat"])
def test_additive_scores_have_exact_gradients(name):
    """Their steps take tanh in place on the sum of keys and query: autograd's numerical check
    of the context against memory and query, in float64, shared cache and two beams per row."""
    attn = build(name, training=True).double()
    torch.manual_seed(2)
    memory = torch.randn(2, 5, D, dtype=torch.float64, requires_grad=True)
    query = torch.randn(4, H, dtype=torch.float64, requires_grad=True)  # 2 sentences x 2 beams
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])

    def context(memory, query):
        return attn.step(query, attn.precompute(memory, mask), None)[0]

    assert torch.autograd.gradcheck(context, (memory, query))


@pytest.mark.parametrize("name", NAMES)
def test_gradients_are_finite_in_training(name):
    attn = build(name, training=True)
    memory, mask, queries = make_inputs()
    memory.requires_grad_(True)
    total = sum(ctx.square().sum() + w.sum() for ctx, w in decode(attn, memory, mask, queries[:3]))
    if not total.requires_grad:  # "none" has nothing to train
        return
    total.backward()
    assert torch.isfinite(memory.grad).all()
    for param in attn.parameters():
        assert param.grad is None or torch.isfinite(param.grad).all()


# ---- Luong ---------------------------------------------------------------------------------
def test_luong_dot_needs_equal_sizes():
    with pytest.raises(ValueError, match="query_dim=8, memory_dim=6.*luong_general"):
        build_attention("luong_dot", query_dim=8, memory_dim=6)


PADDED = [(name, {}) for name in NAMES] + [
    ("memory", {"K": 4, "position_encoding": True}),
    ("memory", {"K": 4, "position_encoding": True, "position_encoding_normalization": "none"}),
    ("memory", {"K": 4, "encoder_normalization": "S"}),
    ("memory", {"K": 4, "encoder_scoring": "sigmoid", "decoder_scoring": "sigmoid"}),
    ("monotonic", {"score_bias_init": 0.0, "sigmoid_noise": 0.0}),
]


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize(("name", "options"), PADDED, ids=[f"{n}{o}" for n, o in PADDED])
def test_more_padding_in_the_batch_changes_no_context_and_no_weight(name, options, training):
    """A batch padded wider (a longer sentence beside it) gives every step the same context and
    the same weights over the real positions, and weight exactly 0 past them (float64); so does
    one padded past the positions luong_location and memory's position encodings cover (16),
    which they refused though no sentence was longer."""
    if training and name == "monotonic" and options.get("sigmoid_noise", 1.0) != 0:
        pytest.skip("monotonic's training noise draws differ with the width")
    attn = build(name, training=training, **options, **(
        {"max_source_len": 16} if options.get("position_encoding") else {}
    )).double()  # fmt: skip
    g = torch.Generator().manual_seed(1)
    memory = torch.randn(B, S, D, dtype=torch.float64, generator=g)
    queries = torch.randn(6, B, H, dtype=torch.float64, generator=g)
    lengths = torch.tensor([9, 5, 2, 1])
    runs = []
    for extra in (0, 7, 12):
        wide = torch.cat([memory, torch.randn(B, extra, D, dtype=torch.float64, generator=g)], 1)
        mask = torch.arange(S + extra)[None, :] < lengths[:, None]  # (B, S + extra)
        cache = attn.precompute(wide, mask)
        state, steps = attn.initial_state(cache), []
        for query in queries:
            ctx, state, weights = attn.step(query, cache, state, need_weights=True)
            steps.append((ctx, weights))
        runs.append(steps)
    for wider in runs[1:]:
        for (ctx, weights), (wide_ctx, wide_weights) in zip(runs[0], wider):
            torch.testing.assert_close(wide_ctx, ctx, rtol=0, atol=1e-12)
            torch.testing.assert_close(wide_weights[:, :S], weights, rtol=0, atol=1e-12)
            assert torch.all(wide_weights[:, S:] == 0)


@pytest.mark.parametrize(
    ("name", "options"),
    [("luong_location", {}), ("memory", {"K": 4, "position_encoding": True})],
    ids=["luong_location", "memory-pe"],
)
def test_a_sentence_longer_than_the_positions_covered_is_refused(name, options):
    attn = build(name, **options, max_source_len=5)
    memory, mask, _ = make_inputs()  # a sentence of 9 > 5
    with pytest.raises(ValueError, match="max_source_len=5 positions, but a source has 9"):
        attn.precompute(memory, mask)
    attn.precompute(memory, mask & (torch.arange(S) < 5))  # padded to 9, none longer than 5


def test_luong_location_scores_the_decoder_state_alone_without_a_bias():
    """Luong's eq. 8, softmax(W_a h_t): a zero state gives uniform weights over the sentence.
    W_a had a bias (a position prior no state moves); bias=True keeps one, for older checkpoints."""
    attn = build("luong_location")
    assert attn.W_a.bias is None and build("luong_location", bias=True).W_a.bias is not None
    memory, mask, queries = make_inputs()
    _, _, weights = attn.step(
        torch.zeros_like(queries[0]), attn.precompute(memory, mask), None, need_weights=True
    )
    lengths = torch.tensor(LENGTHS, dtype=torch.float)[:, None]
    expected = torch.where(mask, 1 / lengths.clamp(min=1), torch.zeros(()))
    torch.testing.assert_close(weights, expected)


def test_option_sizes_are_respected():
    memory, mask, queries = make_inputs()
    kv = build("key_value", key_dim=3, value_dim=5)
    assert kv.context_dim == 5
    ctx, _, _ = kv.step(queries[0], kv.precompute(memory, mask), None)
    assert ctx.shape == (B, 5)
    bahdanau = build("bahdanau", attention_dim=3)
    assert bahdanau.precompute(memory, mask)["keys"].shape == (B, S, 3)


# ---- local-m / local-p ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["local_m", "local_p"])
def test_local_weights_vanish_outside_the_window(name):
    window = 2
    attn = build(name, window=window)
    memory, mask, queries = make_inputs(src_len=16, lengths=[16, 11, 0, 6])
    cache = attn.precompute(memory, mask)
    state = attn.initial_state(cache)
    positions = torch.arange(16.0)
    for query in queries:
        centre = attn.center(query, cache, state)  # (B,)
        _, state, weights = attn.step(query, cache, state, need_weights=True)
        outside = (positions[None, :] - centre[:, None]).abs() > window
        assert torch.all(weights[outside] == 0) and torch.all(weights[~mask] == 0)
        # Luong's Gaussian is not renormalised: weights <= 1 in total, < 1 unless all at p_t
        assert torch.all(weights.sum(1) <= 1 + 1e-6)


def test_local_m_centre_is_the_step_index():
    attn = build("local_m")
    memory, mask, queries = make_inputs()
    cache = attn.precompute(memory, mask)
    state = attn.initial_state(cache)
    for t, query in enumerate(queries):
        assert torch.equal(attn.center(query, cache, state), torch.full((B,), float(t)))
        _, state, _ = attn.step(query, cache, state)


def test_local_p_centre_lies_in_zero_to_the_sentence_length():
    """Luong's eq. 9 gives p_t in [0, S]: with 0-based positions the top, S, is one past the last
    real token (docstring)."""
    attn = build("local_p")
    memory, mask, queries = make_inputs()
    centre = attn.center(queries[0], attn.precompute(memory, mask), None)
    assert torch.all(centre >= 0) and torch.all(centre <= torch.tensor(LENGTHS, dtype=torch.float))


@pytest.mark.parametrize("name", ["local_m", "local_p"])
def test_local_windows_past_position_256_hold_under_bf16(name):
    """Under bf16 autocast the decoder hands the attention a bf16 query; positions and centres
    were taken in its dtype, which holds whole numbers exactly only up to 256: local_m's window
    at t=257 covered 252..261 (10 positions), its Gaussian centred off."""
    S = 400
    attn = build(name, window=4).eval()
    memory, mask, _ = make_inputs(batch=1, src_len=S, lengths=[S])
    query = torch.randn(1, H, generator=torch.Generator().manual_seed(3))
    for t in (257, 301, 333):
        state = {"t": torch.tensor([t])}
        centre = attn.center(query, attn.precompute(memory, mask), state)
        _, _, exact = attn.step(query, attn.precompute(memory, mask), state, need_weights=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cache = attn.precompute(memory, mask)
            low = attn.center(query.bfloat16(), cache, state)
            _, _, weights = attn.step(query.bfloat16(), cache, state, need_weights=True)
        assert low.dtype == torch.float32
        assert torch.equal(weights[0].nonzero(), exact[0].nonzero()), t
        assert weights[0].float().argmax() == exact[0].argmax(), t
        if name == "local_m":
            assert low.item() == centre.item() == t


# ---- memory attention ----------------------------------------------------------------------
def _step_flops(attn, src_len, need_weights):
    memory, mask, queries = make_inputs(src_len=src_len, lengths=[src_len, 3, 0, 1])
    cache = attn.precompute(memory, mask)
    with FlopCounterMode(display=False) as counter:
        attn.step(queries[0], cache, None, need_weights=need_weights)
    return counter.get_total_flops()


def test_memory_step_cost_does_not_grow_with_source_length():
    attn = build("memory")
    short, long = _step_flops(attn, 10, False), _step_flops(attn, 1000, False)
    assert short == long > 0
    # the counter does see S-sized work when the alignment over positions is asked for
    assert _step_flops(attn, 1000, True) > _step_flops(attn, 10, True)
    # and the tensor the hot step reads has no source axis
    memory, mask, _ = make_inputs(src_len=1000, lengths=[1000, 3, 0, 1])
    assert attn.precompute(memory, mask)["C"].shape == (B, 4, D)


@pytest.mark.parametrize("normalization", ["K", "S"])
@pytest.mark.parametrize("decoder_scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("encoder_scoring", ["softmax", "sigmoid"])
def test_memory_scoring_pairs(encoder_scoring, decoder_scoring, normalization):
    attn = build(
        "memory",
        encoder_scoring=encoder_scoring,
        decoder_scoring=decoder_scoring,
        encoder_normalization=normalization,
    )
    memory, mask, queries = make_inputs()
    cache = attn.precompute(memory, mask)
    ctx, _, weights = attn.step(queries[0], cache, None, need_weights=True)
    extra = attn.extra_weights(queries[0], cache, None)
    alpha, beta = extra["alpha"], extra["beta"]
    assert alpha.shape == (B, S, 4) and beta.shape == (B, 4)
    assert torch.all(alpha[~mask] == 0)
    torch.testing.assert_close(weights, torch.einsum("bsk,bk->bs", alpha, beta))
    torch.testing.assert_close(ctx, torch.einsum("bs,bsd->bd", weights, memory), atol=1e-5, rtol=0)
    if encoder_scoring == "softmax" and normalization == "K":  # eq. 5: over K for each position
        torch.testing.assert_close(alpha.sum(2), mask.float())
    elif encoder_scoring == "softmax":  # over the real positions for each k: C_k convex
        torch.testing.assert_close(alpha.sum(1), mask.any(1, keepdim=True).float().expand(B, 4))
    else:
        assert torch.all((alpha[mask] > 0) & (alpha[mask] < 1))
    if decoder_scoring == "softmax":
        torch.testing.assert_close(beta.sum(1), torch.ones(B))
    else:
        assert torch.all((beta > 0) & (beta < 1)) and not torch.allclose(beta.sum(1), torch.ones(B))


def test_memory_position_encoding_is_renormalised_per_sentence():
    """alpha^PE_s = score_enc(W_alpha h_s o l_s) with each sentence's own renormalised l (§3.2);
    the un-renormalised columns of L remain an option."""
    attn = build("memory", position_encoding=True, max_source_len=12)
    memory, mask, queries = make_inputs()
    alpha = attn.precompute(memory, mask)["alpha"]
    L = position_encoding(4, 12)[:, :S]  # (K, S) of S_max = 12
    l = sentence_position_encoding(L, mask)  # noqa: E741 (the paper's l)  # (B, S, K), jagged
    assert not torch.allclose(l[0], l[1])  # a 9- and a 5-token sentence get different encodings
    expected = torch.softmax(attn.W_alpha(memory) * l, dim=-1) * mask[..., None]
    torch.testing.assert_close(alpha, expected)
    raw = build(
        "memory", position_encoding=True, max_source_len=12, position_encoding_normalization="none"
    )
    expected_raw = torch.softmax(raw.W_alpha(memory) * L.T, dim=-1) * mask[..., None]
    torch.testing.assert_close(raw.precompute(memory, mask)["alpha"], expected_raw)
    with pytest.raises(ValueError, match="max_source_len=5"):
        build("memory", position_encoding=True, max_source_len=5).precompute(memory, mask)


def test_memory_projections_have_no_bias_unless_asked():
    """Eqs. 5, 7 and 9 have no bias terms; ``bias=True`` restores them."""
    attn = build("memory")
    assert attn.W_alpha.bias is None and attn.W_beta.bias is None
    with_bias = build("memory", bias=True)
    assert with_bias.W_alpha.bias is not None and with_bias.W_beta.bias is not None


def test_key_value_is_scaled_by_the_root_of_the_key_size_unless_told_not_to():
    """alpha = softmax_j((W_K s_j)^T (W_Q h) / sqrt(d)): the default is the scaled form."""
    memory, mask, queries = make_inputs()
    plain, scaled = build("key_value", scaled=False), build("key_value")  # same seed and weights
    q, keys = plain.query_proj(queries[0]), plain.key_proj(memory)  # (B, d), (B, S, d)
    scores = torch.einsum("bsk,bk->bs", keys, q)  # (B, S)
    for attn, divisor in ((plain, 1.0), (scaled, math.sqrt(D))):
        _, _, weights = attn.step(
            queries[0], attn.precompute(memory, mask), None, need_weights=True
        )
        torch.testing.assert_close(
            weights, torch.softmax(scores / divisor + (~mask) * -1e30, dim=-1) * mask
        )


def test_every_mechanism_takes_query_and_memory_sizes_separately():
    """A bidirectional encoder gives D = 2H: every mechanism but those declaring equal_sizes builds
    and steps with H != D, returning contexts of its context_dim."""
    memory = torch.randn(2, 5, 2 * H)  # (B, S, D = 2H)
    mask = torch.ones(2, 5, dtype=torch.bool)
    for name in NAMES:
        cls = ATTENTION_REGISTRY[name]
        if cls.equal_sizes:
            with pytest.raises(
                ValueError, match="bidirectional=False, or bidirectional: false in a sweep file"
            ):
                build_attention(name, query_dim=H, memory_dim=2 * H, **OPTIONS.get(name, {}))
            continue
        attn = build_attention(name, query_dim=H, memory_dim=2 * H, **OPTIONS.get(name, {})).eval()
        cache = attn.precompute(memory, mask)
        ctx, _, _ = attn.step(torch.randn(2, H), cache, attn.initial_state(cache))
        assert ctx.shape == (2, attn.context_dim)


@pytest.mark.parametrize("option", ["encoder_scoring", "decoder_scoring", "encoder_normalization"])
def test_memory_rejects_unknown_choices(option):
    with pytest.raises(ValueError, match=f"{option}='tanh'.*'"):
        build("memory", **{option: "tanh"})


# ---- monotonic -----------------------------------------------------------------------------
def test_monotonic_mechanism_parallel_equals_recursive():
    memory, mask, queries = make_inputs()
    outs = {}
    for mode in ["parallel", "recursive"]:
        attn = build("monotonic", training=True, mode=mode, sigmoid_noise=0.0, score_bias_init=-1.0)
        outs[mode] = decode(attn, memory, mask, queries)
    for (cp, wp), (cr, wr) in zip(outs["parallel"], outs["recursive"]):
        torch.testing.assert_close(wp, wr, atol=1e-5, rtol=0)
        torch.testing.assert_close(cp, cr, atol=1e-5, rtol=0)
        assert torch.all(wp.sum(1) <= 1 + 1e-5)


def test_monotonic_noise_only_in_training():
    attn = build("monotonic", training=True)
    memory, mask, queries = make_inputs()
    first, second = decode(attn, memory, mask, queries[:2]), decode(attn, memory, mask, queries[:2])
    assert not torch.equal(first[1][1], second[1][1]), "two training calls should differ (noise)"
    attn.eval()
    first, second = decode(attn, memory, mask, queries[:2]), decode(attn, memory, mask, queries[:2])
    assert torch.equal(first[1][1], second[1][1])


def _hard_decode(attn, memory, mask, queries):
    cache = attn.precompute(memory, mask)
    state = attn.initial_state(cache)
    rows = []
    for query in queries:
        _, state, weights = attn.step(query, cache, state, need_weights=True)
        rows.append(weights)
    return torch.stack(rows, dim=1)  # (B, T, S)


def test_monotonic_hard_decode_is_monotonic_and_matches_the_maths():
    torch.manual_seed(3)
    batch, src_len, steps = 16, 12, 20
    attn = build("monotonic", score_bias_init=-0.5).eval()
    with torch.no_grad():
        attn.g.fill_(2.0)  # spread the energies so both outcomes occur
    lengths = torch.randint(1, src_len + 1, (batch,)).tolist()
    memory, mask, _ = make_inputs(batch=batch, src_len=src_len, lengths=lengths)
    queries = torch.randn(steps, batch, H)
    with torch.no_grad():
        hard = _hard_decode(attn, memory, mask, queries)  # (B, T, S)
    assert torch.all((hard == 0) | (hard == 1))
    sums = hard.sum(2)  # (B, T)
    assert torch.all((sums == 0) | (sums == 1))
    assert torch.all(hard[~mask[:, None, :].expand_as(hard)] == 0)
    # once a row attends nowhere it stays there; while it attends, it never moves back
    assert torch.all(sums[:, 1:] <= sums[:, :-1])
    pos = hard.argmax(2)  # (B, T)
    attending = sums[:, 1:] == 1
    assert torch.all(pos[:, 1:][attending] >= pos[:, :-1][attending])
    assert sums[:, -1].any() and not sums[:, -1].all(), "want some rows attending and some run off"
    # the linear-time scan agrees with the functional hard alignment on full energies
    cache = attn.precompute(memory, mask)
    previous = attn._as_soft_state(attn.initial_state(cache), cache)
    with torch.no_grad():
        for t, query in enumerate(queries):
            energy = attn._energy(cache["keys"], attn.W_h(query)[:, None, :])  # (B, S)
            p = torch.sigmoid(energy) * mask
            previous = monotonic_alignment(p, previous, "hard")
            torch.testing.assert_close(previous, hard[:, t])


def test_monotonic_hard_decode_is_linear_time(monkeypatch):
    """Each step evaluates one window of scan_chunk energies per row; only a row whose window held
    no hit evaluates its remaining sentence, which moves it on by >= scan_chunk or ends it."""
    batch, src_len, steps, chunk = 8, 30, 25, 4
    attn = build("monotonic", score_bias_init=-1.0, scan_chunk=chunk).eval()
    memory, mask, _ = make_inputs(
        batch=batch, src_len=src_len, lengths=[30, 30, 25, 17, 9, 30, 1, 0]
    )
    queries = torch.randn(steps, batch, H)
    shapes = []
    energy = attn._scan_energy

    def counting_energy(cand, query_proj, bias, weight):
        shapes.append(tuple(cand.shape[:-1]))
        return energy(cand, query_proj, bias, weight)

    monkeypatch.setattr(attn, "_scan_energy", counting_energy)
    with torch.no_grad():
        _hard_decode(attn, memory, mask, queries)
    windows = [s for s in shapes if s == (batch, chunk)]
    rests = [s for s in shapes if s != (batch, chunk)]
    assert len(windows) == steps  # one batched window per step, never (B, S) for every row
    assert all(n <= batch and width == src_len for n, width in rests)
    assert 0 < sum(n for n, _ in rests) <= batch * (src_len // chunk + 1)  # jumps past a window


def _hard_reference(energy: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Brute force, one row and one step at a time: the first j >= previous position with
    energy > 0 (p > 0.5) inside the sentence, else -1 from then on. energy (B, T, S) -> (B, T)."""
    B, T, _ = energy.shape
    out = torch.full((B, T), -1, dtype=torch.long)
    for b in range(B):
        pos, done = 0, lengths[b] == 0
        for t in range(T):
            if done:
                continue
            j = pos
            while j < lengths[b] and energy[b, t, j] <= 0:
                j += 1
            if j < lengths[b]:
                pos = out[b, t] = j
            else:
                done = True
    return out


@pytest.mark.parametrize("src_len,steps", [(200, 200), (200, 40), (40, 200), (7, 12)])
@pytest.mark.parametrize("bias", [-2.0, 0.0, 1.5], ids=["long-jumps", "even", "short-jumps"])
def test_monotonic_hard_equals_brute_force_reference(src_len, steps, bias):
    """Hard mode, batched with sentences of different lengths, against the scalar reference on
    the same energies (float64, so no energy is so close to 0 that rounding could flip it)."""
    torch.manual_seed(int(src_len * 7 + steps + bias * 10))
    batch = 12
    attn = build("monotonic", score_bias_init=bias).double().eval()
    with torch.no_grad():
        attn.g.fill_(3.0)  # spread the energies so both outcomes occur often
    lengths = [src_len, 0, 1] + torch.randint(1, src_len + 1, (batch - 3,)).tolist()
    memory = torch.randn(batch, src_len, D, dtype=torch.float64)
    mask = torch.arange(src_len)[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
    queries = torch.randn(steps, batch, H, dtype=torch.float64)
    with torch.no_grad():
        hard = _hard_decode(attn, memory, mask, queries)  # (B, T, S)
        cache = attn.precompute(memory, mask)
        energy = torch.stack(
            [attn._energy(cache["keys"], attn.W_h(q)[:, None, :]) for q in queries], dim=1
        )  # (B, T, S)
    expected = _hard_reference(energy, lengths)  # (B, T)
    got = torch.where(hard.sum(2) > 0, hard.argmax(2), torch.full_like(expected, -1))  # (B, T)
    assert torch.equal(got, expected)
    assert (expected >= 0).any()  # some rows attend somewhere


def test_monotonic_hard_never_stops_at_a_masked_position():
    """A mask with holes inside the sentences: the hard scan passes over the holes (p = 0 there,
    as in the soft modes) and agrees with the functional hard alignment on the masked p."""
    torch.manual_seed(5)
    batch, src_len, steps = 10, 24, 30
    attn = build("monotonic", score_bias_init=0.5, scan_chunk=3).double().eval()
    with torch.no_grad():
        attn.g.fill_(3.0)
    memory = torch.randn(batch, src_len, D, dtype=torch.float64)
    mask = torch.rand(batch, src_len) < 0.6  # (B, S) holes anywhere, some rows maybe empty
    mask[0] = False  # one empty sentence
    queries = torch.randn(steps, batch, H, dtype=torch.float64)
    with torch.no_grad():
        hard = _hard_decode(attn, memory, mask, queries)  # (B, T, S)
        cache = attn.precompute(memory, mask)
        previous = attn._as_soft_state(attn.initial_state(cache), cache)
        for t, query in enumerate(queries):
            p = (
                torch.sigmoid(attn._energy(cache["keys"], attn.W_h(query)[:, None, :])) * mask
            )  # (B, S)
            previous = monotonic_alignment(p, previous, "hard")
            torch.testing.assert_close(previous, hard[:, t])
    assert torch.all(hard[~mask[:, None, :].expand_as(hard)] == 0)
    assert hard[1:].sum() > steps  # rows do attend, so the holes were really passed over


def test_shared_cache_entries_pass_through_map_batch():
    weight = torch.randn(4, 3)
    cache = {"keys": torch.randn(2, 5), "shared": Shared(weight=weight)}
    expanded = map_batch(lambda x: x.index_select(0, torch.tensor([0, 0, 1, 1])), cache)
    assert expanded["keys"].shape == (4, 5)
    assert expanded["shared"] is cache["shared"] and expanded["shared"].weight is weight


def test_monotonic_states_convert_between_modes():
    attn = build("monotonic", training=True, sigmoid_noise=0.0)
    memory, mask, queries = make_inputs()
    cache = attn.precompute(memory, mask)
    _, state, _ = attn.step(queries[0], cache, attn.initial_state(cache))
    assert set(state) == {"alignment"}
    attn.eval()  # switch to hard decoding mid-way
    ctx, state, weights = attn.step(queries[1], cache, state, need_weights=True)
    assert set(state) == {"pos", "end"} and torch.all(weights[~mask] == 0)
    attn.train()
    _, state, weights = attn.step(queries[2], cache, state, need_weights=True)
    assert set(state) == {"alignment"} and math.isfinite(weights.sum().item())


def test_monotonic_rejects_unknown_mode():
    with pytest.raises(ValueError, match="parallel, recursive, hard"):
        build("monotonic", mode="soft")


def _package_copy(tmp_path, monkeypatch, name: str, extra: dict[str, str]):
    """A copy of the attention package under another name, with ``extra`` files added, imported."""
    import importlib
    import shutil
    from pathlib import Path

    import lightning_modules.attention as attention

    shutil.copytree(
        Path(attention.__file__).parent,
        tmp_path / name,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for filename, text in extra.items():
        (tmp_path / name / filename).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


NEW_MECHANISM = """
from .base import register_attention
from .bahdanau import BahdanauAttention


@register_attention("bahdanau_heads")
class HeadsAttention(BahdanauAttention):
    headline = "heads"
    headline_meaning = "attention heads"

    def __init__(self, query_dim: int, memory_dim: int, heads: int = 2) -> None:
        super().__init__(query_dim, memory_dim)
        self.heads = heads
"""


def test_a_new_mechanism_file_is_found_without_an_import_line(tmp_path, monkeypatch):
    """Every module of the package is imported, so a mechanism's own file registers it; its
    headline option (``Attention.headline``) is what results, tables and plots show."""
    package = _package_copy(
        tmp_path, monkeypatch, "attention_copy_new", {"heads.py": NEW_MECHANISM}
    )
    assert set(package.ATTENTION_REGISTRY) == set(ATTENTION_REGISTRY) | {"bahdanau_heads"}
    assert package.headline_options()["bahdanau_heads"] == ("heads", "attention heads", 2)
    assert package.headline_options()["memory"][0] == "K"
    assert package.build_attention("bahdanau_heads", query_dim=H, memory_dim=D, heads=3).heads == 3


def test_a_mechanism_file_that_fails_to_import_is_named(tmp_path, monkeypatch):
    with pytest.raises(ImportError, match=r"broken\.py failed to import: RuntimeError: boom"):
        _package_copy(
            tmp_path,
            monkeypatch,
            "attention_copy_broken",
            {"broken.py": "raise RuntimeError('boom')\n"},
        )


def test_a_headline_must_be_one_of_the_constructor_options():
    from lightning_modules.attention import Attention, register_attention

    class Bad(Attention):
        headline = "K"

    with pytest.raises(ValueError, match="headline 'K' is not one of its constructor's options"):
        register_attention("bad_headline")(Bad)
    assert "bad_headline" not in ATTENTION_REGISTRY


def test_each_mechanism_declares_its_headline_option():
    from lightning_modules.attention import headline_options

    shipped = {
        "memory": ("K", "memory vectors", 32),
        "local_m": ("window", "half-width D of [p_t - D, p_t + D]", 10),
        "local_p": ("window", "half-width D of [p_t - D, p_t + D]", 10),
    }
    found = headline_options()
    # a mechanism added later declares its own; the shipped ones keep theirs, and no other has one
    assert {name: found.get(name) for name in shipped} == shipped
    shipped_names = {"bahdanau", "key_value", "luong_concat", "luong_dot", "luong_general"}
    shipped_names |= {"luong_location", "monotonic", "none"}
    assert not shipped_names & set(found)


def test_luong_concat_is_bahdanau_with_attention_dim_h_weight_for_weight():
    """In the project's one decoder both score v^T tanh(W_q q + W_s s_j), with the same layers
    made in the same order: under one seed they are one model (luong.py's docstring, and why the
    attention zoo's two rows agree to the last digit)."""
    memory, mask = torch.randn(2, 5, 6), torch.ones(2, 5, dtype=torch.bool)
    query = torch.randn(2, 4)
    out = []
    for name in ("bahdanau", "luong_concat"):
        torch.manual_seed(0)
        attn = build_attention(name, query_dim=4, memory_dim=6).eval()
        ctx, _, weights = attn.step(query, attn.precompute(memory, mask), None, need_weights=True)
        out.append((ctx, weights))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


def test_memory_attention_with_one_slot_softmax_over_k_ignores_position_encodings():
    """With K=1 and the encoder softmax over K, every source position gives its one slot weight 1,
    whatever the score: position encodings (which scale the scores) change nothing, so
    position_encoding.yaml's K=1 cells with and without them are one model."""
    memory, mask = torch.randn(2, 5, 6), torch.tensor([[1] * 5, [1] * 3 + [0] * 2]).bool()
    query = torch.randn(2, 4)
    out = []
    for pe in (False, True):
        torch.manual_seed(0)
        attn = build_attention(
            "memory", query_dim=4, memory_dim=6, K=1, position_encoding=pe, max_source_len=5
        ).eval()
        ctx, _, weights = attn.step(query, attn.precompute(memory, mask), None, need_weights=True)
        out.append((ctx, weights))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    torch.manual_seed(0)  # sigmoid scoring normalises over nothing: there they differ
    plain = build_attention("memory", query_dim=4, memory_dim=6, K=1, encoder_scoring="sigmoid")
    torch.manual_seed(0)
    encoded = build_attention(
        "memory", query_dim=4, memory_dim=6, K=1, encoder_scoring="sigmoid",
        position_encoding=True, max_source_len=5,
    )  # fmt: skip
    a = plain.eval().step(query, plain.precompute(memory, mask), None)[0]
    b = encoded.eval().step(query, encoded.precompute(memory, mask), None)[0]
    assert not torch.allclose(a, b)


#: per mechanism, its options annotated ``bool``
FLAGS = {
    name: [o for o, hint in typing.get_type_hints(cls.__init__).items() if hint is bool]
    for name, cls in ATTENTION_REGISTRY.items()
}


@pytest.mark.parametrize("name", [n for n in NAMES if FLAGS[n]])
def test_bool_options_take_only_true_or_false(name):
    """memory's position_encoding="false" (or bias="False") switched position encodings (biases)
    on without a word: the string is truthy. A bool option now takes True or False only."""
    for option in FLAGS[name]:
        for value in ("false", 0, 1):
            with pytest.raises(ValueError, match=rf"{option} must be True or False, got {value!r}"):
                build(name, **{option: value})
        for value in (True, False):
            build(name, **{option: value})


@pytest.mark.parametrize(
    "name", [n for n in NAMES if declared_ranges(ATTENTION_REGISTRY[n].__init__)]
)
def test_a_number_option_that_is_not_optional_refuses_none_and_bools(name):
    """K=None and K=True (window=None, attention_dim=True) reached nn.Linear or arithmetic, whose
    errors ("empty(): argument 'size' ...") named neither the option nor the fix."""
    cls = ATTENTION_REGISTRY[name]
    hints = typing.get_type_hints(cls.__init__, include_extras=True)
    for option in declared_ranges(cls.__init__):
        with pytest.raises(ValueError, match=rf"{option} must be a (whole )?number .*, got True"):
            build(name, **{option: True})
        if type(None) in typing.get_args(hints[option]):  # Optional: None is its default
            build(name, **{option: None})
        else:
            with pytest.raises(ValueError, match=rf"{option} must be .*, got None; leave it out"):
                build(name, **{option: None})
