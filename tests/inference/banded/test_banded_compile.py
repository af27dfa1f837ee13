"""Banded's blocked path runs its steps as ``lax.scan``s (issue 11: the first hJ+Banded(8)
training step at T=256 compiled for minutes while the 64 steps were unrolled).

* The traced program does not grow with the number of steps: the jaxpr of the blocked path,
  and of its gradient, has as many equations at n = 80 as at n = 40 (causal and not).
* Values and gradients of the scanned path against the per-spin sweep: test_banded.py,
  test_blocked_path_matches_sweep (cases where every causal scan group spans several steps).
"""

import jax
import jax.numpy as jnp
import pytest

from isingattn.inference.banded.band import block_len, CAUSAL_GROUPS
from isingattn.inference.banded.blocked import blocked_solve, blocked_layout


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
    layout = blocked_layout(h.shape, J.shape, w, causal, None, False)
    assert layout is not None  # the blocked path applies

    def f(h, J):
        mean, log_z, _ = blocked_solve(h, J, 1.0, w, causal, layout)
        return jnp.sum(mean) + jnp.sum(log_z)

    fwd = _count_eqns(jax.make_jaxpr(f)(h, J).jaxpr)
    grad = _count_eqns(jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(h, J).jaxpr)
    return fwd, grad


@pytest.mark.parametrize("causal", [False, True])
def test_blocked_program_does_not_grow_with_steps(causal, banded_kernel):
    """n = 40 and n = 80 at w = 3 (4 spins per step: 10 and 20 steps, every causal group ≥ 2
    steps): the same number of traced equations, forward and gradient, for the XLA graph and for
    the native kernel (one call). Unrolled steps (the old code) would double them."""
    w = 3
    assert block_len(40, w)[1] == 4 and 40 // 4 >= 2 * CAUSAL_GROUPS
    assert _blocked_program_size(40, w, causal) == _blocked_program_size(80, w, causal)
