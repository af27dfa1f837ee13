"""Banded's blocked path runs its steps as ``lax.scan``s (issue 11: the first hJ+Banded(8)
training step at T=256 compiled for minutes while the 64 steps were unrolled).

* The traced program does not grow with the number of steps: the jaxpr of the blocked path,
  and of its gradient, has as many equations at n = 80 as at n = 40 (causal and not).
* Values and gradients equal the per-spin sweep (``path="sweep"``, itself tested against the
  float64 brute force in test_banded.py) where every causal scan group spans several steps
  and n is not a multiple of the step, float64.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel
from isingattn.inference import Banded
from isingattn.inference.exact import LOST_MASS_TOL
from isingattn.inference.banded_blocked import CAUSAL_GROUPS, _block_len, _blocked, _blocked_layout
from isingattn.testing import random_model

FAST_COMPILE = {"xla_backend_optimization_level": 0}


def banded_J(rng, n, w, scale):
    _, J = random_model(rng, n, J_scale=scale)
    d = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    return J * (d <= w)


def _count_eqns(jaxpr) -> int:
    """Equations of a jaxpr, counting those of every sub-jaxpr (scan, cond and pjit bodies) too."""
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += _count_eqns(inner)
    return total


def _blocked_program_size(n, w, causal):
    h = jnp.zeros((2, n, n) if causal else (3, n))
    J = jnp.zeros((1, n, n) if causal else (n, n))
    layout = _blocked_layout(h.shape, J.shape, w, causal, None, False)
    assert layout is not None  # the blocked path applies

    def f(h, J):
        mean, log_z, _ = _blocked(h, J, 1.0, w, causal, layout)
        return jnp.sum(mean) + jnp.sum(log_z)

    fwd = _count_eqns(jax.make_jaxpr(f)(h, J).jaxpr)
    grad = _count_eqns(jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(h, J).jaxpr)
    return fwd, grad


@pytest.mark.parametrize("causal", [False, True])
def test_blocked_program_does_not_grow_with_steps(causal):
    """n = 40 and n = 80 at w = 3 (4 spins per step: 10 and 20 steps, every causal group ≥ 2
    steps): the same number of traced equations, forward and gradient. Unrolled steps (the
    old code) would double them."""
    w = 3
    assert _block_len(40, w)[1] == 4 and 40 // 4 >= 2 * CAUSAL_GROUPS
    assert _blocked_program_size(40, w, causal) == _blocked_program_size(80, w, causal)


@pytest.mark.parametrize("n,w,causal", [(37, 3, True), (37, 3, False), (29, 6, True)])
def test_scanned_blocked_path_matches_sweep(n, w, causal):
    """Blocked (scan groups of several steps, a partial last step) vs the per-spin sweep:
    mean, log Z and the gradients of Σ c·mean + 0.1 Σ log Z in h and J, float64."""
    L, k = _block_len(n, w)
    assert -(-n // k) >= 2 * CAUSAL_GROUPS and n % k  # several steps per causal group, a partial last step
    rng = np.random.default_rng(n * w + causal)
    h = rng.normal(size=(2, n, n) if causal else (3, n)) * 1.5
    J = banded_J(rng, n, w, 0.9 / np.sqrt(w))
    J = J[None] if causal else J
    c = rng.normal(size=h.shape)

    @partial(jax.jit, static_argnames=("path",), compiler_options=FAST_COMPILE)
    def f(h, J, path):
        def obj(h, J):
            m = Banded(bandwidth=w, path=path).marginals(IsingModel(h, J, beta=0.9, causal=causal))
            return jnp.sum(c * m.mean) + 0.1 * jnp.sum(m.log_z), m
        return jax.value_and_grad(obj, argnums=(0, 1), has_aux=True)(h, J)

    (vb, mb), gb = f(jnp.asarray(h), jnp.asarray(J), "auto")
    (vs, ms), gs = f(jnp.asarray(h), jnp.asarray(J), "sweep")
    np.testing.assert_allclose(np.asarray(mb.mean), np.asarray(ms.mean), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(mb.log_z), np.asarray(ms.log_z), rtol=1e-13, atol=1e-11)
    for a, b in zip(gb, gs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-10)
    # the blocked path's own result (within its underflow bound), not the sweep it falls back to
    layout = _blocked_layout(h.shape, J.shape, w, causal, None, False)
    lost = jax.jit(lambda h, J: _blocked(h, J, 0.9, w, causal, layout)[2])(jnp.asarray(h), jnp.asarray(J))
    assert np.all(np.asarray(lost) <= np.log(LOST_MASS_TOL))
    if causal:  # masked entries are exactly 0
        assert np.all(np.asarray(mb.mean)[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0)
