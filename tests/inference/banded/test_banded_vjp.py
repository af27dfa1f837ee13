"""The hand-written VJPs of Banded's blocked path, the XLA graph (inference/banded_vjp.py) and the native
CPU kernel (inference/native.cc), each test once per implementation (the ``banded_kernel``
fixture), against independent references: the per-spin sweep (``Banded(path="sweep")``, autodiff through its scans) for values and
gradients, and float64 central differences of the blocked path itself.

Covered: causal prefixes (every query's own model, the k offset classes, several scan groups and the
doubled group count of long chains), batch axes along which J varies and along which it is shared,
the window layouts L = 2k (w = 6, 8) and L = k (w = 3), n not a multiple of the block, several chunks
of rows (with padding rows), β, log Z's cotangent, and a batch where one model takes the sweep fallback.
Per-query masks never take the blocked path (``blocked_layout``); test_banded.py covers them.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _once import key_of, once

from isingattn import IsingModel
from isingattn.inference.banded import Banded, plan as banded_plan, vjp as banded_vjp
from isingattn.inference.banded.blocked import blocked_solve, blocked_layout
from isingattn.inference.exact.engine import LOST_MASS_TOL
from isingattn.instances import random_model

FAST_COMPILE = {"xla_backend_optimization_level": 0}


def banded_J(rng, n, w, scale):
    _, J = random_model(rng, n, J_scale=scale)
    d = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    return J * (d <= w)


@partial(jax.jit, static_argnames=("w", "causal", "path"), compiler_options=FAST_COMPILE)
def value_and_grads(h, J, beta, c, *, w, causal, path):
    """Σ c·mean + 0.1 Σ log Z and its gradient in (h, J, β), with the marginals and the fallback flags."""
    def obj(h, J, beta):
        m = Banded(bandwidth=w, path=path).marginals(IsingModel(h, J, beta=beta, causal=causal))
        return jnp.sum(c * m.mean) + 0.1 * jnp.sum(m.log_z), m

    return jax.value_and_grad(obj, argnums=(0, 1, 2), has_aux=True)(h, J, beta)


def case(seed, n, w, causal, h_shape, J_shape, h_scale=1.5):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=h_shape) * h_scale
    J = np.broadcast_to(banded_J(rng, n, w, 0.9 / np.sqrt(w)), J_shape).copy()
    J = J * (1 + 0.3 * rng.normal(size=J_shape[:-2] + (1, 1)))  # different J along J's batch axes
    c = rng.normal(size=h_shape)
    return jnp.asarray(h), jnp.asarray(J), jnp.asarray(1.1), jnp.asarray(c)


def compare(h, J, beta, c, w, causal):
    """The blocked path (with its VJP) against autodiff of the sweep: values to 1e-12, gradients to 1e-10."""
    (vb, mb), gb = value_and_grads(h, J, beta, c, w=w, causal=causal, path="auto")
    # the sweep does not depend on the kernel under test: computed once for both
    (vs, ms), gs = once(key_of("sweep", h, J, beta, c, w, causal),
                        lambda: value_and_grads(h, J, beta, c, w=w, causal=causal, path="sweep"))
    assert not np.any(np.asarray(mb.info["stable_path"]))  # the blocked path's own result, no fallback
    np.testing.assert_allclose(mb.mean, ms.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mb.log_z, ms.log_z, rtol=1e-13, atol=1e-12)
    for name, a, b in zip(("h", "J", "beta"), gb, gs):
        scale = 1.0 + float(np.abs(b).max())
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * scale, err_msg=f"gradient in {name}")
    return gb


# causal: queries first; J varies along the head axis (G = 2) and is shared along the batch and the queries
CASES = [
    pytest.param(2, 11, 3, True, (3, 11, 11), (1, 11, 11), id="causal-w3"),  # L = k
    pytest.param(4, 17, 6, False, (3, 2, 17), (2, 17, 17), id="plain-w6-J-per-column"),  # k = 3; J varies along the last axis
]


@pytest.mark.parametrize("seed,n,w,causal,h_shape,J_shape", CASES)
def test_blocked_vjp_matches_autodiff_of_the_sweep(seed, n, w, causal, h_shape, J_shape, banded_kernel):
    """Values and gradients (h, J, β) of Σ c·mean + 0.1 Σ log Z: the blocked path with its hand-written VJP
    equals autodiff through the per-spin sweep, float64, for causal prefixes and batch axes."""
    compare(*case(seed, n, w, causal, h_shape, J_shape), w, causal)


def test_several_chunks_and_groups(monkeypatch, banded_kernel):
    """Causal, w = 8 (L = 2k), n not a multiple of k, J varying along the heads (G = 2) and shared along the
    sequences and queries, the rows in chunks of one sequence, and many causal scan groups (LONG_CHAIN lowered
    to reach the doubled group count: 10 steps in 5 groups of one pair each)."""
    monkeypatch.setattr(banded_vjp, "CHUNK_BYTES", 1)  # one sequence per chunk
    monkeypatch.setattr(banded_plan, "LONG_CHAIN", 8)
    assert len(banded_plan.Plan(8, 4, 10, 2, 4, 10, 1, True).groups) == 5  # min(2 * CAUSAL_GROUPS, pairs)
    compare(*case(6, 33, 8, True, (3, 2, 33, 33), (2, 1, 33, 33)), 8, True)


def test_blocked_vjp_matches_finite_differences(banded_kernel):
    """Directional derivatives of the blocked path's Σ c·mean + 0.1 Σ log Z along random directions in h,
    in J (symmetric, inside the band) and in β equal float64 central differences of the same path."""
    n, w = 15, 8
    h, J, beta, c = case(7, n, w, True, (2, n, n), (1, n, n))
    (_, _), (gh, gJ, gb) = value_and_grads(h, J, beta, c, w=w, causal=True, path="auto")
    rng = np.random.default_rng(70)
    band = (np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= w) & ~np.eye(n, dtype=bool)
    dh = jnp.asarray(rng.normal(size=h.shape))
    dJ = rng.normal(size=(n, n)) * band
    dJ = jnp.asarray((dJ + dJ.T)[None])
    f = lambda e, dh, dJ, db: float(value_and_grads(h + e * dh, J + e * dJ, beta + e * db, c, w=w, causal=True,
                                                    path="auto")[0][0])
    step = 1e-5
    for d_h, d_J, d_b, want in [(dh, 0 * dJ, 0.0, np.sum(gh * dh)), (0 * dh, dJ, 0.0, np.sum(gJ * dJ)),
                                (0 * dh, 0 * dJ, 1.0, gb)]:
        fd = (f(step, d_h, d_J, d_b) - f(-step, d_h, d_J, d_b)) / (2 * step)
        np.testing.assert_allclose(float(want), fd, rtol=1e-7, atol=1e-8)


def test_gradient_with_a_fallback_model_float32(banded_kernel):
    """float32, a batch in which the queries of one sequence fail the blocked path's underflow bound
    (|h| ~ 1e2 and |J| ~ 1e1 competing: their messages underflow) and take the sweep: every model's values
    and gradients equal the sweep's (its own VJP for the failing models, the blocked path's for the others)."""
    n, w = 12, 8
    h, J, beta, c = case(8, n, w, True, (3, n, n), (3, 1, n, n))
    h, J = h.at[1].multiply(100.0), J.at[1].multiply(30.0)
    h, J, beta, c = (x.astype(jnp.float32) for x in (h, J, beta, c))
    lost = np.asarray(blocked_solve(h, J, beta, w, True, blocked_layout(h.shape, J.shape, w, True, None, False))[2])
    fail = lost > np.log(LOST_MASS_TOL)
    assert fail[1].any() and not fail[0].any() and not fail[2].any()
    (vb, mb), gb = value_and_grads(h, J, beta, c, w=w, causal=True, path="auto")
    (vs, ms), gs = once(key_of("sweep", h, J, beta, c, w, True),
                        lambda: value_and_grads(h, J, beta, c, w=w, causal=True, path="sweep"))
    np.testing.assert_allclose(mb.mean, ms.mean, rtol=0, atol=2e-5)
    for a, b in zip(gb, gs):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * (1 + float(np.abs(b).max())))
