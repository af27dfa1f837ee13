"""The Banded (transfer-matrix) engine against independent references: the float64
brute force ``isingattn.testing.brute_force`` (n ≤ 16), ``Exact`` for gradients, finite
differences, and dwave-samplers' ``TreeDecompositionSampler`` at large n (T = 128–256).

As in test_exact.py, the engine runs through a jitted wrapper compiled with XLA's
backend optimization level 0, and each test batches its cases into few shapes.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _once import key_of, once

from isingattn import IsingModel, boltzmann_attention, inference
from isingattn.errors import IsingInputError
from isingattn.inference.banded import Banded
from isingattn.inference.exact import Exact
from isingattn.testing import brute_force, brute_force_batch
from isingattn.instances import random_model

F64_TOL = 1e-9
BETAS = (0.5, 1.0, 2.0)
FAST_COMPILE = {"xla_backend_optimization_level": 0}


@partial(jax.jit, static_argnames=("w", "corr", "causal"), compiler_options=FAST_COMPILE)
def _solve(h, J, beta, mask, w, corr, causal):
    return Banded(bandwidth=w, corr=corr).marginals(IsingModel(h, J, beta=beta, mask=mask, causal=causal))


def solve(h, J, beta, mask=None, *, w, corr=False, causal=False):
    h = jnp.asarray(h)
    mask = None if mask is None else jnp.asarray(mask)
    return _solve(h, jnp.asarray(J), jnp.asarray(beta, h.dtype), mask, w=w, corr=corr, causal=causal)


def banded_J(rng, n, w, scale=1.0):
    """Symmetric zero-diagonal J with N(0, scale²) entries up to distance w, 0 beyond."""
    _, J = random_model(rng, n, J_scale=scale)
    d = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    return J * (d <= w)


reference = brute_force_batch


def assert_close(actual, desired, atol, what):
    actual = np.asarray(actual, np.float64)
    assert np.all(np.isfinite(actual)), f"{what}: non-finite output"
    err = np.abs(actual - desired)
    assert np.all(err <= atol), f"{what}: error {np.max(err - atol):.3g} above tolerance at {np.argwhere(err > atol)[:3].tolist()}"


def query_masks(rng, batch, n):
    """Random per-query masks plus: all active, one active, none active."""
    mask = rng.random(batch + (n,)) < 0.6
    flat = mask.reshape(-1, n)
    flat[0] = True
    flat[1] = False
    flat[1, rng.integers(n)] = True
    if n > 1 and len(flat) > 2:
        flat[2] = False
    return flat.reshape(mask.shape)


# ---- against brute force ------------------------------------------------------------------


@pytest.mark.parametrize("n,w,corr", [(1, 1, True), (7, 2, True), (12, 3, False), (16, 5, False), (6, 8, False)])
def test_matches_brute_force_masked_batch(n, w, corr):
    """h [2, 4, n] with J [2, 1, n, n] (one J per row, shared by 4 queries), per-query masks;
    (6, 8) has bandwidth ≥ n, i.e. a dense J."""
    rng = np.random.default_rng(10 * n + w)
    h = rng.normal(size=(2, 4, n)) * 1.5
    J = np.stack([banded_J(rng, n, w, 1.2 / np.sqrt(w)) for _ in range(2)])[:, None]
    mask = query_masks(rng, (2, 4), n)
    for beta in BETAS:
        m = solve(h, J, beta, mask, w=w, corr=corr)
        ref = reference(h, J, beta, mask)
        assert m.mean.shape == (2, 4, n) and m.log_z.shape == (2, 4) and m.mean.dtype == jnp.float64
        assert_close(m.mean, ref["mean"], F64_TOL, f"mean n={n} w={w} beta={beta}")
        assert_close(m.log_z, ref["log_z"], F64_TOL * (1 + np.abs(ref["log_z"])), f"log_z n={n} w={w} beta={beta}")
        if corr:
            assert_close(m.corr, ref["corr"], F64_TOL, f"corr n={n} w={w} beta={beta}")
        else:
            assert m.corr is None
        assert not np.any(np.asarray(m.info["stable_path"]))  # benign scales take the fast path


def test_causal_with_padding_mask_matches_prefix_brute_force():
    """Query i sees spins 0..i, and a per-sequence padding mask removes more (as in attention)."""
    rng = np.random.default_rng(3)
    n, w = 11, 3
    h = rng.normal(size=(2, n, n)) * 2
    J = np.stack([banded_J(rng, n, w, 0.8) for _ in range(2)])[:, None]  # [2, 1, n, n]
    pad = np.ones((2, 1, n), bool)
    pad[1, 0, -3:] = False  # sequence 1 is padded at the end
    pad[1, 0, 4] = False
    tri = np.tril(np.ones((n, n), bool))
    for beta in BETAS:
        m = solve(h, J, beta, pad, w=w, causal=True)
        ref = reference(h, J, beta, tri & pad)
        assert_close(m.mean, ref["mean"], F64_TOL, f"causal mean beta={beta}")
        assert_close(m.log_z, ref["log_z"], F64_TOL * (1 + np.abs(ref["log_z"])), f"causal log_z beta={beta}")
        assert np.all(np.asarray(m.mean)[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0)


# ---- extreme scales ------------------------------------------------------------------------


def tolerances(dtype, beta, h, J, n_steps):
    """Rounding bound for one model in ``dtype`` against the float64 brute force of the same
    (rounded) inputs. Every log-weight -βE(s) is a sum of the terms β h_j s_j and
    β J_jk s_j s_k; the sweep adds them over ``n_steps`` steps, each of which rounds the
    running log-message (log space) or the rescaled message (scaled path) once more, so a
    configuration's log-weight is off by at most
        δ = (8 + 2 n_steps)·eps·β·(Σ_j |h_j| + Σ_{j<k} |J_jk|).
    That moves log Z by at most δ and the expectation of s_j by at most e^{2δ} - 1; the
    floor covers the O(1) final reductions."""
    eps = np.finfo(dtype).eps
    floor = 1e-5 if dtype == np.float32 else F64_TOL
    delta = (8 + 2 * n_steps) * eps * beta * (np.abs(np.asarray(h, np.float64)).sum() + np.abs(np.asarray(J, np.float64)).sum() / 2)
    return floor + np.expm1(2 * delta), floor + delta


EXTREME = [(1e3, 1e2), (1e-3, 1e2), (30.0, 30.0), (1e3, 1e-3), (1e2, 1e2), (3.0, 10.0)]
BENIGN = [(1.0, 0.5), (1e-3, 1e-3)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_extreme_scales_finite_and_accurate(dtype):
    """|h| and |J| up to 1e3, competing: finite and within the rounding bound; the
    log-space fallback runs for some extreme models and never for benign ones."""
    rng = np.random.default_rng(300)
    n, w = 10, 3
    cases = EXTREME + BENIGN
    h = np.stack([rng.normal(size=n) * a for a, _ in cases]).astype(dtype)
    J = np.stack([banded_J(rng, n, w, b) for _, b in cases]).astype(dtype)
    stable = {}
    for beta in BETAS:
        m = solve(h, J, beta, w=w)
        assert m.mean.dtype == dtype and m.log_z.dtype == dtype
        ref = reference(h, J, beta)
        for c, case in enumerate(cases):
            t_mean, t_logz = tolerances(dtype, beta, h[c], J[c], n)
            what = f"{case} beta={beta} {np.dtype(dtype).name}"
            assert_close(m.mean[c], ref["mean"][c], t_mean, "mean " + what)
            assert_close(m.log_z[c], ref["log_z"][c], t_logz, "log_z " + what)
            stable[case, beta] = bool(m.info["stable_path"][c])
    assert any(stable[c, b] for c in EXTREME for b in BETAS), stable
    assert not any(stable[c, b] for c in BENIGN for b in BETAS), stable


# ---- gradients ------------------------------------------------------------------------------


def objective(engine, h, J, beta, mask, c):
    m = engine.marginals(IsingModel(h, J, beta=beta, mask=mask))
    return jnp.sum(c * m.mean) + 0.1 * jnp.sum(m.log_z)


@partial(jax.jit, static_argnames=("engine",), compiler_options=FAST_COMPILE)
def value_and_grads(engine, h, J, beta, mask, c):
    return jax.value_and_grad(objective, argnums=(1, 2))(engine, h, J, beta, mask, c)


@pytest.mark.parametrize("h_scale,J_scale,fallback", [(1.0, 0.7, False), (1e3, 1e2, True)])
def test_grad_matches_exact_and_finite_differences(h_scale, J_scale, fallback):
    """d/dh and d/dJ of Σ c·mean + 0.1 Σ log Z, float64: equal to Exact's autodiff
    gradient, and to central differences (along symmetric J perturbations inside the band)."""
    rng = np.random.default_rng(7)
    n, w, beta = 8, 2, 1.3
    h = rng.normal(size=(3, n)) * h_scale
    J = banded_J(rng, n, w, J_scale)
    mask = query_masks(rng, (3,), n)
    c = rng.normal(size=(3, n))
    args = (jnp.asarray(beta), jnp.asarray(mask), jnp.asarray(c))
    (val, (gh, gJ)) = value_and_grads(Banded(bandwidth=w), jnp.asarray(h), jnp.asarray(J), *args)
    (val_e, (gh_e, gJ_e)) = value_and_grads(Exact(), jnp.asarray(h), jnp.asarray(J), *args)
    m = solve(h, J, beta, mask, w=w)
    assert bool(np.any(np.asarray(m.info["stable_path"]))) == fallback
    scale = 1.0 + np.abs(gh_e).max() + np.abs(gJ_e).max()
    np.testing.assert_allclose(val, val_e, rtol=1e-12)
    np.testing.assert_allclose(gh, gh_e, rtol=0, atol=1e-9 * scale)
    # J beyond the band (and its diagonal) is structurally zero for Banded: gradient 0 there
    band = (np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= w) & ~np.eye(n, dtype=bool)
    np.testing.assert_allclose(np.where(band, gJ_e, 0.0), gJ, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(gJ, np.swapaxes(gJ, -1, -2), rtol=0, atol=1e-12 * scale)
    if fallback:
        return  # at |h| ~ 1e3 the objective's finite differences are all round-off
    f = lambda h, J: float(value_and_grads(Banded(bandwidth=w), jnp.asarray(h), jnp.asarray(J), *args)[0])
    step = 1e-5
    for idx in [(0, 0), (1, 3), (2, n - 1)]:
        e = np.zeros_like(h)
        e[idx] = step
        np.testing.assert_allclose(gh[idx], (f(h + e, J) - f(h - e, J)) / (2 * step), rtol=0, atol=1e-7 * scale)
    for b, d in [(0, 1), (3, 5), (n - 2, n - 1)]:
        e = np.zeros((n, n))
        e[b, d] = e[d, b] = step
        np.testing.assert_allclose(2 * gJ[b, d], (f(h, J + e) - f(h, J - e)) / (2 * step), rtol=0, atol=1e-7 * scale)


def _attention_case(T=10, w=3, d=4, seed=11):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(2, T, d))) for _ in range(3))
    J = jnp.asarray(banded_J(rng, T, w, 0.5))

    def loss(J, q, engine):
        out, weights = boltzmann_attention(q, k, v, J, variant="hJ", engine=engine, causal=True)
        return jnp.sum(out**2), weights

    return q, k, J, w, jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True), static_argnums=2,
                               compiler_options=FAST_COMPILE)


def test_attention_with_banded_engine():
    """Causal hJ attention through Banded: weights from the brute-force prefix marginals, and
    the gradient along random directions in J (inside the band) and q equals central differences."""
    q, k, J, w, g = _attention_case()
    T = J.shape[-1]
    ((val, weights), (gJ, gq)) = g(J, q, Banded(bandwidth=w))
    h = np.einsum("bid,bjd->bij", q, k) / 2.0  # sqrt(d_k) = 2
    for b in range(2):
        for i in range(T):
            alpha = (1 + brute_force(h[b, i, : i + 1], J[: i + 1, : i + 1])["mean"]) / 2
            np.testing.assert_allclose(weights[b, i, : i + 1], alpha / alpha.sum(), rtol=0, atol=1e-12)
    rng = np.random.default_rng(0)
    band = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :]) <= w
    dJ = rng.normal(size=(T, T)) * band * (1 - np.eye(T))
    dJ, dq = jnp.asarray(dJ + dJ.T), jnp.asarray(rng.normal(size=q.shape))
    f = lambda e: float(g(J + e * dJ, q + e * dq, Banded(bandwidth=w))[0][0])
    step = 1e-5
    np.testing.assert_allclose(np.sum(gJ * dJ) + np.sum(gq * dq), (f(step) - f(-step)) / (2 * step), rtol=1e-7)


@pytest.mark.slow
def test_attention_with_banded_engine_matches_exact():
    """The same attention with Exact: same loss, same gradient (J's restricted to the band)."""
    q, k, J, w, g = _attention_case()
    T = J.shape[-1]
    ((lb, _), (gJb, gqb)), ((le, _), (gJe, gqe)) = g(J, q, Banded(bandwidth=w)), g(J, q, Exact())
    band = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :]) <= w
    np.testing.assert_allclose(lb, le, rtol=1e-12)
    np.testing.assert_allclose(gJb, np.where(band, gJe, 0.0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(gqb, gqe, rtol=0, atol=1e-10)


# ---- against dwave-samplers at large n ------------------------------------------------------


def tree_decomposition_marginals(h, J, beta):
    """m = 2 P(s=+1) - 1 and log Z from TreeDecompositionSampler (elimination along the chain)."""
    samplers = pytest.importorskip("dwave.samplers")
    n = len(h)
    bqm = IsingModel(h, J).to_bqm()  # linear = -h, quadratic = -J; β goes to the sampler
    ss = samplers.TreeDecompositionSampler().sample(bqm, beta=beta, marginals=True, num_reads=1,
                                                    elimination_order=list(range(n)))
    p_up = ss.info["variable_marginals"]
    return np.array([2 * p_up[j] - 1 for j in range(n)]), ss.info["log_partition_function"]


def _check_tree_decomposition(n, w, beta, seed):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(2, n)) * 1.5
    J = banded_J(rng, n, w, 1.0 / np.sqrt(w))
    m = solve(h, J, beta, w=w)
    for q in range(2):
        ref_m, ref_lz = tree_decomposition_marginals(h[q], J, beta)
        assert_close(m.mean[q], ref_m, 1e-9, f"mean n={n} w={w} query {q}")
        assert_close(m.log_z[q], ref_lz, 1e-9 * abs(ref_lz), f"log_z n={n} w={w} query {q}")


def test_matches_tree_decomposition_large_n():
    _check_tree_decomposition(n=128, w=5, beta=1.5, seed=21)


@pytest.mark.slow
def test_matches_tree_decomposition_T256_w8():
    _check_tree_decomposition(n=256, w=8, beta=0.7, seed=22)


# ---- input checks -----------------------------------------------------------------------------


def test_coupling_beyond_band_raises_and_says_how_to_fix():
    rng = np.random.default_rng(0)
    J = banded_J(rng, 9, 3)
    h = rng.normal(size=9)
    with pytest.raises(ValueError, match=r"distance 3.*Banded\(bandwidth=3\)"):
        Banded(bandwidth=2).marginals(IsingModel(h, J))
    # traced J: checked at run time, the result NaN (eagerly: "needs J_jk = 0"), no host callback
    f = jax.jit(lambda h, J: Banded(bandwidth=2).marginals(IsingModel(h, J)).mean)
    assert bool(jnp.all(jnp.isnan(f(h, J)))) and "callback" not in f.lower(h, J).as_text()
    np.testing.assert_allclose(Banded(bandwidth=3).marginals(IsingModel(h, J)).mean,
                               brute_force(h, J)["mean"], rtol=0, atol=F64_TOL)


@pytest.mark.parametrize("bad", [0, -1, 2.5, 21])
def test_bad_bandwidth_raises(bad):
    with pytest.raises(IsingInputError, match="bandwidth must be an integer"):
        Banded(bandwidth=bad)


def test_registry_and_float32():
    eng = inference.get("banded", bandwidth=2)
    assert isinstance(eng, Banded) and "banded" in inference.available()
    rng = np.random.default_rng(1)
    h = rng.normal(size=(3, 6)).astype(np.float32)
    J = banded_J(rng, 6, 2).astype(np.float32)
    m = eng.marginals(IsingModel(h, J))
    assert m.mean.dtype == jnp.float32 and m.log_z.dtype == jnp.float32
    ref = reference(h, J, 1.0)
    assert_close(m.mean, ref["mean"], 1e-5, "float32 mean")


# ---- the blocked path against the per-spin sweep -------------------------------------------------


# the last three: every causal scan group (CAUSAL_GROUPS) spans several steps and the last step is partial
@pytest.mark.parametrize("n,w,causal,beta,seed", [pytest.param(13, 8, True, 1.1, 21, marks=pytest.mark.slow),
                                                  pytest.param(17, 6, False, 1.1, 23, marks=pytest.mark.slow),
                                                  (11, 3, True, 1.1, 14), (37, 3, True, 0.9, 112),
                                                  (37, 3, False, 0.9, 111), (29, 6, True, 0.9, 175)])
def test_blocked_path_matches_sweep(n, w, causal, beta, seed, banded_kernel):
    """The blocked GEMM path (window L = 2k for w ≥ 6, n not a multiple of k; causal prefixes;
    its steps run as lax.scans) equals the per-spin sweep (path="sweep"), values and
    gradients, float64, and the result is the blocked path's own (within its underflow
    bound), not the sweep it falls back to."""
    from isingattn.inference.banded.band import block_len, CAUSAL_GROUPS
    from isingattn.inference.banded.blocked import blocked_solve, blocked_layout
    from isingattn.inference.exact.engine import LOST_MASS_TOL

    L, k = block_len(n, w)
    if n > 30:
        assert -(-n // k) >= 2 * CAUSAL_GROUPS and n % k  # several steps per causal group, a partial last step
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(2, n, n) if causal else (3, n)) * 1.5
    J = banded_J(rng, n, w, 0.9 / np.sqrt(w))
    J = J[None] if causal else J
    c = rng.normal(size=h.shape)

    @partial(jax.jit, static_argnames=("path",), compiler_options=FAST_COMPILE)
    def f(h, J, path):
        def obj(h, J):
            m = Banded(bandwidth=w, path=path).marginals(IsingModel(h, J, beta=beta, causal=causal))
            return jnp.sum(c * m.mean) + 0.1 * jnp.sum(m.log_z), m
        return jax.value_and_grad(obj, argnums=(0, 1), has_aux=True)(h, J)

    (vb, mb), gb = f(jnp.asarray(h), jnp.asarray(J), "auto")
    # the sweep does not depend on the kernel: computed once for both
    (vs, ms), gs = once(key_of("blocked-vs-sweep", n, w, causal, beta, seed),
                        lambda: f(jnp.asarray(h), jnp.asarray(J), "sweep"))
    assert_close(mb.mean, np.asarray(ms.mean), 1e-12, "mean")
    assert_close(mb.log_z, np.asarray(ms.log_z), 1e-11, "log_z")
    for a, b in zip(gb, gs):
        assert_close(a, np.asarray(b), 1e-10, "gradient")
    assert not np.any(np.asarray(mb.info["stable_path"]))
    layout = blocked_layout(h.shape, J.shape, w, causal, None, False)
    lost = jax.jit(lambda h, J: blocked_solve(h, J, beta, w, causal, layout)[2])(jnp.asarray(h), jnp.asarray(J))
    assert np.all(np.asarray(lost) <= np.log(LOST_MASS_TOL))
    if causal:  # masked entries are exactly 0
        iu = np.triu_indices(n, 1)
        assert np.all(np.asarray(mb.mean)[:, iu[0], iu[1]] == 0)
