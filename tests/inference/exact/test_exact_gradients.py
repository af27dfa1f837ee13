"""Gradients of the Exact engine against finite differences and the brute-force
covariances (fluctuation–dissipation), in forward and reverse mode, at ordinary and
extreme scales, masked and causal (split from tests/inference/exact/test_exact.py)."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.inference.exact import Exact
from isingattn.testing import brute_force
from isingattn.instances import random_model

from _exact_helpers import FAST_COMPILE, full_spins, solve, sym_from_upper  # noqa: E402


# ---- gradients ---------------------------------------------------------------------------

GN = 5  # gradient tests share one shape (h [2, GN], J [GN, GN], mask [2, GN]): one compile each


def grad_setup(rng, h_scale=1.0, J_scale=None):
    h0, J = random_model(rng, GN, h_scale=h_scale, J_scale=J_scale)
    h = np.stack([h0, rng.normal(size=GN) * h_scale])
    mask = np.ones((2, GN), bool)
    mask[1, 2] = False  # query 1 has a masked spin: its derivatives must vanish
    w = rng.normal(size=(2, GN))
    return h, J, mask, w


def objective(h, J, beta, mask, w):
    m = Exact().marginals(IsingModel(h, J, beta=beta, mask=mask))
    return jnp.sum(w * m.mean) + 0.1 * jnp.sum(m.log_z)


grad_objective = jax.jit(jax.grad(objective, argnums=(0, 1)), compiler_options=FAST_COMPILE)


def value_objective(h, J, beta, mask, w):
    m = solve(h, J, beta, mask)  # the same shapes as the stable-path checks: compiled once
    return np.sum(w * np.asarray(m.mean)) + 0.1 * np.sum(np.asarray(m.log_z))


def finite_differences(h, J, beta, mask, w, step):
    """Central differences of ``objective`` in every h entry and in every symmetric
    perturbation J_bc = J_cb (b < c)."""
    f = lambda h, J: float(value_objective(h, J, beta, mask, w))
    gh = np.zeros_like(h)
    for idx in np.ndindex(*h.shape):
        e = np.zeros_like(h)
        e[idx] = step
        gh[idx] = (f(h + e, J) - f(h - e, J)) / (2 * step)
    gJ = np.zeros((GN, GN))
    for b, c in zip(*np.triu_indices(GN, 1)):
        e = np.zeros((GN, GN))
        e[b, c] = e[c, b] = step
        gJ[b, c] = gJ[c, b] = (f(h, J + e) - f(h, J - e)) / (2 * step)
    return gh, gJ


def check_grad_vs_fd(h, J, beta, mask, w, step, rtol):
    gh, gJ = grad_objective(h, J, beta, mask, w)
    gh, gJ = np.asarray(gh), np.asarray(gJ)
    assert np.all(np.isfinite(gh)) and np.all(np.isfinite(gJ))
    fh, fJ = finite_differences(h, J, beta, mask, w, step)
    gJ_sym = gJ + gJ.T  # derivative along the symmetric direction E_bc + E_cb
    np.fill_diagonal(gJ_sym, 0.0)
    scale = 1.0 + np.abs(fh).max() + np.abs(fJ).max()
    np.testing.assert_allclose(gh, fh, rtol=0, atol=rtol * scale)
    np.testing.assert_allclose(gJ_sym, fJ, rtol=0, atol=rtol * scale)
    assert np.all(gh[~mask] == 0)
    return gh, gJ_sym


def test_grad_matches_finite_differences():
    rng = np.random.default_rng(500)
    h, J, mask, w = grad_setup(rng)
    for beta in (0.5, 2.0):
        # float64 central differences: truncation O(step²) + round-off O(1e-16 / step) ≈ 1e-10
        check_grad_vs_fd(h, J, beta, mask, w, step=1e-5, rtol=1e-7)


def test_grad_through_stable_path_at_extreme_scale():
    """|J| ~ 1e2 against |h| ~ 1: the fast path underflows and the log-space fallback runs;
    its gradient is finite and agrees with finite differences."""
    rng = np.random.default_rng(501)
    for h_scale, J_scale, beta in [(1.0, 1e3, 1.0), (1e-3, 1e3, 1.0), (1.0, 3e2, 2.0)]:
        h, J, mask, w = grad_setup(rng, h_scale, J_scale)
        m = solve(h, J, beta, mask)
        assert np.any(np.asarray(m.info["stable_path"])), (h_scale, J_scale, beta)
        # log Z ~ β|E| ~ 1e4 here, so the central-difference round-off is ~1e-16·1e4/step ≈ 1e-7
        # for step 1e-5; the marginals vary on the scale 1/(β n) in h (the large couplings
        # only select the ground states), so the truncation error is ~step²·(βn)³ ≈ 1e-8.
        check_grad_vs_fd(h, J, beta, mask, w, step=1e-5, rtol=1e-6)


@partial(jax.jit, compiler_options=FAST_COMPILE)
def fd_jacobians(h, x, beta, mask):
    """Jacobians of the marginals w.r.t. h [Q, n] (reverse mode) and the strict upper
    triangle x of J (forward mode; J = J^T moves with it)."""

    def mean(h, x):
        return Exact().marginals(IsingModel(h, sym_from_upper(x, GN), beta=beta, mask=mask)).mean

    return jax.jacrev(mean, argnums=0)(h, x), jax.jacfwd(mean, argnums=1)(h, x)  # [Q,n,Q,n], [Q,n,P]


@pytest.mark.parametrize("beta", [0.7, 1.6])
def test_fluctuation_dissipation_identities(beta):
    """d<s_a>/dh_b = β Cov(s_a, s_b) and, for J_bc = J_cb moved together,
    d<s_a>/dJ_bc = β Cov(s_a, s_b s_c), with Cov from the brute-force distribution."""
    rng = np.random.default_rng(502)
    h, J, mask, _ = grad_setup(rng, h_scale=1.0, J_scale=0.8)
    iu = np.triu_indices(GN, 1)
    x = J[iu]
    dm_dh, dm_dx = (np.asarray(a) for a in fd_jacobians(h, x, beta, mask))
    for q in range(2):
        r = brute_force(h[q], J, beta, mask[q])
        S, p = full_spins(r, GN), r["probs"]
        mean = p @ S
        cov_h = np.einsum("c,ca,cb->ab", p, S, S) - np.outer(mean, mean)
        ss = S[:, iu[0]] * S[:, iu[1]]  # s_b s_c for each pair b < c
        cov_J = np.einsum("c,ca,cp->ap", p, S, ss) - np.outer(mean, p @ ss)
        np.testing.assert_allclose(dm_dh[q, :, q, :], beta * cov_h, rtol=0, atol=1e-10)
        np.testing.assert_allclose(dm_dh[q, :, 1 - q, :], 0.0, rtol=0, atol=1e-12)  # queries are independent
        np.testing.assert_allclose(dm_dx[q], beta * cov_J, rtol=0, atol=1e-10)


def test_fluctuation_dissipation_at_extreme_scale():
    """The same identity through the log-space path (h ~ 1e-3 against J ~ 1e3)."""
    rng = np.random.default_rng(503)
    h, J, mask, _ = grad_setup(rng, h_scale=1e-3, J_scale=1e3)
    beta = 1.0
    assert np.any(np.asarray(solve(h, J, beta, mask).info["stable_path"]))
    x = J[np.triu_indices(GN, 1)]
    jac = np.asarray(fd_jacobians(h, x, beta, mask)[0])
    for q in range(2):
        r = brute_force(h[q], J, beta, mask[q])
        S, p = full_spins(r, GN), r["probs"]
        mean = p @ S
        cov = np.einsum("c,ca,cb->ab", p, S, S) - np.outer(mean, mean)
        # derivatives are O(β); float64 round-off of energies O(1e4) is ~1e-12 in the log-weights
        np.testing.assert_allclose(jac[q, :, q, :], beta * cov, rtol=0, atol=1e-8)


@partial(jax.jit, compiler_options=FAST_COMPILE)
def rev_jacobians(h, x, beta, mask):
    """Reverse-mode Jacobians of the marginals and log Z w.r.t. the strict upper triangle
    x of J (J = J^T moves with it): the transposed JVP rule of the engine's enumeration."""

    def out(x):
        m = Exact().marginals(IsingModel(h, sym_from_upper(x, GN), beta=beta, mask=mask))
        return m.mean, m.log_z

    return jax.jacrev(out)(x)  # [Q, n, P], [Q, P]


@pytest.mark.parametrize("h_scale,J_scale,beta,atol", [(1.0, 0.8, 0.7, 1e-10), (1e-3, 1e3, 1.0, 1e-8)])
def test_reverse_mode_J_gradient_is_the_triple_covariance(h_scale, J_scale, beta, atol):
    """Reverse mode w.r.t. J (what training uses): d<s_a>/dJ_bc = β Cov(s_a, s_b s_c) and
    d log Z/dJ_bc = β <s_b s_c> against the brute force, on the fast path and (J ~ 1e3)
    through the log-space fallback, whose transpose is written by hand."""
    rng = np.random.default_rng(504)
    h, J, mask, _ = grad_setup(rng, h_scale=h_scale, J_scale=J_scale)
    iu = np.triu_indices(GN, 1)
    stable = np.asarray(solve(h, J, beta, mask).info["stable_path"])
    assert np.any(stable) == (J_scale > 1), stable
    dm_dx, dz_dx = (np.asarray(a) for a in rev_jacobians(h, J[iu], beta, mask))
    for q in range(2):
        r = brute_force(h[q], J, beta, mask[q])
        S, p = full_spins(r, GN), r["probs"]
        ss = S[:, iu[0]] * S[:, iu[1]]
        cov_J = np.einsum("c,ca,cp->ap", p, S, ss) - np.outer(p @ S, p @ ss)
        np.testing.assert_allclose(dm_dx[q], beta * cov_J, rtol=0, atol=atol)
        np.testing.assert_allclose(dz_dx[q], beta * (p @ ss), rtol=0, atol=atol * (1 + J_scale))


def causal_objective(h, J, beta, mask, w):
    m = Exact().marginals(IsingModel(h, J, beta=beta, mask=mask, causal=True))
    return jnp.sum(w * m.mean) + 0.1 * jnp.sum(m.log_z)


causal_grad = jax.jit(jax.grad(causal_objective, argnums=(0, 1)), compiler_options=FAST_COMPILE)


def test_causal_gradient_matches_brute_force_covariances():
    """The training configuration: causal prefixes (solved in buckets, shorter prefixes
    pinned), one J shared by the batch, a padding mask. The gradient of
    Σ w·m + 0.1 Σ log Z w.r.t. h and J equals the brute-force covariance sums
    β Σ_q [Cov_q(w_q·s, s) + 0.1 m_q] and ½β Σ_q [Cov_q(w_q·s, s sᵀ) + 0.1 <s sᵀ>_q]."""
    rng = np.random.default_rng(505)
    B, T = 2, 7  # buckets (7), (6), (4, 5), (1..3)
    h = rng.normal(size=(B, T, T)) * 1.5
    _, J = random_model(rng, T, J_scale=0.8)
    pad = np.ones((B, 1, T), bool)
    pad[1, 0, 5:] = False
    w = rng.normal(size=(B, T, T))
    for beta in (0.6, 1.8):
        gh, gJ = (np.array(a) for a in causal_grad(h, J, beta, pad, w))
        eh, eJ = np.zeros_like(h), np.zeros((T, T))
        for b in range(B):
            for i in range(T):
                L = i + 1
                r = brute_force(h[b, i, :L], J[:L, :L], beta, pad[b, 0, :L])
                S, p = full_spins(r, L), r["probs"]
                m = p @ S
                f = S @ w[b, i, :L] - w[b, i, :L] @ m + 0.1  # centred objective weight per configuration
                eh[b, i, :L] = beta * ((p * f) @ S)
                eJ[:L, :L] += 0.5 * beta * np.einsum("c,ca,cb->ab", p * f, S, S)
        np.fill_diagonal(eJ, 0.0)
        np.fill_diagonal(gJ, 0.0)  # J's diagonal is not a parameter (the energy ignores it)
        np.testing.assert_allclose(gh, eh, rtol=0, atol=1e-10)
        np.testing.assert_allclose(gJ, eJ, rtol=0, atol=1e-10)


def test_reverse_mode_keeps_no_query_by_configuration_buffers():
    """The backward pass of Q queries over 2^n configurations needs O(2^n + Q 2^(n/2))
    memory, not O(Q 2^n): the compiled gradient's scratch memory stays far below one
    [Q, 2^n] float32 array (a deterministic check of XLA's buffer assignment, no timing)."""
    n, Q = 16, 64  # [Q, 2^n] float32: 16 MiB; the kernel: 256 KiB
    rng = np.random.default_rng(506)
    h = jnp.asarray(rng.normal(size=(Q, n)), jnp.float32)
    J = jnp.asarray(random_model(rng, n, J_scale=0.5)[1], jnp.float32)

    def loss(h, J):
        return jnp.sum(Exact().marginals(IsingModel(h, J)).mean ** 2)

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1)), compiler_options=FAST_COMPILE).lower(h, J).compile()
    mem = compiled.memory_analysis()
    if mem is None:
        pytest.skip("this backend reports no memory analysis")
    assert mem.temp_size_in_bytes < Q * 2**n * 4 / 4, mem.temp_size_in_bytes  # was 19.8 MB before the JVP rule; now 2.7 MB
