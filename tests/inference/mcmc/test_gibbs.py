"""Gibbs engine, kernel and NumPyro/ArviZ integration against independent references.

Statistical tolerances are 4 Monte Carlo standard errors, SE = sample std / sqrt(ESS)
with the ESS computed by numpyro.diagnostics (numpy) from the chains themselves.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size as np_ess
from numpyro.diagnostics import split_gelman_rubin as np_rhat

from isingattn import IsingModel, boltzmann_attention
from isingattn.inference.exact.engine import Exact
from isingattn.inference.mcmc.gibbs import Gibbs
from isingattn.inference.mcmc.gibbs_kernel import gibbs_sweep, GibbsState, sweep_with_thresholds
from isingattn.inference.mcmc.numpyro_kernel import IsingGibbsKernel
from isingattn.inference.mcmc.coloring import color_classes
from isingattn.diagnostics import effective_sample_size, split_gelman_rubin
from isingattn.inference.mcmc.arviz_export import to_inference_data
from isingattn.testing import brute_force
from isingattn.instances import random_model

# n = 9 for every graph (dense, chain, 3x3 lattice): one compiled program per schedule.
N = 9
RUN = dict(num_warmup=200, num_samples=2000, num_chains=4)
GRAPHS = ["dense", "chain", "lattice"]


def _by_chain(m, num_chains):
    """Engine samples [*batch, C*D, n] -> [C, D, *batch, n]."""
    s = np.asarray(m.samples)
    *batch, S, n = s.shape
    s = s.reshape(tuple(batch) + (num_chains, S // num_chains, n))
    return np.moveaxis(s, (-3, -2), (0, 1))


def _assert_within_mcse(m, exact_mean, num_chains):
    """|mean - exact| ≤ 4 SE per spin, SE = std / sqrt(ESS) with numpyro's (numpy) ESS."""
    x = _by_chain(m, num_chains)
    C, D = x.shape[:2]
    flat = x.reshape((C * D,) + x.shape[2:])
    std = flat.std(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = np_ess(x)
    se = np.where(std > 0, std / np.sqrt(np.where(std > 0, ess, 1.0)), 0.0)
    err = np.abs(np.asarray(m.mean) - np.asarray(exact_mean))
    assert np.all(err <= 4 * se), (err.max(), (err / np.maximum(se, 1e-300)).max())
    return se


def _model(graph, beta, seed=0, J_sparse=0.6):
    rng = np.random.default_rng([seed, GRAPHS.index(graph), int(beta * 10)])
    # dense: J ~ N(0, 1/n); the sparse graphs get larger couplings, so that the total
    # coupling on a spin, Σ_j |J_ij|, is about the same as in the dense model.
    h, J = random_model(rng, N, h_scale=0.5, J_scale=None if graph == "dense" else J_sparse, graph=graph)
    return h, J


# ----------------------------------------------------------------------------------
# The parametrized suite: every schedule on every graph against Exact
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.5, 1.0])
@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("schedule", ["systematic", "colored"])
def test_marginals_match_exact_within_mcse(schedule, graph, beta):
    h, J = _model(graph, beta)
    model = IsingModel(h, J, beta)
    engine = Gibbs(schedule=schedule, **RUN)
    m = engine.marginals(model, key=jax.random.PRNGKey(1))
    exact = Exact().marginals(model).mean
    np.testing.assert_allclose(exact, brute_force(h, J, beta)["mean"], atol=1e-10)  # the reference itself
    _assert_within_mcse(m, exact, RUN["num_chains"])
    # diagnostics: converged, ESS sensible, flip rate a fraction
    assert bool(np.all(m.info["converged"]))
    assert np.all(np.asarray(m.info["r_hat"]) < 1.05)
    assert np.all(np.asarray(m.info["ess"]) > 100)
    fr = np.asarray(m.info["flip_rate"])
    assert fr.shape == (RUN["num_chains"],) and np.all((fr > 0) & (fr < 1))
    assert m.samples.shape == (RUN["num_chains"] * RUN["num_samples"], N)
    assert set(np.unique(np.asarray(m.samples))) <= {-1.0, 1.0}


@pytest.mark.slow
@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("schedule", ["systematic", "colored"])
def test_strongly_coupled_models_with_long_runs(schedule, graph):
    """Couplings ~ N(0, 1) on the sparse graphs (2x the default), β = 1, 10x longer runs."""
    h, J = _model(graph, 1.0, seed=1, J_sparse=1.2)
    model = IsingModel(h, J, 1.0)
    run = dict(num_warmup=2000, num_samples=20000, num_chains=4)
    m = Gibbs(schedule=schedule, **run).marginals(model, key=jax.random.PRNGKey(2))
    assert bool(np.all(m.info["converged"]))
    _assert_within_mcse(m, brute_force(h, J, 1.0)["mean"], 4)


def test_color_classes_are_proper_colourings():
    for graph, k_max in [("dense", N), ("chain", 2), ("lattice", 3)]:
        _, J = _model(graph, 1.0)
        classes = color_classes(J)
        assert sorted(i for c in classes for i in c) == list(range(N))
        assert len(classes) <= k_max
        for c in classes:  # no coupling inside a class
            assert not np.any(J[np.ix_(c, c)])
    assert color_classes(_model("dense", 1.0)[1]) == tuple((i,) for i in range(N))


def test_colored_equals_systematic_on_dense_and_differs_on_sparse():
    key = jax.random.PRNGKey(5)  # RUN and n = N: reuses the suite's compiled programs
    h, J = _model("dense", 1.0)
    a = Gibbs(schedule="systematic", **RUN).marginals(IsingModel(h, J, 1.0), key=key)
    b = Gibbs(schedule="colored", **RUN).marginals(IsingModel(h, J, 1.0), key=key)
    np.testing.assert_array_equal(a.samples, b.samples)
    h, J = _model("chain", 1.0)
    a = Gibbs(schedule="systematic", **RUN).marginals(IsingModel(h, J, 1.0), key=key)
    b = Gibbs(schedule="colored", **RUN).marginals(IsingModel(h, J, 1.0), key=key)
    assert not np.array_equal(a.samples, b.samples)


# ----------------------------------------------------------------------------------
# Keys, chains, batches, masks
# ----------------------------------------------------------------------------------


def test_same_key_same_samples_and_chains_differ():
    h, J = _model("dense", 1.0)
    engine = Gibbs(**RUN)
    model = IsingModel(h, J, 1.0)
    a = engine.marginals(model, key=jax.random.PRNGKey(0))
    b = engine.marginals(model, key=jax.random.PRNGKey(0))
    c = engine.marginals(model, key=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(a.samples, b.samples)
    assert not np.array_equal(a.samples, c.samples)
    x = _by_chain(a, RUN["num_chains"])
    assert all(not np.array_equal(x[i], x[j]) for i in range(4) for j in range(i))


@pytest.mark.slow
def test_typed_keys():
    h, J = _model("dense", 1.0)
    engine = Gibbs(**RUN)
    a = engine.marginals(IsingModel(h, J, 1.0), key=jax.random.key(0))
    b = engine.marginals(IsingModel(h, J, 1.0), key=jax.random.key(0))
    np.testing.assert_array_equal(a.samples, b.samples)
    assert a.samples.shape == (RUN["num_chains"] * RUN["num_samples"], N)


def test_batched_models_sharing_J_and_masks():
    """h [Q, n] with one shared J: each model matches its own exact marginals. Model 0
    is unmasked; models 1 and 2 have masked spins, which must stay exactly 0."""
    rng = np.random.default_rng(7)
    Q = 3
    _, J = random_model(rng, N, J_scale=0.5)
    h = rng.normal(size=(Q, N)) * 0.7
    mask = np.ones((Q, N), bool)
    mask[1, [1, 4]] = False
    mask[2, [0, 7, 8]] = False
    model = IsingModel(h, J, 1.0, mask=mask)
    m = Gibbs(**RUN).marginals(model, key=jax.random.PRNGKey(2))
    assert m.mean.shape == (Q, N) and m.info["r_hat"].shape == (Q, N) and m.info["flip_rate"].shape == (Q, 4)
    exact = np.stack([brute_force(h[q], J, 1.0, mask=mask[q])["mean"] for q in range(Q)])
    _assert_within_mcse(m, exact, RUN["num_chains"])
    s = np.asarray(m.samples)  # [Q, S, n]
    on = np.broadcast_to(mask[:, None, :], s.shape)
    assert np.all(s[~on] == 0) and np.all(np.abs(s[on]) == 1)
    # masked spins are known exactly: r_hat 1 and zero standard error
    assert np.all(np.asarray(m.info["r_hat"])[~mask] == 1) and np.all(np.asarray(m.info["mcse"])[~mask] == 0)


@pytest.mark.slow
def test_pure_sweep_keeps_zeros_and_is_deterministic():
    h, J = _model("dense", 1.0)
    s = jnp.asarray(np.where(np.arange(N) % 3 == 0, 0.0, 1.0))[None].repeat(5, 0)  # [5 chains, n]
    args = (GibbsState(s), jnp.asarray(h), jnp.asarray(J), 1.0)
    st1, info1 = gibbs_sweep(jax.random.PRNGKey(0), *args)
    st2, _ = gibbs_sweep(jax.random.PRNGKey(0), *args)
    np.testing.assert_array_equal(st1.spins, st2.spins)
    assert np.all(np.asarray(st1.spins)[:, ::3] == 0) and np.all(np.abs(np.asarray(st1.spins)[:, 1::3]) == 1)
    assert info1.flip_rate.shape == (5,)


@pytest.mark.parametrize("n", [3, 11])  # one partial block; two full blocks and a partial one
def test_blocked_sweep_equals_one_spin_at_a_time(n):
    """Given the same noise, the blocked systematic sweep makes exactly the decisions of
    the textbook loop ``for i: s_i = ±|s_i| by h_i + Σ_j J_ij s_j > t_i`` (batched J,
    shared h, masked spins, several chains)."""
    rng = np.random.default_rng(n)
    Q, C = 3, 5
    J = np.stack([random_model(rng, n, J_scale=0.8)[1] for _ in range(Q)])  # [Q, n, n]
    h = rng.normal(size=n)
    s = rng.choice([-1.0, 1.0], size=(C, Q, n))
    s[:, 1, n // 2] = 0.0  # an inactive spin
    t = rng.logistic(size=(C, Q, n)) / 2.0
    new, info = sweep_with_thresholds(jnp.asarray(t), GibbsState(jnp.asarray(s)), h, J)
    ref = s.copy()
    for c in range(C):
        for q in range(Q):
            for i in range(n):
                f = h[i] + J[q, i] @ ref[c, q]
                ref[c, q, i] = abs(ref[c, q, i]) * (1.0 if f > t[c, q, i] else -1.0)
    np.testing.assert_array_equal(np.asarray(new.spins), ref)
    np.testing.assert_allclose(info.flip_rate, 0.5 * np.abs(ref - s).sum(-1) / np.abs(s).sum(-1))


# ----------------------------------------------------------------------------------
# Diagnostics: JAX ports against numpyro's numpy implementations
# ----------------------------------------------------------------------------------


def test_jax_rhat_and_ess_match_numpyro():
    rng = np.random.default_rng(4)
    C, D = 4, 301
    e = rng.normal(size=(C, D, 3))
    x = np.zeros_like(e)
    for t in range(1, D):  # AR(1) chains with different autocorrelations, one with an offset
        x[:, t] = np.array([0.0, 0.5, 0.9]) * x[:, t - 1] + e[:, t]
    x[0, :, 2] += 1.0
    x = np.concatenate([x, np.ones((C, D, 1))], axis=-1)  # a constant: known exactly
    rhat, ess = jax.jit(lambda x: (split_gelman_rubin(x), effective_sample_size(x)))(x)
    np.testing.assert_allclose(rhat[:3], np_rhat(x[..., :3]), rtol=1e-10)
    np.testing.assert_allclose(ess[:3], np_ess(x[..., :3]), rtol=1e-8)
    assert rhat[3] == 1 and ess[3] == C * D


def test_engine_diagnostics_and_corr_equal_numpyro_and_the_sample_moment():
    """The engine's R-hat, ESS, MCSE (exact counts on packed spins) are numpyro's
    estimators on the engine's own draws, and its ``corr`` (popcounts) is the sample
    second moment, bit for bit: batched models, a masked spin, a pinned spin, float32
    and float64, draws not a multiple of 32."""
    rng = np.random.default_rng(11)
    Q, C, S = 2, 3, 77
    _, J = random_model(rng, N, J_scale=0.5)
    h = rng.normal(size=(Q, N)) * 0.7
    h[0, 3] = 40.0  # pinned by its field: constant draws, known
    mask = np.ones((Q, N), bool)
    mask[1, 5] = False
    for dt in (np.float32, np.float64):
        model = IsingModel(h.astype(dt), J.astype(dt), 1.0, mask=mask)
        with warnings.catch_warnings():  # short chains: not converged, and that is not the point here
            warnings.simplefilter("ignore", RuntimeWarning)
            m = Gibbs(num_warmup=20, num_samples=S, num_chains=C).marginals(model, key=jax.random.PRNGKey(3))
        s = np.asarray(m.samples)  # [Q, C·S, n], chain-major
        ref_corr = jnp.einsum("...sj,...sk->...jk", m.samples, m.samples) / s.shape[-2]
        np.testing.assert_array_equal(np.asarray(m.corr), np.asarray(ref_corr))
        np.testing.assert_array_equal(np.asarray(m.mean), np.asarray(m.samples.mean(-2)))
        x = np.moveaxis(s.reshape(Q, C, S, N).astype(np.float64), 0, 2)  # [C, S, Q, n]
        moving = ~(x == x[:1, :1]).all((0, 1))
        assert not moving[0, 3] and not moving[1, 5] and moving.sum() == Q * N - 2
        tol = 1e-4 if dt == np.float32 else 1e-10
        np.testing.assert_allclose(np.asarray(m.info["r_hat"])[moving], np_rhat(x)[moving], rtol=tol)
        with np.errstate(invalid="ignore", divide="ignore"):  # numpyro on the two constant spins: 0/0
            ess = np_ess(x)[moving]
        np.testing.assert_allclose(np.asarray(m.info["ess"])[moving], ess, rtol=tol)
        np.testing.assert_allclose(np.asarray(m.info["mcse"])[moving],
                                   x.reshape(C * S, Q, N).std(0)[moving] / np.sqrt(ess), rtol=tol)
        for v, known in (("r_hat", 1), ("ess", C * S), ("mcse", 0)):
            assert np.asarray(m.info[v])[0, 3] == known and np.asarray(m.info[v])[1, 5] == known
        assert not np.asarray(m.info["frozen"]).any()


def test_counted_mean_and_corr_keep_values_and_gradients():
    """``sample_marginals`` given the mean and corr counted on packed spins (what Gibbs
    passes) returns the values and the fluctuation-dissipation gradients (h, shared J,
    β) of the plain sample path, bit for bit."""
    from isingattn.fluctuation import sample_marginals, spin_mean, spin_second_moment

    rng = np.random.default_rng(12)
    C, D, Q, n = 4, 50, 3, 5
    draws = jnp.asarray(rng.choice([-1.0, 1.0], size=(C, D, Q, n)))
    samples = jnp.moveaxis(draws, (0, 1), (-3, -2)).reshape(Q, C * D, n)
    _, J = random_model(rng, n)

    def out(h, J, beta, counted):
        kw = dict(mean=spin_mean(draws), corr=spin_second_moment(draws)) if counted else {}
        return sample_marginals(IsingModel(h, J, beta), samples, **kw)

    args = (jnp.asarray(rng.normal(size=(Q, n))), jnp.asarray(J), jnp.asarray(0.7))
    for field in ("mean", "corr"):
        np.testing.assert_array_equal(getattr(out(*args, True), field), getattr(out(*args, False), field))
    loss = lambda *a: (out(*a[:3], a[3]).mean * jnp.arange(1.0, n + 1)).sum()
    for g1, g0 in zip(jax.grad(loss, argnums=(0, 1, 2))(*args, True), jax.grad(loss, argnums=(0, 1, 2))(*args, False)):
        np.testing.assert_array_equal(np.asarray(g1), np.asarray(g0))


def test_packed_marginals_without_samples_keep_values_and_gradients():
    """``packed_sample_marginals(keep_samples=False)`` (what Gibbs does when the float
    samples would not fit) gives the values and the gradients of the plain sample path
    from the packed words alone, with masked spins; and the Gibbs engine agrees with
    itself with and without kept samples: means bit for bit, ESS to a few ulps."""
    from isingattn.diagnostics import pack_spins
    from isingattn.fluctuation import packed_sample_marginals, sample_marginals

    rng = np.random.default_rng(13)
    C, D, Q, n = 3, 45, 2, 6  # D not a multiple of 32
    mask = jnp.asarray([True, True, False, True, True, True])
    draws = jnp.asarray(rng.choice([-1.0, 1.0], size=(C, D, Q, n)))
    samples = jnp.moveaxis(draws, (0, 1), (-3, -2)).reshape(Q, C * D, n)
    words = pack_spins(jnp.moveaxis(draws, 1, 0)).reshape(-1, C, Q * n)
    _, J = random_model(rng, n)

    def out(h, J, beta, packed):
        m = IsingModel(h, J, beta, mask=mask)
        return packed_sample_marginals(m, words, D, keep_samples=False) if packed else sample_marginals(m, samples)

    args = (jnp.asarray(rng.normal(size=(Q, n))), jnp.asarray(J), jnp.asarray(0.7))
    assert out(*args, True).samples is None
    for field in ("mean", "corr"):
        np.testing.assert_array_equal(getattr(out(*args, True), field), getattr(out(*args, False), field))
    loss = lambda *a: (out(*a[:3], a[3]).mean * jnp.arange(1.0, n + 1)).sum()
    for g1, g0 in zip(jax.grad(loss, argnums=(0, 1, 2))(*args, True), jax.grad(loss, argnums=(0, 1, 2))(*args, False)):
        np.testing.assert_allclose(np.asarray(g1), np.asarray(g0), rtol=1e-13, atol=1e-15)
    model = IsingModel(*args[:2], 0.7, mask=mask)
    kept = Gibbs(num_warmup=5, num_samples=40, num_chains=3).marginals(model, key=jax.random.PRNGKey(1))
    lean = Gibbs(num_warmup=5, num_samples=40, num_chains=3, keep_samples=False).marginals(model, key=jax.random.PRNGKey(1))
    assert kept.samples.shape == (Q, 120, n) and lean.samples is None
    np.testing.assert_array_equal(kept.mean, lean.mean)
    # ESS: the same draws through two compiled programs, whose float reductions may be fused
    # differently (with XLA:CPU's elemental emitters, which the tests use, 1 ulp at 2 of 12 entries)
    np.testing.assert_allclose(kept.info["ess"], lean.info["ess"], rtol=4 * np.finfo(np.float64).eps, atol=0)


# ----------------------------------------------------------------------------------
# NumPyro MCMC and ArviZ
# ----------------------------------------------------------------------------------


def test_numpyro_mcmc_api_arviz_and_engine_equivalence(capsys):
    import arviz as az
    from numpyro.infer import MCMC

    rng = np.random.default_rng(11)
    n = N
    h, J = random_model(rng, n, h_scale=0.3, J_scale=0.2)  # easy, well-mixed model
    model = IsingModel(h, J, 1.0)
    C, S = RUN["num_chains"], RUN["num_samples"]
    mcmc = MCMC(IsingGibbsKernel(model), num_warmup=RUN["num_warmup"], num_samples=S, num_chains=C,
                chain_method="vectorized", progress_bar=False)
    key = jax.random.PRNGKey(3)
    mcmc.run(key, extra_fields=("energy", "flip_rate"))
    s = mcmc.get_samples()["s"]
    assert s.shape == (C * S, n)
    assert mcmc.get_samples(group_by_chain=True)["s"].shape == (C, S, n)
    np.testing.assert_allclose(mcmc.get_extra_fields()["energy"], model.energy(s), rtol=1e-12)
    mcmc.print_summary()
    out = capsys.readouterr().out
    assert "r_hat" in out and "n_eff" in out

    idata = az.from_numpyro(mcmc)
    summ = az.summary(idata)
    assert len(summ) == n and np.all(summ["r_hat"] <= 1.01)
    assert "flip_rate" in idata.sample_stats
    assert az.summary(to_inference_data(mcmc)).shape == summ.shape

    # the engine runs the same kernel: same key, same settings => the same chains
    m = Gibbs(**RUN).marginals(model, key=key)
    np.testing.assert_array_equal(_by_chain(m, C), np.asarray(mcmc.get_samples(group_by_chain=True)["s"]))
    np.testing.assert_allclose(az.summary(to_inference_data(m))["r_hat"], summ["r_hat"])
    exact = brute_force(h, J, 1.0)["mean"]
    _assert_within_mcse(m, exact, C)


@pytest.mark.slow
def test_engine_matches_mcmc_with_thinning_and_one_chain():
    from numpyro.infer import MCMC

    h, J = _model("chain", 1.0)
    model = IsingModel(h[None].repeat(2, 0), J)  # a batch of 2 models
    mcmc = MCMC(IsingGibbsKernel(model, schedule="colored"), num_warmup=7, num_samples=40, num_chains=1,
                thinning=3, progress_bar=False)
    key = jax.random.PRNGKey(9)
    mcmc.run(key)
    ref = np.asarray(mcmc.get_samples(group_by_chain=True)["s"])  # [1, 13, 2, n]
    m = Gibbs(num_warmup=7, num_samples=40, num_chains=1, thin=3, schedule="colored",
              diagnostics=False).marginals(model, key=key)
    assert ref.shape == (1, 13, 2, N)
    np.testing.assert_array_equal(_by_chain(m, 1), ref)


# ----------------------------------------------------------------------------------
# jit, attention, errors
# ----------------------------------------------------------------------------------


def test_inside_jit_and_boltzmann_attention_training():
    rng = np.random.default_rng(12)
    B, T, d = 2, 5, 4
    q, k, v = (jnp.asarray(rng.normal(size=(B, T, d))) for _ in range(3))
    J0 = jnp.asarray(random_model(rng, T, J_scale=0.3)[1])
    engine = Gibbs(num_warmup=20, num_samples=100, num_chains=2, diagnostics=False)

    @jax.jit
    def loss(J, key):
        out, w = boltzmann_attention(q, k, v, J, variant="hJ", engine=engine, causal=True, key=key)
        return jnp.sum(out**2), w

    # the gradient's values against Exact: test_conformance::test_gradients_through_boltzmann_attention_agree_with_exact
    (val, w), g = jax.value_and_grad(loss, has_aux=True)(J0, jax.random.PRNGKey(0))
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-12)
    assert np.all(np.asarray(w)[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0)

    # colored without a known structure under jit: warns and falls back to systematic
    colored = Gibbs(num_warmup=20, num_samples=100, num_chains=2, schedule="colored", diagnostics=False)
    f = lambda J, key: colored.marginals(IsingModel(q[0, :, 0], J), key=key).mean
    with pytest.warns(UserWarning, match="falling back to the systematic scan"):
        jax.eval_shape(f, J0, jax.random.PRNGKey(0))  # traces J (as jit would) without compiling


def test_errors_and_nonconvergence_warning():
    h, J = _model("chain", 1.0)
    model = IsingModel(h, J)
    with pytest.raises(ValueError, match="needs a PRNG key"):
        Gibbs().marginals(model)
    with pytest.raises(ValueError, match="schedule must be one of"):
        Gibbs(schedule="random")
    with pytest.raises(ValueError, match="draws per chain"):
        Gibbs(num_samples=6, thin=2)
    with pytest.raises(ValueError, match="num_chains must be an integer"):
        Gibbs(num_chains=0)
    with pytest.raises(ValueError, match="same class but coupled"):
        Gibbs(schedule="colored", colors=((0, 1),) + tuple((i,) for i in range(2, N))).marginals(model, key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="partition"):
        Gibbs(schedule="colored", colors=((0,),)).marginals(model, key=jax.random.PRNGKey(0))
    # a strongly ferromagnetic model at low temperature: chains stuck in opposite phases
    Jf = 3.0 * (1 - np.eye(N))
    with pytest.warns(RuntimeWarning, match="R-hat"):
        m = Gibbs(**RUN).marginals(IsingModel(np.zeros(N), Jf, 2.0), key=jax.random.PRNGKey(0))
    assert not bool(m.info["converged"])


def test_short_chains_on_an_ordered_lattice_are_flagged_by_numpyros_estimators():
    """The default diagnostics on the sparse (colour-class) path, as the benchmarks run it: an
    8x8 periodic ferromagnet at β = 1 (ordered phase), h = 0, so the exact mean is 0 by spin-flip
    symmetry, and chains far too short to cross between the phases. The engine's R-hat and ESS
    are numpyro's estimators on its own draws, the chains are flagged (warning, ``converged``
    False), and the MCSE does not flatter them: a few effective draws, and the errors from the
    exact 0 within 4 MCSE."""
    from isingattn import graphs

    g = graphs.lattice((8, 8), periodic=True)
    model = IsingModel(jnp.zeros(g.n), graphs.random_couplings(None, g, "ferro"), 1.0)
    C, S = 8, 40
    with pytest.warns(RuntimeWarning, match="R-hat"):
        m = Gibbs(num_warmup=0, num_samples=S, num_chains=C).marginals(model, key=jax.random.PRNGKey(0))
    assert not bool(m.info["converged"])
    x = np.asarray(m.samples, np.float64).reshape(C, S, g.n)  # chain-major draws
    ref_rhat = np_rhat(x)
    assert np.nanmax(ref_rhat) >= 1.05  # numpyro says so too
    np.testing.assert_allclose(np.asarray(m.info["r_hat"]), ref_rhat, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(m.info["ess"]), np_ess(x), rtol=1e-10)
    assert np.max(np.asarray(m.info["ess"])) < C * S / 10
    assert np.all(np.abs(np.asarray(m.mean)) <= 4 * np.asarray(m.info["mcse"]))


# ----------------------------------------------------------------------------------
# Gradients through samples
# ----------------------------------------------------------------------------------


def test_gradient_matches_exact_within_standard_error():
    rng = np.random.default_rng(0)
    n, beta, R, C = 6, 0.8, 32, 4
    h, J = random_model(rng, n, h_scale=0.5, J_scale=0.6)
    c = jnp.asarray(rng.normal(size=n))
    engine = Gibbs(num_warmup=100, num_samples=1000, num_chains=C, diagnostics=False)

    def loss_exact(h, J, beta):
        return jnp.sum(c * Exact().marginals(IsingModel(h, J, beta)).mean)

    def loss_gibbs(h, J, beta, key):
        m = engine.marginals(IsingModel(h, J, beta), key=key)
        return jnp.sum(c * m.mean), m.samples

    args = (jnp.asarray(h), jnp.asarray(J), jnp.asarray(beta))
    exact = jax.grad(loss_exact, argnums=(0, 1, 2))(*args)
    keys = jax.random.split(jax.random.PRNGKey(4), R)
    grad = jax.vmap(jax.grad(loss_gibbs, argnums=(0, 1, 2), has_aux=True), in_axes=(None, None, None, 0))
    grads, samples = jax.jit(grad)(*args, keys)  # R independent replicates, one compiled program

    # The covariance estimator centres with the sample mean, a bias of |Cov(w̄, x̄)| ≤ σ_w σ_x / ESS
    # (w = c·s; x = s_b, s_b s_c (σ ≤ 1) or E), with the smallest ESS over spins of replicate 0.
    s0 = np.asarray(samples[0])  # [C*D, n]
    ess = float(np.min(np_ess(s0.reshape(C, -1, n))))
    sw = np.std(s0 @ np.asarray(c))
    sE = np.std(np.asarray(IsingModel(*args).energy(s0)))
    bias = [beta * sw / ess, 0.5 * beta * sw / ess, sw * sE / ess]
    for k, ex in enumerate(exact):
        est = np.asarray(grads[k])
        mean, se = est.mean(0), est.std(0, ddof=1) / np.sqrt(R)
        assert np.all(np.abs(mean - np.asarray(ex)) <= 4 * se + bias[k]), (k, np.abs(mean - ex).max(), se.max())


@pytest.mark.parametrize("layout", ["dense", "colored", "sparse", "masked-batch"])
def test_energy_trace_is_the_energy_of_each_kept_draw(layout):
    """info["energy"] [*batch, C, D] equals E(s) of the returned draws, recomputed here in
    float64 numpy from the samples (the sampler tracks it from per-sweep energy changes)."""
    from isingattn.sparse import from_dense

    rng = np.random.default_rng(3)
    n, C, thin = 9, 3, 2
    J = np.triu(rng.normal(size=(n, n)), 1)
    if layout == "sparse":
        J = np.triu(np.diag(rng.normal(size=n - 1), 1) + np.diag(rng.normal(size=n - 3), 3), 1)  # a ladder
    J = J + J.T
    h = rng.normal(size=(2, n)) if layout == "masked-batch" else rng.normal(size=n)
    mask = np.ones((2, n), bool) if layout == "masked-batch" else None
    if mask is not None:
        mask[1, 6:] = False
    Jm = from_dense(jnp.asarray(J)) if layout == "sparse" else jnp.asarray(J)
    model = IsingModel(jnp.asarray(h), Jm, 0.7, mask=None if mask is None else jnp.asarray(mask))
    eng = Gibbs(num_warmup=5, num_samples=40, num_chains=C, thin=thin,
                schedule="systematic" if layout in ("dense", "masked-batch") else "colored")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = eng.marginals(model, key=jax.random.PRNGKey(0))
    E = np.asarray(m.info["energy"])
    s = _by_chain(m, C)  # [C, D, *batch, n]
    hb = np.broadcast_to(h, s.shape)
    ref = -(hb * s).sum(-1) - 0.5 * np.einsum("...j,jk,...k->...", s, J, s)  # [C, D, *batch]
    ref = np.moveaxis(ref, (0, 1), (-2, -1))
    assert E.shape == ref.shape == (model.batch_shape + (C, 40 // thin))
    np.testing.assert_allclose(E, ref, rtol=0, atol=1e-9)
    # ArviZ gets it as sample_stats.energy [chain, draw, *batch]
    idata = to_inference_data(m)
    np.testing.assert_allclose(np.moveaxis(idata.sample_stats["energy"].values, (0, 1), (-2, -1)), ref, atol=1e-9)


def test_thinned_draws_and_energies_are_the_kept_sweeps_of_an_unthinned_run():
    """Thinning across word and chunk boundaries (40 draws, a burn-in that is not a multiple of
    32): the thinned run's draws, energies and flip rates are exactly sweeps ``burn + 3k + 2`` of
    the same chains run without warmup or thinning (whose draws the MCMC equivalence test pins)."""
    rng = np.random.default_rng(5)
    h, J = random_model(rng, 5, h_scale=0.3, J_scale=0.5)
    model = IsingModel(h, J, 1.0)
    C, W, S, thin = 2, 5, 121, 3
    burn = W + S % thin
    key = jax.random.PRNGKey(4)
    thinned = Gibbs(num_warmup=W, num_samples=S, num_chains=C, thin=thin, diagnostics=False).marginals(model, key=key)
    every = Gibbs(num_warmup=0, num_samples=burn + S - S % thin, num_chains=C, diagnostics=False).marginals(model, key=key)
    kept = burn + thin * np.arange(S // thin) + thin - 1
    np.testing.assert_array_equal(_by_chain(thinned, C), _by_chain(every, C)[:, kept])
    np.testing.assert_array_equal(np.asarray(thinned.info["energy"]), np.asarray(every.info["energy"])[:, kept])
    # the flip rate counts every sweep after burn-in: those of the unthinned run's last S - S % thin sweeps
    s = _by_chain(every, C)
    flips = np.abs(np.diff(s[:, burn - 1:], axis=1)).sum((1, 2)) / 2 / 5 / (S - S % thin)
    np.testing.assert_allclose(np.asarray(thinned.info["flip_rate"]), flips, rtol=1e-12)
