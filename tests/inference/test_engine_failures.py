"""Engines never report success on failure, and refuse bad settings and bad keys clearly
(issue 10, section 2).

* MeanField solves float16/bfloat16 models in float32: the fixed point is the float64
  one up to the low dtype's rounding, not its start ``tanh(βh)``; ``converged`` is the
  residual of the fixed-point equations at the returned point, recomputed here in
  float64.
* Gibbs chains that never move (``|J| = 1e3``) are not converged, in any dtype.
* Every engine validates every setting at construction (one table).
* Every sampler takes every JAX key implementation (marginals within 5 Monte Carlo
  standard errors of Exact, the ESS computed here by numpyro's numpy estimator) and
  refuses non-keys with one clear error.
"""

import json
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size as np_ess
from numpyro.diagnostics import split_gelman_rubin as np_rhat

from isingattn import IsingModel
from isingattn.engine import from_spec, to_spec
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.inference.mcmc import Gibbs, SQA
from isingattn.inference.banded import Banded
from isingattn.inference.dimod import DimodEngine
from isingattn.inference.exact import Exact
from isingattn.inference.meanfield import MeanField
from isingattn.diagnostics import effective_sample_size, split_gelman_rubin
from isingattn.inference.meanfield.engine import EPS_FLOOR, MeanFieldConvergenceWarning
from isingattn.testing import brute_force

BAD = (IsingInputError, IsingTypeError)


def _model64(n=8, seed=0, h_scale=0.5):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=n) * h_scale
    J = rng.normal(size=(n, n)) / np.sqrt(n)
    J = (J + J.T) / 2
    np.fill_diagonal(J, 0)
    return h, J


# ---- 1. MeanField in low precision ------------------------------------------------------------


@pytest.mark.parametrize("method", ["naive", "tap", "bp"])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_meanfield_low_precision_iterates_to_the_fixed_point(method, dtype):
    h, J = _model64()
    # the float64 fixed point of the model as the low dtype stores it: what remains is
    # the rounding of the result to that dtype (half an ulp of |m| ≤ 1 < eps)
    hr, Jr = (np.asarray(jnp.asarray(x, dtype), np.float64) for x in (h, J))
    ref = MeanField(method=method).marginals(IsingModel(hr, Jr, 1.0))
    assert bool(ref.info["converged"])
    eps = float(jnp.finfo(dtype).eps)
    start = np.tanh(hr)
    assert np.max(np.abs(start - np.asarray(ref.mean))) > 20 * eps  # J matters at this scale

    out = MeanField(method=method).marginals(IsingModel(jnp.asarray(h, dtype), jnp.asarray(J, dtype), 1.0))
    m = np.asarray(out.mean, np.float64)
    assert out.mean.dtype == dtype and bool(out.info["converged"])
    np.testing.assert_allclose(m, ref.mean, rtol=0, atol=eps)
    assert np.max(np.abs(m - start)) > 20 * eps  # it left tanh(βh)
    # and it is as close to the exact marginals as float64 mean field is (up to eps)
    exact = brute_force(hr, Jr, 1.0)["mean"]
    assert np.max(np.abs(m - exact)) <= np.max(np.abs(np.asarray(ref.mean) - exact)) + eps
    # the implicit gradient too (d sum(m) / dh, of order 1): float64's up to the dtype's rounding
    grad = lambda hh, JJ: jax.grad(lambda x: MeanField(method=method).marginals(IsingModel(x, JJ, 1.0)).mean
                                   .astype(jnp.float32).sum())(hh)
    g = np.asarray(grad(jnp.asarray(h, dtype), jnp.asarray(J, dtype)), np.float64)
    np.testing.assert_allclose(g, grad(hr, Jr), rtol=0, atol=2 * eps)


def _naive_residual64(m, h, J, beta, tap):
    """``max |F(m) - m|`` of the naive/TAP map, in float64 at the returned point."""
    field = h + J @ m
    if tap:
        field = field - beta * m * ((J * J) @ (1 - m * m))
    return np.max(np.abs(np.tanh(beta * field) - m))


@pytest.mark.parametrize("method", ["naive", "tap", "bp"])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64])
@pytest.mark.parametrize("max_iter", [1, 3, 500])
def test_meanfield_converged_flag_is_the_residual_at_the_returned_point(method, dtype, max_iter):
    h, J = _model64()
    beta = 1.0
    hr, Jr = (np.asarray(jnp.asarray(x, dtype), np.float64) for x in (h, J))
    eng = MeanField(method=method, max_iter=max_iter, tol=1e-6)
    solve_dt = jnp.float32 if jnp.finfo(dtype).bits < 32 else dtype
    tol = max(1e-6, EPS_FLOOR * float(jnp.finfo(solve_dt).eps))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = eng.marginals(IsingModel(jnp.asarray(h, dtype), jnp.asarray(J, dtype), beta))
    conv, res = bool(out.info["converged"]), float(out.info["residual"])
    assert conv == (res <= tol)
    assert conv == (not any(issubclass(w.category, MeanFieldConvergenceWarning) for w in caught))
    m = np.asarray(out.mean, np.float64)
    if method != "bp":  # the state is the returned marginals: recompute its residual independently
        r64 = _naive_residual64(m, hr, Jr, beta, method == "tap")
        # rounding the result to the model's dtype moves F(m) - m by ≤ (1 + β Σ|J|) ulp/2
        slack = float(jnp.finfo(dtype).eps) * (1 + beta * np.abs(Jr).sum(1).max()) + 1e-12
        if conv:
            assert r64 <= tol + slack
        else:
            assert r64 > tol - slack
        if dtype == jnp.float64:
            np.testing.assert_allclose(res, r64, rtol=1e-9)
    if max_iter == 1:  # one damped step from tanh(βh) is nowhere near the fixed point
        assert not conv and res > 1e-2
    if max_iter == 500:
        assert conv


# ---- 2. Gibbs: frozen chains ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("num_chains", [1, 4])
def test_gibbs_frozen_chains_are_not_converged(dtype, num_chains):
    n = 4
    J = (1e3 * (1 - np.eye(n))).astype(dtype)  # every chain freezes in its first state
    h = np.zeros(n, dtype)
    eng = Gibbs(num_warmup=10, num_samples=50, num_chains=num_chains)
    # key 3: all 4 chains happen to freeze in the same state, so chains never disagree
    with pytest.warns(RuntimeWarning, match="frozen"):
        m = eng.marginals(IsingModel(h, J, 1.0), key=jax.random.PRNGKey(3))
    s = np.asarray(m.samples)
    assert np.all(s == s[0]) and np.all(np.asarray(m.info["flip_rate"]) == 0)  # the scenario
    exact = brute_force(h, J, 1.0)["mean"]  # 0 by symmetry; the chains report ±1
    assert np.max(np.abs(np.asarray(m.mean) - exact)) > 0.9
    assert not bool(m.info["converged"])
    assert np.all(np.asarray(m.info["frozen"]))
    assert np.all(np.isnan(np.asarray(m.info["r_hat"]))) and np.all(np.isnan(np.asarray(m.info["ess"])))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gibbs_spin_pinned_by_its_field_is_known_not_frozen(dtype):
    """A spin whose field outweighs all its couplings by far never flips, correctly:
    that is not a failure to mix (no false alarm), and masked spins stay known."""
    n = 5
    h, J = _model64(n, seed=2, h_scale=0.3)
    J = 0.3 * J
    h[0] = 1e3
    mask = np.array([True, True, True, True, False])
    model = IsingModel(h.astype(dtype), J.astype(dtype), 1.0, mask=mask)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = Gibbs(num_warmup=100, num_samples=1000, num_chains=4).marginals(model, key=jax.random.PRNGKey(0))
    assert not [w for w in caught if "Gibbs" in str(w.message)]
    assert bool(m.info["converged"]) and not np.any(np.asarray(m.info["frozen"]))
    r = np.asarray(m.info["r_hat"])
    assert r[0] == 1 and r[4] == 1
    ref = brute_force(h, J, 1.0, mask)["mean"]
    s = np.asarray(m.samples, np.float64).reshape(4, -1, n)  # chain-major
    ess = np_ess(s[..., 1:4])
    se = np.sqrt((1 - ref[1:4] ** 2) / ess)
    assert np.all(np.abs(np.asarray(m.mean, np.float64)[1:4] - ref[1:4]) < 5 * se)
    assert np.asarray(m.mean)[0] == 1 and np.asarray(m.mean)[4] == 0


def test_rhat_and_ess_of_an_unexplained_constant_are_nan_as_numpyro():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(size=(4, 100, 1)), np.ones((4, 100, 2))], axis=-1)
    known = np.array([False, False, True])
    rhat, ess = split_gelman_rubin(x, known), effective_sample_size(x, known)
    with np.errstate(invalid="ignore", divide="ignore"):
        ref_r, ref_e = np_rhat(x[..., :2]), np_ess(x[..., :2])
    np.testing.assert_allclose(rhat[0], ref_r[0], rtol=1e-10)
    np.testing.assert_allclose(ess[0], ref_e[0], rtol=1e-8)
    assert np.isnan(ref_r[1]) and np.isnan(rhat[1]) and np.isnan(ess[1])  # numpyro: 0/0 too
    assert rhat[2] == 1 and ess[2] == 400  # declared known (a masked spin)


# ---- 3. every setting of every engine is validated at construction ----------------------------

_COUNT = [0, -1, 2.5, True, "10", None, float("nan")]
_COUNT0 = [-1, 2.5, True, "10", None]
_POS = [0, -1.0, float("nan"), float("inf"), "1e-6", True, None]
_BOOL = ["yes", 1, None]

CASES = [  # (engine, setting, bad values)
    (Exact, "max_n", _COUNT), (Exact, "corr", _BOOL),
    (Banded, "bandwidth", [b for b in _COUNT if b is not None] + [21]),  # None: read from the model (Banded, "corr", _BOOL), (Banded, "path", ["fast", 3, None]),
    (MeanField, "method", ["loopy", 3, None]), (MeanField, "damping", [-0.1, 1.0, float("nan"), "0.5", True, None]),
    (MeanField, "max_iter", _COUNT), (MeanField, "tol", _POS), (MeanField, "corr", _BOOL),
    (Gibbs, "num_warmup", _COUNT0), (Gibbs, "num_samples", _COUNT), (Gibbs, "num_chains", _COUNT),
    (Gibbs, "thin", _COUNT), (Gibbs, "schedule", ["random", 3, None]),
    (Gibbs, "rhat_threshold", [1.0, 0.5, float("nan"), float("inf"), "1.05", True, None]),
    (Gibbs, "diagnostics", _BOOL), (Gibbs, "rao_blackwell", _BOOL),
    (Gibbs, "colors", ["x", [["a"]], [[0.5]], [[True, 1]], 3]),
    (SQA, "num_sweeps", _COUNT), (SQA, "trotter", _COUNT), (SQA, "num_reads", _COUNT),
    (SQA, "thermal_sweeps", _COUNT0), (SQA, "beta", [0, -1.0, float("nan"), float("inf"), "1.0", True]),
    (SQA, "mode", ["sample", 3, None]), (SQA, "global_moves", _BOOL), (SQA, "rao_blackwell", _BOOL),
    (SQA, "gamma_schedule", [("linear", "3", 0.1), ("linear", 3.0, True), ("cubic", 3.0, 0.1), 3.0, None]),
    (DimodEngine, "num_reads", _COUNT),
]
TABLE = [pytest.param(eng, name, bad, id=f"{eng.__name__}-{name}-{bad!r}") for eng, name, values in CASES for bad in values]


@pytest.mark.parametrize("engine, name, bad", TABLE)
def test_bad_setting_is_refused_naming_it(engine, name, bad):
    with pytest.raises(BAD, match=re.escape(name)):
        engine(**{name: bad})


@pytest.mark.parametrize("engine, kw", [
    (Exact, dict(max_n=np.int64(3), corr=np.bool_(True))), (Banded, dict(bandwidth=20, path="sweep")),
    (MeanField, dict(damping=0, max_iter=np.int32(1), tol=1)),
    (Gibbs, dict(num_warmup=0, num_samples=8, thin=2, rhat_threshold=1.01)),
    (Gibbs, dict(schedule="colored", colors=[np.array([0, 2]), [np.int64(1)]])),
    (SQA, dict(thermal_sweeps=0, beta=2, gamma_schedule=("geometric", np.float32(3.0), 1e-3))),
    (DimodEngine, dict(num_reads=np.int64(1))),
])
def test_good_settings_at_the_edges_are_accepted(engine, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # equinox: "A JAX array is being set as static!"
        eng = engine(**kw)
    for name in kw:  # NumPy scalars are stored as Python scalars: hashable, plain JSON
        v = getattr(eng, name)
        assert not isinstance(v, np.generic) and not any(isinstance(x, np.generic) for x in (v if isinstance(v, tuple) else ()))
    if engine is not DimodEngine:  # (its sampler object is not JSON)
        assert from_spec(json.loads(json.dumps(to_spec(eng)))) == eng


def test_dimod_engine_refuses_unknown_sampler_parameters():
    with pytest.raises(IsingInputError, match="num_sweep"):
        DimodEngine(num_reads=4, num_sweep=10)  # typo of num_sweeps


# ---- 4. keys ----------------------------------------------------------------------------------

N_KEY = 4
SAMPLERS = {
    "gibbs": lambda: Gibbs(num_warmup=50, num_samples=400, num_chains=4),
    "sqa": lambda: SQA(num_sweeps=20, trotter=4, num_reads=256, thermal_sweeps=30),
    "dimod": lambda: DimodEngine(num_reads=256, num_sweeps=50),
}
KEYS = {
    "threefry": lambda: jax.random.key(11),
    "rbg": lambda: jax.random.key(11, impl="rbg"),
    "unsafe_rbg": lambda: jax.random.key(11, impl="unsafe_rbg"),
    "raw": lambda: jax.random.PRNGKey(11),
}


def _key_model():
    h, J = _model64(N_KEY, seed=5, h_scale=0.4)
    return h, 0.5 * J


def _ess(name, samples):
    """ESS of each spin's mean: numpyro's estimator on Gibbs' chains (chain-major
    samples); the reads of SQA and of the dimod sampler are independent."""
    s = np.asarray(samples, np.float64)
    if name == "gibbs":
        return np_ess(s.reshape(4, -1, s.shape[-1]))
    return np.full(s.shape[-1], float(s.shape[0]))


@pytest.mark.parametrize("impl", list(KEYS))
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_key_impl_works_and_is_reproducible(name, impl):
    h, J = _key_model()
    model = IsingModel(h, J, 1.0)
    eng = SAMPLERS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a diagnostic of a short run is not this test's subject
        a = eng.marginals(model, key=KEYS[impl]())
        b = eng.marginals(model, key=KEYS[impl]())
    np.testing.assert_array_equal(a.samples, b.samples)  # same key, same result
    exact = np.asarray(Exact().marginals(model).mean)
    assert np.allclose(exact, brute_force(h, J, 1.0)["mean"], atol=1e-12)
    se = np.sqrt((1 - exact**2) / _ess(name, a.samples))
    assert np.all(np.abs(np.asarray(a.mean) - exact) < 5 * se), (np.asarray(a.mean), exact, se)


@pytest.mark.parametrize("name", ["gibbs", "sqa"])
def test_rbg_key_under_jit(name):
    h, J = _key_model()
    eng = SAMPLERS[name]()
    f = jax.jit(lambda k: eng.marginals(IsingModel(h, J, 1.0), key=k).samples)
    key = jax.random.key(3, impl="rbg")
    np.testing.assert_array_equal(f(key), f(key))


NOT_KEYS = {
    "int": 3,
    "float": 2.5,
    "float-array": jnp.zeros(2),
    "numpy-float-array": np.zeros(2),
    "uint32[3]": jnp.zeros(3, jnp.uint32),
    "uint32[]": jnp.zeros((), jnp.uint32),
    "string": "key",
    "batch-of-keys": jax.random.split(jax.random.key(0), 3),
    "batch-of-raw-keys": jax.random.split(jax.random.PRNGKey(0), 3),
}


@pytest.mark.parametrize("bad", list(NOT_KEYS))
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_non_key_gives_one_clear_error(name, bad):
    model = IsingModel(np.zeros(3), np.zeros((3, 3)))
    with pytest.raises(BAD, match=r"key.*(PRNG key|single)"):
        SAMPLERS[name]().marginals(model, key=NOT_KEYS[bad])
