"""Shared by tests/inference/exact/test_exact.py and tests/inference/exact/test_exact_gradients.py: one jitted Exact call
(fast LLVM compile: only the pass pipeline changes, XLA keeps fast-math off) and the
float64 brute-force reference helpers."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import IsingModel
from isingattn.inference.exact import Exact
from isingattn.testing import brute_force_batch

F64_TOL = 1e-9
BETAS = (0.5, 1.0, 2.0)


FAST_COMPILE = {"xla_backend_optimization_level": 0}


@partial(jax.jit, static_argnames=("corr", "causal"), compiler_options=FAST_COMPILE)
def _solve(h, J, beta, mask, corr, causal):
    return Exact(corr=corr).marginals(IsingModel(h, J, beta=beta, mask=mask, causal=causal))


def solve(h, J, beta, mask=None, *, corr=False, causal=False):
    """Exact marginals of IsingModel(h, J, beta, mask, causal), built and solved in one
    compiled call (validation included); β is passed as an array so that changing it does
    not recompile."""
    h = jnp.asarray(h)
    mask = None if mask is None else jnp.asarray(mask)
    return _solve(h, jnp.asarray(J), jnp.asarray(beta, h.dtype), mask, corr=corr, causal=causal)


# ---- reference helpers ------------------------------------------------------------------


reference = brute_force_batch


def full_spins(r, n):
    """brute_force's configuration table with inactive spins as 0 columns: [2^m, n]."""
    S = np.zeros((r["spins"].shape[0], n))
    S[:, np.flatnonzero(r["active"])] = r["spins"]
    return S


def assert_close(actual, desired, atol, what):
    """|actual - desired| <= atol elementwise (atol broadcasts against the output)."""
    actual = np.asarray(actual, np.float64)
    assert np.all(np.isfinite(actual)), f"{what}: non-finite output"
    err = np.abs(actual - desired)
    bad = err > atol
    assert not np.any(bad), f"{what}: error {np.max(err[bad]):.3g} > tolerance at {np.argwhere(bad)[:3].tolist()}"


def sym_from_upper(x, n):
    """Symmetric zero-diagonal [n, n] from the n(n-1)/2 strict upper-triangle entries."""
    iu = np.triu_indices(n, 1)
    U = jnp.zeros((n, n), x.dtype).at[iu].set(x)
    return U + U.T
