"""Maximum-pseudo-likelihood temperatures of Ising samples, a general estimator (used
by :mod:`isingattn.inference.dqa.engine` to calibrate and to report the effective β).

:func:`pseudo_likelihood_beta` fits ``p(s_i | s_-i) = σ(2 s_i (β_h h_i + β_J Σ_j J_ij s_j))``
to samples or to a weighted table of configurations: a convex 2-parameter logistic
problem, solved by damped Newton, with sandwich standard errors for iid samples.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from isingattn.errors import IsingInputError

__all__ = ["PLFit", "pseudo_likelihood_beta"]

_MAX_HALVINGS = 40  # backtracking of the pseudo-likelihood Newton steps (step ≥ 2^-40 of Newton's)


class PLFit(NamedTuple):
    """Maximum-pseudo-likelihood temperatures; each field has the batch shape.

    ``beta_h``/``beta_J``: NaN where the data carry no information on them (e.g. ``h = 0``).
    ``se_h``/``se_J``: sandwich standard errors for iid samples (NaN for weighted fits).
    """

    beta_h: jax.Array
    beta_J: jax.Array
    se_h: jax.Array
    se_J: jax.Array
    grad_norm: jax.Array
    converged: jax.Array


def pseudo_likelihood_beta(h, J, spins, weights=None, *, init=None, max_iter: int = 30, chunk: int = 2**22) -> PLFit:
    """Fit ``β_h, β_J`` of ``p(s) ∝ exp(β_h h·s + β_J Σ_{j<k} J_jk s_j s_k)`` to spins.

    Maximizes ``Σ_s w_s Σ_i log σ(2 s_i (β_h h_i + β_J Σ_j J_ij s_j))`` (convex in β) by
    Newton steps, halved until the loss decreases (a damped Newton that cannot increase
    the loss), from ``init`` or ``β = 0``, whichever has the lower loss (default ``β = 0``),
    until the Newton decrement is below ``max(1e-10, 10 eps)·n`` (the loss resolution) or
    ``max_iter``; ``converged`` says whether it got there.

    Args:
        h: ``[..., n]``; J: ``[..., n, n]``; spins: ``[..., S, n]`` (±1); batch axes broadcast.
        weights: optional ``[..., S]`` probabilities (e.g. ``|ψ|²`` over ``spin_table``); the
            default is iid samples with weight ``1/S``, which also gives standard errors
            (sandwich ``H⁻¹ (Σ_s u_s u_sᵀ) H⁻¹`` of the per-sample scores ``u_s``).
        init: optional starting point ``(β_h, β_J)``, ``[..., 2]`` (e.g. the target β).
        chunk: models are fitted in groups of about ``chunk / (S n)`` to bound the memory
            of the ``[S, n]`` features.

    Returns :class:`PLFit` with the batch shape.
    """
    h, J, spins = jnp.asarray(h), jnp.asarray(J), jnp.asarray(spins)
    dt = jnp.result_type(h.dtype, J.dtype, spins.dtype)
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    n, S = spins.shape[-1], spins.shape[-2]
    if h.shape[-1] != n or J.shape[-2:] != (n, n):
        raise IsingInputError(f"expected h [..., {n}], J [..., {n}, {n}] for spins [..., S, {n}]; got h {h.shape}, J {J.shape}.")
    batch = jnp.broadcast_shapes(h.shape[:-1], J.shape[:-2], spins.shape[:-2],
                                 () if weights is None else jnp.shape(weights)[:-1])
    B = math.prod(batch)
    flat = lambda x, tail: jnp.broadcast_to(x, batch + x.shape[x.ndim - tail:]).reshape((B,) + x.shape[x.ndim - tail:])
    args = (flat(h.astype(dt), 1), flat(J.astype(dt), 2), flat(spins.astype(dt), 2))
    w = jnp.full((S,), 1.0 / S, dt) if weights is None else jnp.asarray(weights).astype(dt)
    b0 = jnp.zeros((2,), dt) if init is None else jnp.asarray(init).astype(dt)
    args = args + (flat(w, 1), flat(b0, 1))
    fn = lambda a: _pl_single(*a, weighted=weights is not None, max_iter=max_iter)
    out = jax.lax.map(fn, args, batch_size=max(1, min(B, chunk // max(1, S * n))))
    return PLFit(*(o.reshape(batch) for o in out))


def _pl_single(h, J, spins, w, b0, *, weighted: bool, max_iter: int):
    """One model: h [n], J [n, n], spins [S, n], w [S], starting point b0 [2].

    Written with the two features as separate [S, n] arrays and elementwise reductions
    (XLA fuses each evaluation into one pass; a 4-operand einsum over a stacked [S, n, 2]
    feature array was far slower on CPU)."""
    dt = h.dtype
    S, n = spins.shape
    xh = spins * h  # s_i h_i, [S, n]
    xJ = spins * (spins @ J)  # s_i (J s)_i
    w = w[:, None]
    eye = jnp.eye(2, dtype=dt)

    def loss(b):
        return jnp.sum(w * jax.nn.softplus(-2 * (b[0] * xh + b[1] * xJ)))

    # Parameters the data say nothing about (a zero feature) stay at 0 and are reported NaN.
    info0 = jnp.stack([jnp.sum(w * xh * xh), jnp.sum(w * xJ * xJ)])
    ident = info0 > 1e-12 * jnp.max(info0) + jnp.finfo(dt).tiny
    keep = ident[:, None] & ident[None, :]
    ridge = jnp.where(ident, 0.0, 1.0) + 1e-12 * jnp.max(info0)

    def grad_hess(b):
        r = jax.nn.sigmoid(-2 * (b[0] * xh + b[1] * xJ))  # 1 - p(observed s_i | rest), [S, n]
        wr, q = w * r, w * r * (1 - r)
        g = -2 * jnp.stack([jnp.sum(wr * xh), jnp.sum(wr * xJ)])
        hhJ = jnp.sum(q * xh * xJ)
        H = 4 * jnp.stack([jnp.stack([jnp.sum(q * xh * xh), hhJ]), jnp.stack([hhJ, jnp.sum(q * xJ * xJ)])])
        return jnp.where(ident, g, 0.0), jnp.where(keep, H, 0.0) + ridge * eye

    # The loss is a sum of n terms of O(1): below ~10 eps·n its decrease is rounding noise.
    tol = max(1e-10, 10 * float(jnp.finfo(dt).eps)) * n
    def body(c):
        b, lb, _, it = c
        g, H = grad_hess(b)
        d = -jnp.linalg.solve(H, g)
        dec = -g @ d  # Newton decrement², ≈ 2 (loss - min)

        # Backtracking: halve the step until the loss decreases (usually the full step does).
        def halve(c2):
            t, _, k = c2
            return t / 2, loss(b + (t / 2) * d), k + 1

        t, lt, _ = jax.lax.while_loop(lambda c2: (c2[1] >= lb) & (c2[2] < _MAX_HALVINGS), halve,
                                      (jnp.asarray(1.0, dt), loss(b + d), 0))
        ok = lt < lb
        return jnp.where(ok, b + t * d, b), jnp.where(ok, lt, lb), jnp.where(ok, dec, 0.0), it + 1

    def cond(c):
        _, _, dec, it = c
        return (it < max_iter) & (dec > tol)

    # Start from init or from β = 0, whichever fits better: far from the data (e.g. the
    # target β of an anneal that did not reach it, with large fields) the logistic terms
    # saturate, the Hessian vanishes and Newton steps overshoot by orders of magnitude.
    b0 = jnp.where(ident, b0, 0.0)
    l0, lz = loss(b0), loss(jnp.zeros_like(b0))
    b0, l0 = jnp.where(lz < l0, 0.0, b0), jnp.minimum(lz, l0)
    b, _, _, _ = jax.lax.while_loop(cond, body, (b0, l0, jnp.asarray(jnp.inf, dt), 0))
    g, H = grad_hess(b)
    Hinv = jnp.linalg.inv(H)
    dec = g @ Hinv @ g
    converged = dec <= tol
    if not weighted:
        r = 2 * jax.nn.sigmoid(-2 * (b[0] * xh + b[1] * xJ))
        score = jnp.stack([jnp.sum(r * xh, -1), jnp.sum(r * xJ, -1)], -1)  # per-sample score, [S, 2]
        score = score - score.mean(0)
        cov = Hinv @ (score.T @ score / S) @ Hinv / S
        se = jnp.sqrt(jnp.clip(jnp.diagonal(cov), 0.0))
    else:
        se = jnp.full((2,), jnp.nan, dt)
    nan = jnp.asarray(jnp.nan, dt)
    b, se = jnp.where(ident, b, nan), jnp.where(ident, se, nan)
    return b[0], b[1], se[0], se[1], jnp.sqrt(jnp.abs(dec)), converged
