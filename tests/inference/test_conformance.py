"""The engine contract, checked on every registered engine (``inference.available()``), in
the manner of numpyro's kernel suite and dimod's ``load_sampler_bqm_tests``: registering
an engine is enough to have it tested here.

Agreement with ``Exact`` (float64 brute force is tested against Exact in test_exact.py):
exact engines (``engine.exact``) to float tolerance; mean-field engines within the bounds
stated in ``MEANFIELD_BOUNDS``; samplers (``engine.needs_key``) within 4 Monte Carlo
standard errors, the MCSE from an ESS that THIS file computes with
``numpyro.diagnostics.effective_sample_size`` on the returned samples (never the engine's
own ESS). The model is small (n = 5) and weakly coupled (β·max|E| ≈ 1.3), where every
engine, DQA included (a fast anneal is Boltzmann only for β·max|E| ≲ 1, module docstring
of inference/dqa.py), is meant to work.
"""

import dataclasses
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _once import once
from numpyro.diagnostics import effective_sample_size

from isingattn import IsingInputError, IsingModel, IsingTypeError, boltzmann_attention, inference
from isingattn.engine import from_spec, to_spec
from isingattn.marginals import Marginals
from isingattn.inference.exact import Exact

N, Q, BETA = 5, 3, 0.5

# Small, fast settings. An engine not listed runs with its defaults.
FAST = {
    "banded": dict(bandwidth=N - 1),  # any J on N spins, 2^(N-1) states (the default 8 compiles 2^8)
    "gibbs": dict(num_warmup=50, num_samples=500, num_chains=4),
    "sqa": dict(num_sweeps=40, trotter=4, num_reads=512, thermal_sweeps=40),
    "dqa": dict(num_shots=2048, calibration_steps=1, kl_max_n=0),
    "dimod": dict(num_reads=512, num_sweeps=40),
    "ais": dict(num_chains=512, num_temps=16),
    "pt": dict(num_warmup=100, num_samples=500, num_chains=4, num_replicas=4),
    "swendsen-wang": dict(num_warmup=20, num_samples=500, num_chains=4),
    "pa": dict(num_replicas=128, num_populations=4, moves="gibbs", min_families=8),  # Gibbs: the same draws dense and sparse
    **{name: dict(tol=1e-12, max_iter=2000) for name in inference.available() if name.startswith("meanfield")},
}


# Engines for zero-field models only: the models here have fields, which they refuse by design
# (their own tests check them against brute force: tests/inference/planar).
ZERO_FIELD_ONLY = ("planar",)


def _distinct_engines() -> list[str]:
    """One entry per engine: a registered name that builds the same engine as an earlier one
    (``meanfield`` is ``meanfield-bp`` with the default method) is not run twice."""
    seen, names = [], []
    for name in sorted(set(inference.available()) - set(ZERO_FIELD_ONLY), key=lambda n: (len(n), n), reverse=True):  # aliases with the method first
        eng = inference.get(name, **FAST.get(name, {}))
        if not any(eng == other for other in seen):
            seen.append(eng)
            names.append(name)
    return sorted(names)


NAMES = _distinct_engines()


def names(slow=()):
    """NAMES, the engines in ``slow`` marked slow: their case of this property runs in the full
    suite only, while the quick loop (``-m "not slow"``) keeps the others' fast cases."""
    return [pytest.param(n, marks=pytest.mark.slow) if n in slow else n for n in NAMES]


SAMPLERS_SLOW = ("gibbs", "sqa", "dqa", "ais", "pt", "swendsen-wang", "pa")

# Mean-field error bounds (means and gradients) on the models below, β·max|J| = 0.2: BP is
# exact on trees (the chain); naive mean field errs at O((βJ)²) and TAP at O((βJ)³)
# (module docstring of inference/meanfield.py), stated here with constant 1. Measured
# (means, h-gradient, J-gradient, attention): naive 0.014, 0.019, 0.034, 0.005 against
# 0.04; TAP 6.8e-4, 9.6e-4, 3.4e-3, 5.9e-4 against 8e-3; BP ≤ 6e-13 on the tree's entries.
BETA_J = BETA * 0.4
MEANFIELD_BOUNDS = {"bp": 1e-9, "naive": BETA_J**2, "tap": BETA_J**3}


def engine(name):
    return inference.get(name, **FAST.get(name, {}))


def _chain_J(rng, n, scale):
    """Open-chain couplings (a tree: BP is exact there), plus nothing else. Ferromagnetic, so
    that every engine takes them (Swendsen–Wang refuses J < 0); the fields have both signs.
    The sign draw is kept so that the draws after it are the same as before."""
    J = np.zeros((n, n))
    rng.choice([-1.0, 1.0], n - 1)
    c = scale * rng.uniform(0.5, 1.0, n - 1)
    J[np.arange(n - 1), np.arange(1, n)] = c
    return J + J.T


def _model(dtype=np.float64, causal=False, mask=None, shared=True, beta=BETA):
    rng = np.random.default_rng(0)
    h = rng.normal(0, 0.6, (N if causal else Q, N))
    J = _chain_J(rng, N, 0.4)
    if not shared:
        J = np.broadcast_to(J, h.shape[:-1] + (N, N))
    return IsingModel(h.astype(dtype), J.astype(dtype), beta, mask, causal=causal)


def _key(i=0):
    return jax.random.key(i)


def _call(eng, model, key=0):
    return eng.marginals(model, key=_key(key) if eng.needs_key else None)


def _chains(eng, samples):
    """Samples ``[..., S, n]`` as ``[..., C, S/C, n]`` chains: Gibbs' are chain-major, other
    samplers' reads are independent (one chain; its ESS is then ≈ S), as are AIS's final
    states (one draw per chain)."""
    C = getattr(eng, "num_chains", 1)
    C = C if samples.shape[-2] // C >= 2 else 1
    return samples.reshape(samples.shape[:-2] + (C, samples.shape[-2] // C, samples.shape[-1]))


def _mcse(eng, samples, x):
    """MCSE of the mean over draws of the per-draw statistic ``x [..., S, k]`` (same draws as
    ``samples``), with numpyro's ESS. A constant statistic gets one draw's resolution."""
    xc = _chains(eng, samples if x is None else x)
    lead = xc.shape[:-3]
    flat = xc.reshape((-1,) + xc.shape[-3:])  # [M, C, D, k]
    se = np.empty(flat.shape[:1] + flat.shape[-1:])
    for m in range(flat.shape[0]):
        y = np.asarray(flat[m], np.float64)
        var = y.reshape(-1, y.shape[-1]).var(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            ess = np.asarray(effective_sample_size(y))
        ess = np.where(np.isfinite(ess) & (ess > 0), np.minimum(ess, y.shape[0] * y.shape[1]), 1.0)
        se[m] = np.sqrt(var / ess)
    S = xc.shape[-3] * xc.shape[-2]
    return np.maximum(se.reshape(lead + xc.shape[-1:]), 1.0 / S)


def _kind(eng):
    if eng.exact:
        return "exact"
    if eng.needs_key:
        return "sampler"
    return "meanfield"


def _bound(eng):
    kind = _kind(eng)
    if kind == "meanfield":
        method = getattr(eng, "method", None)
        assert method in MEANFIELD_BOUNDS, f"state the error bound of {eng!r} in MEANFIELD_BOUNDS"
        return MEANFIELD_BOUNDS[method]
    return 1e-9 if kind == "exact" else None


@pytest.fixture(scope="module")
def exact_ref():
    return np.asarray(Exact().marginals(_model()).mean)


# ---- structure -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_shape_and_masked_spins(name):
    eng = engine(name)
    mask = np.ones((Q, N), bool)
    mask[0, 1] = mask[2, 4] = mask[1, 0] = False
    out = _call(eng, _model(mask=jnp.asarray(mask)))
    assert out.mean.shape == (Q, N)
    assert np.all(np.asarray(out.mean)[~mask] == 0)


@pytest.mark.parametrize("name", names(slow=SAMPLERS_SLOW))
def test_causal_equals_the_masked_lower_triangle(name):
    eng = engine(name)
    model = _model(causal=True)
    causal = _call(eng, model)
    tri = jnp.asarray(np.tril(np.ones((N, N), bool)))
    # an independent key (keys 0 and 1 put SQA's two estimates 4.06 combined MCSE apart at one of
    # 25 entries; over 24 keys its estimates of this model show no bias, |z| ≤ 1.6, and binomial spread)
    masked = _call(eng, IsingModel(model.h, model.J, BETA, tri), key=2)
    a, b = np.asarray(causal.mean), np.asarray(masked.mean)
    assert a.shape == (N, N) and np.all(a[~np.tril(np.ones((N, N), bool))] == 0)
    if _kind(eng) == "sampler":  # two independent estimates: 4 combined MCSE
        se = np.hypot(_mcse(eng, np.asarray(causal.samples), None), _mcse(eng, np.asarray(masked.samples), None))
        assert np.all(np.abs(a - b) <= 4 * se)
    else:  # the same fixed point or sum, solved on fewer spins
        np.testing.assert_allclose(a, b, atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_shared_J_equals_broadcast_J(name):
    eng = engine(name)
    a = np.asarray(_call(eng, _model(shared=True)).mean)
    b = np.asarray(_call(eng, _model(shared=False)).mean)
    np.testing.assert_allclose(a, b, atol=1e-9)  # samplers: same key, same draws


@pytest.mark.parametrize("name", NAMES)
def test_sparse_couplings_equal_dense(name):
    """The same model with J as an edge list (isingattn.sparse) gives the dense form's
    result: to float tolerance, and for samplers the same draws for the same key."""
    eng = engine(name)
    mask = np.ones((Q, N), bool)
    mask[1, 2] = False
    dense = _model(mask=jnp.asarray(mask))
    sparse = dense.sparsified()
    assert sparse.is_sparse and sparse.J.graph.E == N - 1  # the chain's edges only
    # a sampler with a sparse path sweeps by colour classes there: on the dense form, the same classes
    dense_eng = dataclasses.replace(eng, schedule="colored") if eng.sparse_native and hasattr(eng, "schedule") else eng
    got, ref = _call(eng, sparse), _call(dense_eng, dense)
    if name == "swendsen-wang":
        # Known difference: its bond draws are laid out by matrix entry (dense) or by edge
        # (sparse), so the same key gives other clusters; the two agree within 4 MCSE each.
        se = np.hypot(_mcse(eng, got.samples, None), _mcse(eng, ref.samples, None))
        assert np.all(np.abs(np.asarray(got.mean) - np.asarray(ref.mean)) <= 4 * se)
        return
    np.testing.assert_allclose(np.asarray(got.mean), np.asarray(ref.mean), atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_jit_equals_eager(name):
    eng = engine(name)
    model = _model()
    key = _key(0) if eng.needs_key else None
    eager = eng.marginals(model, key=key).mean
    jitted = jax.jit(lambda m, k: eng.marginals(m, key=k).mean)(model, key)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", NAMES)
def test_dtype_is_kept(name, dtype):
    out = _call(engine(name), _model(dtype=dtype))
    assert out.mean.dtype == dtype
    if out.samples is not None:
        assert out.samples.dtype == dtype


@pytest.mark.parametrize("name", NAMES)
def test_keys(name):
    eng = engine(name)
    model = _model()
    if not eng.needs_key:  # deterministic: a key changes nothing
        np.testing.assert_array_equal(np.asarray(eng.marginals(model).mean),
                                      np.asarray(eng.marginals(model, key=_key(3)).mean))
        return
    with pytest.raises(IsingInputError, match="key"):
        eng.marginals(model)
    a, b, c = (np.asarray(_call(eng, model, k).samples) for k in (0, 0, 1))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("name", NAMES)
def test_model_type_is_checked(name):
    eng = engine(name)
    with pytest.raises(IsingTypeError, match="IsingModel"):
        eng.marginals({"h": np.zeros(3)}, key=_key())


@pytest.mark.parametrize("name", NAMES)
def test_spec_round_trip(name):
    eng = engine(name)
    try:
        spec = to_spec(eng)
    except ValueError as e:  # documented: a configuration holding an object (DimodEngine's sampler)
        assert "not plain JSON" in str(e) and name == "dimod", e
        return
    assert from_spec(spec) == eng


# ---- values against Exact ---------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_marginals_agree_with_exact(name, exact_ref):
    eng = engine(name)
    out = _call(eng, _model(), key=5)
    err = np.abs(np.asarray(out.mean) - exact_ref)
    if _kind(eng) == "sampler":
        se = _mcse(eng, np.asarray(out.samples), None)
        assert np.all(err <= 4 * se), (err.max(), se[np.unravel_index(err.argmax(), err.shape)])
    else:
        assert err.max() <= _bound(eng), err.max()


def _grad_se(eng, samples, g, beta, causal_J: bool):
    """MCSE of the fluctuation-dissipation gradient estimates of ``L = Σ_q g_q·⟨s⟩_q``:
    ``∂L/∂h_qb = β Cov_q(g_q·s, s_b)`` and ``∂L/∂J_bc = Σ_q ½β Cov_q(g_q·s, s_b s_c)``
    (J shared by the queries), from per-draw products and numpyro's ESS."""
    s = np.asarray(samples, np.float64)  # [Q, S, n]
    y = np.einsum("qn,qsn->qs", g, s)
    yc = (y - y.mean(-1, keepdims=True))[..., None]
    se_h = beta * _mcse(eng, samples, yc * (s - s.mean(-2, keepdims=True)))
    ss = (s[..., :, None] * s[..., None, :]).reshape(s.shape[:-1] + (-1,))
    se_q = 0.5 * beta * _mcse(eng, samples, yc * (ss - ss.mean(-2, keepdims=True)))  # [Q, n*n]
    se_J = np.sqrt((se_q**2).sum(0)).reshape(s.shape[-1], s.shape[-1])
    return se_h, se_J


def _compare_grads(eng, got, ref, se=None, which_J=None):
    for k, (a, b) in enumerate(zip(got, ref)):
        a, b = np.asarray(a), np.asarray(b)
        sel = slice(None) if (k == 0 or which_J is None) else which_J
        err = np.abs(a - b)[sel]
        if se is not None:
            assert np.all(err <= 4 * se[k][sel]), (k, err.max())
        else:
            assert err.max() <= _bound(eng), (k, err.max())


def _chain_entries(n=N):
    d = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    return d == 1


@pytest.mark.parametrize("name", names(slow=("dqa", "ais", "banded", "junction-tree")))
def test_gradients_agree_with_exact(name):
    eng = engine(name)
    model = _model()
    w = jnp.asarray(np.random.default_rng(1).normal(size=(Q, N)))
    key = _key(7) if eng.needs_key else None

    def grads(e, k):
        f = lambda h, J: jnp.sum(w * e.marginals(IsingModel(h, J, BETA), key=k).mean)
        return jax.grad(f, argnums=(0, 1))(model.h, model.J)

    ref = once(("exact-grad",), lambda: grads(Exact(), None))
    got = grads(eng, key)
    # BP's derivative in a coupling that is zero (off the chain) is its estimate of switching
    # that coupling on, not the exact one (module docstring): compare on the chain's entries.
    on_tree = _chain_entries() if getattr(eng, "method", None) == "bp" else None
    se = None
    if _kind(eng) == "sampler":
        samples = _call(eng, model, key=7).samples
        se = _grad_se(eng, samples, np.asarray(w), BETA, False)
    _compare_grads(eng, got, ref, se, on_tree)


class _Given:
    """An engine that returns given means (to get the attention's cotangent at them)."""

    def __init__(self, mean):
        self.mean = mean

    def marginals(self, model, *, key=None):
        return Marginals(mean=self.mean)


@pytest.mark.parametrize("name", names(slow=SAMPLERS_SLOW + ("dimod", "banded", "junction-tree")))
def test_gradients_through_boltzmann_attention_agree_with_exact(name):
    """``∂L/∂J`` of a causal attention layer. The sampler's MCSE is that of the fluctuation
    estimate for the cotangent ``g = ∂L/∂⟨s⟩`` taken at the exact marginals. T = 4 keys: three
    causal buckets, one of two queries (``causal_buckets``), one compiled program fewer than T = 5."""
    eng, T = engine(name), 4
    rng = np.random.default_rng(2)
    q, k, v = (jnp.asarray(rng.normal(0, 0.8, (1, T, 3))) for _ in range(3))
    J = jnp.asarray(_chain_J(rng, T, 0.4))[None]
    c = jnp.asarray(rng.normal(size=(1, T, 3)))
    key = _key(9) if eng.needs_key else None

    def loss(J, e, kk):
        return jnp.sum(c * boltzmann_attention(q, k, v, J, engine=e, beta=BETA, key=kk)[0])

    ref = once(("exact-attention",), lambda: jax.grad(loss)(J, Exact(), None))
    got = jax.grad(loss)(J, eng, key)
    on_tree = _chain_entries(T) if getattr(eng, "method", None) == "bp" else None
    se = None
    if _kind(eng) == "sampler":
        from isingattn.attention import attention_fields

        model = IsingModel(attention_fields(q, k), J[..., None, :, :], BETA, causal=True)
        m = Exact().marginals(model).mean
        g = jax.grad(lambda mm: loss(J, _Given(mm), None))(m)[0]  # [T, T]
        samples = eng.marginals(model, key=key).samples[0]
        se = (None, _grad_se(eng, samples, np.asarray(g), BETA, True)[1][None])
    if se is not None:
        err = np.abs(np.asarray(got) - np.asarray(ref))
        assert np.all(err <= 4 * se[1]), err.max()
    else:
        err = np.abs(np.asarray(got) - np.asarray(ref))
        err = err[0][on_tree] if on_tree is not None else err
        assert err.max() <= _bound(eng), err.max()
