"""Pure attention maths shared by the mechanisms (no parameters, no state).

Everything here is a plain function of tensors so the tests of the maths are tests of the
mechanisms that call it:

- :func:`masked_softmax`: softmax over the real positions only; padding gets exactly 0.
- :func:`position_encoding`: the K x S position-encoding matrix of Britz et al. (2017), eq. 10,
  and :func:`sentence_position_encoding`: its per-sentence masked, renormalised form (§3.2).
- :func:`monotonic_alignment`: Raffel et al.'s (2017) monotonic alignment, as the slow recursive
  reference, the parallel log-space form used in training, or the hard (test-time) form.
"""

from __future__ import annotations

import torch

MONOTONIC_MODES = ("parallel", "recursive", "hard")
_LOG_ZERO = -1e300  # float64 stand-in for log(0) in the parallel monotonic alignment


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over the positions where ``mask`` is True; the others get exactly 0.

    Padded scores are filled with the dtype's most negative finite value rather than -inf, so a
    fully masked row is a uniform softmax over nothing, which the final multiplication by the
    mask turns into all zeros (no NaN, in the values or in the gradient).

    Args:
        scores: unnormalised scores, e.g. (B, S).
        mask: bool, same shape (or broadcastable), True at real positions.
        dim: the axis to normalise over.
    Returns:
        weights of the same shape as ``scores``, summing to 1 over the real positions of each
        row that has any, and to 0 on a fully masked row.
    """
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # (B, S)
    return torch.softmax(filled, dim=dim) * mask.to(scores.dtype)  # (B, S)


def check_positions(mask: torch.Tensor, covered: int, what: str) -> None:
    """Raise where a sentence of the batch (``mask`` (B, S), True at real positions) is longer
    than the ``covered`` positions a mechanism has (``what`` says whose, before
    "max_source_len=..."); a batch only padded wider passes (its padding is masked out)."""
    if mask.shape[1] <= covered:
        return
    longest = int(mask.sum(1).max())
    if longest > covered:
        raise ValueError(
            f"{what} max_source_len={covered} positions, but a source has {longest}; build it "
            "with a larger max_source_len, or filter longer sentences out of the data"
        )


def position_encoding(
    K: int, S: int, dtype: torch.dtype = torch.float32, device=None
) -> torch.Tensor:
    """Britz et al. (2017) eq. 10: ``L[k, s] = (1 - k/K)(1 - s/S) + (k/K)(s/S)``, 1-based k and s.

    Args:
        K: number of memory vectors.
        S: number of source positions (the maximum source length the model supports).
    Returns:
        L: (K, S); column ``s - 1`` is the encoding ``l_s`` of source position s.
    """
    k = torch.arange(1, K + 1, dtype=dtype, device=device) / K  # (K,)
    s = torch.arange(1, S + 1, dtype=dtype, device=device) / S  # (S,)
    return torch.outer(1 - k, 1 - s) + torch.outer(k, s)  # (K, S)


def sentence_position_encoding(pe: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each sentence's own position encodings: L masked to its real positions, rows renormalised.

    Args:
        pe: (K, S) the eq. 10 matrix, cut to the batch width S.
        mask: (B, S) bool, True at real tokens.
    Returns:
        (B, S, K): column l_s of each sentence, each k summing to 1 over the real positions and
        exactly 0 at padding (an empty sentence gets all zeros).
    """
    masked = pe.T.unsqueeze(0) * mask.unsqueeze(-1).to(pe.dtype)  # (B, S, K)
    total = masked.sum(dim=1, keepdim=True)  # (B, 1, K)
    return masked / total.clamp(min=torch.finfo(pe.dtype).tiny)  # (B, S, K)


def _logs_from_p(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log(p) and log(1 - p), finite everywhere, exact for every p strictly inside (0, 1).

    The only clamps are at the two ends, where the logarithm is -inf: p = 0 (or a subnormal p)
    is read as the smallest normal number and p = 1 as the largest float below 1 (1 - eps/2).
    Both are no-ops for every other representable probability, so nothing is "clipped" in the
    sense of the clipped-cumprod formula. They keep the cumulative sums finite (an exact -inf in
    log(1 - p) would make ``L_j - L_k`` an inf - inf = NaN further on) and the gradients too.
    The mass they let through (at most 1e-38, resp. eps/2 = 6e-8 of q in float32) is below an
    alignment's float32 resolution. Mechanisms that have the energy e should pass the exact
    ``log_p = -softplus(-e)`` and ``log_1mp = -softplus(e)`` instead.
    """
    finfo = torch.finfo(p.dtype)
    log_p = p.clamp(min=finfo.tiny).log()  # (B, S)
    log_1mp = torch.log1p(-p.clamp(max=1 - finfo.eps / 2))  # (B, S)
    return log_p, log_1mp


def _monotonic_recursive(
    p: torch.Tensor, previous: torch.Tensor, one_minus_p: torch.Tensor
) -> torch.Tensor:
    """Raffel et al. eq. 9 as a loop over j: q_j = (1 - p_{j-1}) q_{j-1} + a'_j, a_j = p_j q_j."""
    q = previous[:, 0]  # (B,)
    out = [p[:, 0] * q]
    for j in range(1, p.shape[1]):
        q = one_minus_p[:, j - 1] * q + previous[:, j]  # (B,)
        out.append(p[:, j] * q)
    return torch.stack(out, dim=1)  # (B, S)


def _monotonic_parallel(
    log_p: torch.Tensor, log_1mp: torch.Tensor, previous: torch.Tensor
) -> torch.Tensor:
    """The closed form of the recursion, in log space.

    With the exclusive cumulative sum ``L_j = sum_{l<j} log(1 - p_l)`` (log of the probability of
    passing positions 0..j-1), the recursion solves to
    ``q_j = sum_{k<=j} a'_k exp(L_j - L_k)``, i.e.
    ``log q_j = L_j + logcumsumexp_k(log a'_k - L_k)`` and ``a_j = exp(log p_j + log q_j)``.
    Nothing is divided by a cumulative product, so nothing underflows to 0 and gets divided by.

    ``L`` reaches magnitudes of S * |log(1 - p)| (over 10^4 at S = 1000 with p near 1), where the
    float32 spacing is ~1e-3, and ``L_j`` and the logcumsumexp cancel to an O(1) number with
    that rounding error. Accumulated in float32 this was measured at up to 1e-4 absolute error
    against the recursion at S = 1000; in float64 it is ~1e-8. So the cumulative part runs in
    float64 (B x S numbers per step, negligible next to the matmuls; not available on Apple MPS)
    and the result is cast back to the input dtype.
    """
    acc = torch.float64
    # Zeros of the previous alignment (padding, the one-hot start, underflow) stand in for log 0
    # as _LOG_ZERO: finite, so logcumsumexp's backward never meets inf - inf (an exact -inf
    # there gives NaN gradients that leak into L), yet so negative that exp() of anything built
    # from it is exactly 0. The gradient with respect to such exact zeros is taken as 0: they are
    # constants or values whose own derivative is ~0 anyway.
    log_prev = torch.where(
        previous > 0, previous.clamp(min=torch.finfo(previous.dtype).tiny).log().to(acc), _LOG_ZERO
    )  # (B, S)
    log_1mp = log_1mp.to(acc)  # (B, S)
    cum = torch.cumsum(log_1mp, dim=1)  # (B, S) inclusive
    excl = torch.nn.functional.pad(cum[:, :-1], (1, 0))  # (B, S) L_j, exclusive (L_0 = 0)
    log_q = excl + torch.logcumsumexp(log_prev - excl, dim=1)  # (B, S)
    return torch.exp(log_p.to(acc) + log_q).to(log_p.dtype)  # (B, S)


def _monotonic_hard(p: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """First j at or after the previously attended position with p_j > 0.5, as a one-hot row."""
    B, S = p.shape
    positions = torch.arange(S, device=p.device)  # (S,)
    start = previous.argmax(dim=1)  # (B,) the one-hot's position (mode, for a soft row)
    candidates = (p > 0.5) & (positions >= start[:, None])  # (B, S)
    first = candidates.to(torch.uint8).argmax(dim=1)  # (B,) index of the first True
    attends = candidates.any(dim=1) & (previous > 0).any(
        dim=1
    )  # (B,) an all-zero previous stays off
    one_hot = torch.nn.functional.one_hot(first, S).to(p.dtype)  # (B, S)
    return one_hot * attends[:, None].to(p.dtype)  # (B, S)


def monotonic_alignment(
    p: torch.Tensor,
    previous: torch.Tensor,
    mode: str = "parallel",
    log_p: torch.Tensor | None = None,
    log_1mp: torch.Tensor | None = None,
) -> torch.Tensor:
    """Raffel et al. (2017) monotonic alignment for one output step.

    Args:
        p: (B, S) selection probabilities p_ij (0 at padded positions).
        previous: (B, S) the previous step's alignment a_{i-1} (one-hot at 0 for the first step).
        mode: ``"parallel"`` (expected alignment, closed form in log space: the training path),
            ``"recursive"`` (the same quantity by a Python loop over j: the slow reference), or
            ``"hard"`` (test time: attend to the first j at/after the previous position with
            p_ij > 0.5; nowhere if there is none or if ``previous`` is all zero).
        log_p, log_1mp: optional exact log(p) and log(1 - p) (for p = sigmoid(e):
            ``-softplus(-e)`` and ``-softplus(e)``). Computed from ``p`` when omitted, see
            :func:`_logs_from_p`. Only the soft modes read them.
    Returns:
        a_i: (B, S). Soft modes: the expected alignment, summing to at most 1 (the rest of the
        mass ran off the end). Hard mode: one-hot rows or all-zero rows.
    """
    if mode not in MONOTONIC_MODES:
        raise ValueError(
            f"unknown monotonic mode {mode!r}; valid modes: {', '.join(MONOTONIC_MODES)}"
        )
    if mode == "hard":
        return _monotonic_hard(p, previous)
    if log_p is None or log_1mp is None:
        from_p = _logs_from_p(p)
        log_p = from_p[0] if log_p is None else log_p
        log_1mp = from_p[1] if log_1mp is None else log_1mp
    if mode == "recursive":
        return _monotonic_recursive(p, previous, torch.exp(log_1mp))
    return _monotonic_parallel(log_p, log_1mp, previous)
