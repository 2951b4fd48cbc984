"""Tests of the pure attention maths in lightning_modules/attention/functional.py."""

from __future__ import annotations

import pytest
import torch

from lightning_modules.attention.functional import (
    masked_softmax,
    monotonic_alignment,
    position_encoding,
    sentence_position_encoding,
)

torch.set_num_threads(1)


# ---- masked_softmax ----------------------------------------------------------------------
def test_masked_softmax_zeroes_padding_and_normalises_real_positions():
    torch.manual_seed(0)
    scores = torch.randn(3, 6, requires_grad=True)
    mask = torch.tensor(
        [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.bool
    )
    weights = masked_softmax(scores, mask)
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(weights.sum(1), torch.tensor([1.0, 1.0, 0.0]))
    # the fully masked row: no NaN in the values, nor in the gradient
    (weights * torch.randn(3, 6)).sum().backward()
    assert torch.isfinite(weights).all() and torch.isfinite(scores.grad).all()


def test_masked_softmax_other_axis_and_extreme_scores():
    scores = torch.tensor([[[1e30, -1e30], [0.0, 5.0]]])  # (1, S=2, K=2), huge but finite
    mask = torch.tensor([[[True], [False]]])  # (1, 2, 1): position 1 padded
    weights = masked_softmax(scores, mask, dim=1)  # normalise over S for each k
    torch.testing.assert_close(weights, torch.tensor([[[1.0, 1.0], [0.0, 0.0]]]))


# ---- position encodings (Britz et al. eq. 10) -----------------------------------------------
def test_position_encoding_matches_eq10_by_hand():
    L = position_encoding(4, 5)  # K = 4, S = 5, 1-based k and s
    assert L.shape == (4, 5)
    # L_ks = (1 - k/K)(1 - s/S) + (k/K)(s/S)
    assert L[0, 0].item() == pytest.approx(0.75 * 0.8 + 0.25 * 0.2)  # k=1, s=1: 0.65
    assert L[1, 2].item() == pytest.approx(0.5 * 0.4 + 0.5 * 0.6)  # k=2, s=3: 0.5
    assert L[3, 0].item() == pytest.approx(0.0 * 0.8 + 1.0 * 0.2)  # k=4, s=1: 0.2
    assert L[0, 4].item() == pytest.approx(0.75 * 0.0 + 0.25 * 1.0)  # k=1, s=5: 0.25
    assert L[3, 4].item() == pytest.approx(1.0)  # k=K, s=S
    assert L[2, 3].item() == pytest.approx(0.25 * 0.2 + 0.75 * 0.8)  # k=3, s=4: 0.65


def test_sentence_position_encoding_renormalises_a_3_token_sentence_by_hand():
    """Britz et al. §3.2: columns past the sentence are masked out, each row renormalised over its
    real positions. K = 4, S = 10, a 3-token sentence beside a full one (a jagged batch)."""
    L = position_encoding(4, 10)  # (K, S)
    mask = torch.arange(10)[None, :] < torch.tensor([3, 10])[:, None]  # (2, 10)
    l = sentence_position_encoding(L, mask)  # noqa: E741 (the paper's l)  # (2, S, K)
    # rows of L over s = 1..3 (by hand): k=1 .70 .65 .60 (sum 1.95), k=2 .5 .5 .5 (1.50),
    # k=3 .30 .35 .40 (1.05), k=4 .1 .2 .3 (0.60)
    by_hand = torch.tensor(
        [
            [0.70 / 1.95, 0.5 / 1.5, 0.30 / 1.05, 0.1 / 0.6],
            [0.65 / 1.95, 0.5 / 1.5, 0.35 / 1.05, 0.2 / 0.6],
            [0.60 / 1.95, 0.5 / 1.5, 0.40 / 1.05, 0.3 / 0.6],
        ]
    )  # (s, k)
    torch.testing.assert_close(l[0, :3], by_hand)
    assert (l[0, 3:] == 0).all()  # exactly zero beyond the sentence
    torch.testing.assert_close(
        l.sum(dim=1), torch.ones(2, 4)
    )  # every row sums to 1 over real positions
    torch.testing.assert_close(l[1], L.T / L.sum(dim=1))  # a full-width sentence: L renormalised
    empty = sentence_position_encoding(L, torch.zeros(1, 10, dtype=torch.bool))
    assert (empty == 0).all() and torch.isfinite(empty).all()


# ---- monotonic alignment ------------------------------------------------------------------
def _previous_alignments(B: int, S: int) -> dict[str, torch.Tensor]:
    one_hot = torch.zeros(B, S)
    one_hot[:, 0] = 1.0
    spread = torch.softmax(3 * torch.randn(B, S), dim=1)
    partial = spread * 0.5  # mass already partly lost
    partial[:, S // 2 :] = 0.0  # and exact zeros after the middle
    return {"one_hot": one_hot, "spread": spread, "partial": partial}


def _probabilities(B: int, S: int) -> dict[str, torch.Tensor]:
    return {
        "near0": torch.full((B, S), 1e-6),
        "near1": torch.full((B, S), 1 - 1e-6),
        "random": torch.rand(B, S),
        "mixed": torch.where(torch.rand(B, S) < 0.5, 1e-6, 1 - 1e-6),
        "saturating": torch.sigmoid(8 * torch.randn(B, S)),
    }


@pytest.mark.parametrize("S", [1, 7, 100, 1000])
def test_parallel_equals_recursive(S):
    torch.manual_seed(S)
    B = 3
    for p_name, p in _probabilities(B, S).items():
        for prev_name, previous in _previous_alignments(B, S).items():
            parallel = monotonic_alignment(p, previous, "parallel")
            recursive = monotonic_alignment(p, previous, "recursive")
            assert parallel.dtype == torch.float32
            torch.testing.assert_close(
                parallel, recursive, atol=1e-5, rtol=0, msg=f"p={p_name} prev={prev_name}"
            )
            # mass is conserved or lost, never created
            assert (parallel.sum(1) <= previous.sum(1) + 1e-5).all()
            assert (parallel >= 0).all()


def test_parallel_with_given_logs_matches_energy_form():
    torch.manual_seed(0)
    energy = 10 * torch.randn(2, 50)
    p = torch.sigmoid(energy)
    previous = _previous_alignments(2, 50)["spread"]
    softplus = torch.nn.functional.softplus
    exact = monotonic_alignment(
        p, previous, "parallel", log_p=-softplus(-energy), log_1mp=-softplus(energy)
    )
    reference = monotonic_alignment(p.double(), previous.double(), "recursive").float()
    torch.testing.assert_close(exact, reference, atol=1e-6, rtol=0)


def test_parallel_handles_exact_0_and_1_with_finite_gradients():
    p = torch.tensor([[0.0, 1.0, 0.3, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0, 1.0]], requires_grad=True)
    previous = torch.tensor(
        [[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.0, 0.0]], requires_grad=True
    )
    a = monotonic_alignment(p, previous, "parallel")
    torch.testing.assert_close(a, monotonic_alignment(p, previous, "recursive"), atol=1e-6, rtol=0)
    (a * torch.arange(5.0)).sum().backward()
    assert torch.isfinite(p.grad).all() and torch.isfinite(previous.grad).all()


def test_hard_alignment_by_hand():
    p = torch.tensor(
        [
            [0.9, 0.1, 0.8, 0.2],  # previous at 1: first p > 0.5 at/after 1 is 2
            [0.9, 0.1, 0.8, 0.2],  # previous at 0: stays at 0
            [0.1, 0.1, 0.1, 0.9],  # previous at 2: moves on to 3
            [0.9, 0.9, 0.2, 0.1],  # previous at 2: nothing at/after 2 -> nowhere
            [0.9, 0.9, 0.9, 0.9],  # previous all zero -> nowhere
        ]
    )
    previous = torch.zeros(5, 4)
    previous[0, 1] = previous[1, 0] = previous[2, 2] = previous[3, 2] = 1.0
    hard = monotonic_alignment(p, previous, "hard")
    expected = torch.zeros(5, 4)
    expected[0, 2] = expected[1, 0] = expected[2, 3] = 1.0
    torch.testing.assert_close(hard, expected)


def test_unknown_mode_raises_listing_valid_ones():
    with pytest.raises(ValueError, match="parallel, recursive, hard"):
        monotonic_alignment(torch.rand(1, 3), torch.ones(1, 3), "soft")
