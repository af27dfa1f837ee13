"""J parametrizations of the Transformer's attention: full, toeplitz, banded (DESIGN.md §2)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.inference.banded import Banded
from isingattn.models import Config, Transformer
from isingattn.models.train import masked_xent


def _cfg(**kw):
    base = dict(vocab_size=5, seq_len=12, n_out=12, d_model=8, n_heads=2)
    base.update(kw)
    return Config(**base)


def _randomized(m, seed=0):
    A = jnp.asarray(np.random.default_rng(seed).normal(size=m.attn.J_raw.shape))
    return eqx.tree_at(lambda t: t.attn.J_raw, m, A)


def _dist(T):
    return np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])


@pytest.mark.parametrize("kw", [dict(J_param="toeplitz"), dict(J_param="toeplitz", J_band=3),
                                dict(J_param="banded", J_band=3)])
def test_structure_zero_init_symmetry_band(kw):
    m = Transformer(_cfg(**kw), key=jax.random.PRNGKey(0))
    np.testing.assert_array_equal(m.attn.couplings(), 0.0)
    m = _randomized(m)
    for T in (12, 7):
        J = np.asarray(m.attn.couplings(T))
        d = _dist(T)
        assert J.shape == (2, T, T)
        np.testing.assert_array_equal(J, np.swapaxes(J, -1, -2))
        np.testing.assert_array_equal(J[:, d == 0], 0.0)
        band = kw.get("J_band")
        if band is not None:
            np.testing.assert_array_equal(J[:, d > band], 0.0)
            assert np.all(J[:, (d >= 1) & (d <= band)] != 0)
        if kw["J_param"] == "toeplitz":  # a function of distance only, w[d] = J_raw[d]
            for dist in range(1, T if band is None else band + 1):
                sel = J[:, d == dist]
                np.testing.assert_array_equal(sel, np.broadcast_to(np.asarray(m.attn.J_raw)[:, dist, None], sel.shape))
    if kw["J_param"] == "banded":  # free parameters: J_{t, t-d} = J_raw[d-1, t]
        A = np.asarray(m.attn.J_raw)
        assert A.shape == (2, 3, 12)
        J = np.asarray(m.attn.couplings())
        np.testing.assert_array_equal(J[:, 5, 3], A[:, 1, 5])
        np.testing.assert_array_equal(J[:, 3, 5], A[:, 1, 5])


@pytest.mark.parametrize("kw", [dict(J_param="toeplitz", J_band=3), dict(J_param="banded", J_band=3)])
def test_gradients_reach_J_through_banded_engine(kw):
    """Training signal reaches every free J parameter inside the band (and no other)."""
    cfg = _cfg(engine=Banded(bandwidth=3), **kw)
    m = _randomized(Transformer(cfg, key=jax.random.PRNGKey(1)), seed=2)
    rng = np.random.default_rng(3)
    toks, tgt = jnp.asarray(rng.integers(0, 5, (3, 12))), jnp.asarray(rng.integers(0, 12, (3, 12)))
    g = eqx.filter_grad(lambda m: masked_xent(m(toks), tgt)[0])(m)
    gA = np.asarray(g.attn.J_raw)
    assert np.all(np.isfinite(gA))
    if kw["J_param"] == "toeplitz":
        assert np.all(gA[:, 0] == 0) and np.all(gA[:, 1:] != 0)
    else:  # J_raw[d-1, t] with t - d < 0 lies outside the matrix
        t, d = np.arange(12)[None, :], np.arange(1, 4)[:, None]
        assert np.all(gA[:, t - d < 0] == 0) and np.all(gA[:, t - d >= 0] != 0)


def test_bad_configs():
    with pytest.raises(ValueError, match="J_param must be one of"):
        _cfg(J_param="circulant")
    with pytest.raises(ValueError, match="needs J_band"):
        _cfg(J_param="banded")
    with pytest.raises(ValueError, match="a \"full\" J has no band"):
        _cfg(J_band=4)
    with pytest.raises(ValueError, match="positive integer"):
        _cfg(J_param="banded", J_band=0)
    with pytest.raises(ValueError, match=r"up to distance 3.*J_band ≤ 3"):
        _cfg(engine=Banded(bandwidth=3))  # full J at T=12 reaches distance 11
    with pytest.raises(ValueError, match="up to distance 3"):
        _cfg(engine=Banded(bandwidth=3), J_param="banded", J_band=5)
    _cfg(engine=Banded(bandwidth=3), variant="softmax")  # no J: any engine goes
