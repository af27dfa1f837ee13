"""``isingattn.IsingDistribution`` against independent references.

* ``log_prob`` against the float64 brute force (``isingattn.testing``): dense, sparse and
  masked couplings, batched, and normalized over ``enumerate_support``.
* Exact draws: by enumeration (n = 8) and by FFBS (a banded model of n = 30 whose first 8
  spins form a strip and whose others a chain) pass chi-square tests against the brute
  force (p-values computed here), and the chain's bonds match the closed form
  ``⟨s_i s_{i+1}⟩ = tanh(β J)`` within their standard errors.
* NUTS with priors on ``h`` and ``J`` (n = 5, 3,000 observations drawn here from the brute
  force's probabilities): the posterior covers the true parameters, ArviZ gets a
  ``log_likelihood`` group equal to the brute force at a posterior draw, and ``az.loo`` is finite.
* The pseudo-likelihood factor against conditionals computed from brute-force energies.
* Refusals and bad inputs.
"""

import math
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS
from scipy import stats

import isingattn
from isingattn import IsingDistribution
from isingattn.distribution import ising_pseudo_log_likelihood
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.graphs import lattice
from isingattn.sparse import SparseCouplings
from isingattn.testing import all_spins, brute_force

P_MIN = 1e-3  # chi-square p-value below which draws are rejected


def chi_square_p(draws, probs) -> float:
    """p-value of Pearson's chi-square test of ``draws [S, m]`` (±1) against ``probs [2^m]`` in
    the order of ``all_spins``; cells expected below 5 are pooled into one."""
    m = draws.shape[1]
    idx = ((np.asarray(draws) < 0).astype(np.int64) * (2 ** np.arange(m - 1, -1, -1))).sum(-1)
    counts = np.bincount(idx, minlength=2**m).astype(float)
    expected = probs * len(idx)
    small = expected < 5
    obs, exp = np.append(counts[~small], counts[small].sum()), np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(stats.chi2.sf(np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep]), keep.sum() - 1))


def dense_model(seed, n, scale=0.4):
    rng = np.random.default_rng(seed)
    J = np.triu(rng.normal(0, scale, (n, n)), 1)
    return rng.normal(0, 0.5, n), J + J.T


def ref_log_prob(h, J, beta, mask, S):
    """float64 ``log p(s)`` of the rows of ``S`` (inactive spins ignored)."""
    a = np.ones(len(h), bool) if mask is None else np.asarray(mask)
    x = S * a
    E = -x @ (h * a) - 0.5 * np.einsum("ci,ij,cj->c", x, J, x)
    return -beta * E - brute_force(h, J, beta, a)["log_z"]


# ---- log_prob --------------------------------------------------------------------------------


def test_log_prob_against_brute_force_dense_masked_batched():
    n, beta = 6, 0.8
    h, J = dense_model(0, n)
    H = np.stack([h, -h, 2 * h])  # [3, n]
    Js = np.stack([J, 0.5 * J])[:, None]  # [2, 1, n, n]: batch (2, 3)
    mask = np.ones((3, n), bool)
    mask[1, 2] = False
    mask[2, [0, 4]] = False
    d = IsingDistribution(H, Js, beta=beta, mask=mask)
    assert d.batch_shape == (2, 3) and d.event_shape == (n,) and d.support.event_dim == 1
    S = all_spins(n)
    lp = np.asarray(d.log_prob(S[:, None, None, :]))  # [2^n, 2, 3]
    for g in range(2):
        for q in range(3):
            np.testing.assert_allclose(lp[:, g, q], ref_log_prob(H[q], Js[g, 0], beta, mask[q], S), atol=1e-10)
    # without a mask the probabilities of enumerate_support sum to 1 for every batch member
    d = IsingDistribution(H, Js, beta=beta)
    support = d.enumerate_support()
    assert support.shape == (2**n, 2, 3, n)
    np.testing.assert_allclose(jnp.exp(d.log_prob(support)).sum(0), 1.0, atol=1e-12)
    assert d.enumerate_support(expand=False).shape == (2**n, 1, 1, n)


def test_log_prob_sparse_banded_equals_brute_force():
    g = lattice((7, 2))  # row-major: bandwidth 2, so the automatic engine is Banded (n > 12)
    rng = np.random.default_rng(1)
    w, h = rng.normal(0, 0.5, g.E), rng.normal(0, 0.5, g.n)
    d = IsingDistribution(h, SparseCouplings(g, w), beta=1.2)
    assert type(d.engine).__name__ == "Banded" and d.log_z_kind == "exact" and d.bandwidth == 2
    J = np.asarray(SparseCouplings(g, w).to_dense())
    S = all_spins(g.n)[::7]
    np.testing.assert_allclose(d.log_prob(S), ref_log_prob(h, J, 1.2, None, S), atol=1e-9)
    ref = brute_force(h, J, 1.2)
    np.testing.assert_allclose(d.mean, ref["mean"], atol=1e-9)
    np.testing.assert_allclose(d.variance, 1 - ref["mean"] ** 2, atol=1e-9)


# ---- exact draws -------------------------------------------------------------------------------


def test_enumerated_draws_pass_chi_square_n8():
    h, J = dense_model(2, 8, scale=0.5)
    d = IsingDistribution(h, J, beta=1.0)
    draws = d.sample(jax.random.key(0), (40000,))
    assert draws.shape == (40000, 8) and draws.dtype == d.model.dtype
    assert chi_square_p(draws, brute_force(h, J, 1.0)["probs"]) > P_MIN
    # sample shapes, batches and masks
    mask = np.ones((2, 8), bool)
    mask[1, 3] = False
    db = IsingDistribution(np.stack([h, -h]), J, mask=mask)
    x = np.asarray(db.sample(jax.random.key(1), (5000, 2)))
    assert x.shape == (5000, 2, 2, 8) and (x[:, :, 1, 3] == 1).all()
    x = x.reshape(-1, 2, 8)
    act = mask[1]
    assert chi_square_p(x[:, 1][:, act], brute_force(-h, J, 1.0, act)["probs"]) > P_MIN


def test_ffbs_draws_of_a_large_banded_model():
    """n = 30 (beyond enumeration): spins 0-7 form a 4x2 strip, spins 8-29 an open chain
    at h = 0, uncoupled from the strip; the couplings' bandwidth is 2, so the draws come from
    forward-filtering backward-sampling. The strip's draws pass a chi-square test against its
    brute force; the chain's bonds b_i = s_i s_{i+1} are independent with mean tanh(β J_i)."""
    g = lattice((4, 2))
    rng = np.random.default_rng(3)
    n, beta = 30, 0.9
    J = np.zeros((n, n))
    J[g.edges[:, 0], g.edges[:, 1]] = rng.normal(0, 0.6, g.E)
    Jc = rng.uniform(-1.5, 1.5, n - 9)
    J[np.arange(8, n - 1), np.arange(9, n)] = Jc
    J = J + J.T
    h = np.zeros(n)
    h[:8] = rng.normal(0, 0.4, 8)
    d = IsingDistribution(h, J, beta=beta)
    assert d.bandwidth == 2
    S = 40000
    x = np.asarray(d.sample(jax.random.key(4), (S,)))
    assert chi_square_p(x[:, :8], brute_force(h[:8], J[:8, :8], beta)["probs"]) > P_MIN
    bonds = x[:, 8:-1] * x[:, 9:]
    expected = np.tanh(beta * Jc)
    z = (bonds.mean(0) - expected) / np.sqrt((1 - expected**2) / S)
    assert np.abs(z).max() < 4.5, z  # 21 bonds: Bonferroni at 1e-4
    assert np.abs(x[:, 8:].mean(0)).max() < 4.5 / math.sqrt(S)  # h = 0: every chain spin is uniform
    # the log-likelihood of these draws is exact too (Banded): log p = -βE - log Z
    Zc = (n - 8) * math.log(2) + np.log(np.cosh(beta * Jc)).sum()
    lz = brute_force(h[:8], J[:8, :8], beta)["log_z"] + Zc
    np.testing.assert_allclose(d.log_z, lz, atol=1e-9)


# ---- NUTS, log_likelihood, ArviZ ------------------------------------------------------------------


def test_nuts_posterior_covers_truth_and_loo_is_finite():
    n, S = 5, 3000
    iu = np.triu_indices(n, 1)
    rng = np.random.default_rng(5)
    h_true, w_true = rng.normal(0, 0.3, n), rng.normal(0, 0.5, len(iu[0]))
    J_true = np.zeros((n, n))
    J_true[iu] = w_true
    J_true = J_true + J_true.T
    ref = brute_force(h_true, J_true)
    rows = jax.random.choice(jax.random.key(6), 2**n, (S,), p=jnp.asarray(ref["probs"]))
    data = jnp.asarray(ref["spins"][np.asarray(rows)])  # exact draws, independent of the distribution

    def model(s):
        h = numpyro.sample("h", dist.Normal(0, 1).expand([n]).to_event(1))
        w = numpyro.sample("w", dist.Normal(0, 1).expand([len(iu[0])]).to_event(1))
        J = jnp.zeros((n, n)).at[iu].set(w)
        with numpyro.plate("data", s.shape[0]):
            numpyro.sample("s", IsingDistribution(h, J + J.T), obs=s)

    mcmc = MCMC(NUTS(model), num_warmup=300, num_samples=300, num_chains=1, progress_bar=False)
    mcmc.run(jax.random.key(7), data)
    post = mcmc.get_samples()
    x = np.concatenate([np.asarray(post["h"]), np.asarray(post["w"])], axis=1)  # [300, 15]
    truth = np.concatenate([h_true, w_true])
    lo, hi = np.quantile(x, [0.025, 0.975], axis=0)
    covered = (lo <= truth) & (truth <= hi)
    z = (x.mean(0) - truth) / x.std(0)
    # 15 parameters: each 95% interval covers (at most 3 misses: P < 0.01 for a calibrated
    # posterior), and all of them within 3.0 sd (Bonferroni over 15 at family-wise 5%: 2.94)
    assert covered.sum() >= 12 and np.abs(z).max() < 3.0, (covered, z)

    idata = az.from_numpyro(mcmc)
    ll = np.asarray(idata.log_likelihood["s"])
    assert ll.shape == (1, 300, S)
    k = 17  # one posterior draw: its log-likelihood per observation against the brute force
    Jk = np.zeros((n, n))
    Jk[iu] = x[k, n:]
    np.testing.assert_allclose(ll[0, k], ref_log_prob(x[k, :n], Jk + Jk.T, 1.0, None, np.asarray(data)), atol=1e-8)
    loo = az.loo(idata)
    assert np.isfinite(loo.elpd_loo) and np.isfinite(loo.se)


def test_under_plate_and_log_likelihood():
    h, J = dense_model(8, 4)
    data = IsingDistribution(h, J).sample(jax.random.key(9), (50,))

    def model(s):
        with numpyro.plate("data", s.shape[0]):
            numpyro.sample("s", IsingDistribution(h, J), obs=s)

    tr = numpyro.handlers.trace(model).get_trace(data)
    assert tr["s"]["fn"].batch_shape == (50,) and tr["s"]["fn"].event_shape == (4,)
    lp = tr["s"]["fn"].log_prob(data)
    np.testing.assert_allclose(lp, ref_log_prob(h, J, 1.0, None, np.asarray(data)), atol=1e-10)
    ll = numpyro.infer.log_likelihood(model, {}, data, batch_ndims=0)["s"]
    np.testing.assert_allclose(ll, lp, atol=1e-12)
    # and a prior predictive draw goes through the plate
    pred = numpyro.infer.Predictive(model, num_samples=3)(jax.random.key(10), data)["s"]
    assert pred.shape == (3, 50, 4) and set(np.unique(np.asarray(pred))) <= {-1.0, 1.0}


# ---- pseudo-likelihood factor ---------------------------------------------------------------------


def test_pseudo_log_likelihood_against_energy_differences():
    n, beta = 6, 0.7
    h, J = dense_model(11, n)
    S = all_spins(n)[::5]
    mask = np.ones(n, bool)
    mask[4] = False
    for m in (None, mask):
        a = np.ones(n, bool) if m is None else m
        E = lambda x: -(x * a) @ (h * a) - 0.5 * np.einsum("ci,ij,cj->c", x * a, J, x * a)
        ref = np.zeros(len(S))
        for i in np.flatnonzero(a):  # log p(s_i | s_-i) = -log(1 + exp(-β (E(flip_i s) - E(s))))
            F = S.copy()
            F[:, i] *= -1
            ref -= np.logaddexp(0.0, -beta * (E(F) - E(S)))
        np.testing.assert_allclose(ising_pseudo_log_likelihood(h, J, S, beta, mask=m), ref, atol=1e-10)

    def model(s):
        hh = numpyro.sample("h", dist.Normal(0, 1).expand([n]).to_event(1))
        numpyro.factor("plm", ising_pseudo_log_likelihood(hh, J, s, beta).sum())

    tr = numpyro.handlers.trace(numpyro.handlers.substitute(model, {"h": jnp.asarray(h)})).get_trace(jnp.asarray(S))
    np.testing.assert_allclose(tr["plm"]["fn"].log_prob(tr["plm"]["value"]), ising_pseudo_log_likelihood(h, J, S, beta).sum())


# ---- refusals and bad inputs --------------------------------------------------------------------


def test_refuses_without_an_exact_engine():
    h, J = dense_model(12, 30, scale=0.1)  # dense: bandwidth 29
    with pytest.raises(IsingInputError, match="no exact log Z") as e:
        IsingDistribution(h, J)
    assert "engine=Banded" in str(e.value) and "ising_pseudo_log_likelihood" in str(e.value)
    with pytest.raises(IsingInputError, match="J is traced"):  # under jit a dense J's band is unknown
        jax.jit(lambda J: IsingDistribution(h, J).log_prob(jnp.ones(30)))(J)
    # an explicit approximate engine is accepted, and says so
    d = IsingDistribution(h, J, engine="meanfield-bp")
    assert d.log_z_kind == "approximate" and np.isfinite(d.log_prob(np.ones(30)))
    # a sampler alone: approximate draws with a warning; log_prob refuses
    d = IsingDistribution(h, J, sampler=isingattn.inference.get("gibbs", num_samples=100, num_chains=2))
    with pytest.warns(UserWarning, match="approximate"):
        x = d.sample(jax.random.key(0), (50,))
    assert x.shape == (50, 30)
    with pytest.raises(IsingInputError, match="log_prob"):
        d.log_prob(np.ones(30))


def test_bad_inputs():
    h, J = dense_model(13, 4)
    d = IsingDistribution(h, J)
    with pytest.raises(IsingInputError, match=r"shape \[\.\.\., n\] with n = 4"):
        d.log_prob(np.ones(5))
    with pytest.raises(IsingInputError, match="-1 or \\+1"):
        d.log_prob(np.array([0, 1, 1, 0]))
    with pytest.raises(IsingTypeError):
        d.log_prob(np.array(["a", "b", "c", "d"]))
    with pytest.raises(IsingTypeError):
        d.log_prob(np.ones(4, bool))
    with pytest.raises(IsingInputError, match="broadcast"):
        IsingDistribution(np.stack([h, h]), J).log_prob(np.ones((3, 4)))
    with pytest.raises(IsingInputError, match="J must have shape"):
        IsingDistribution(h, np.zeros((5, 5)))
    with pytest.raises(IsingInputError):
        IsingDistribution(h, J + np.triu(np.ones((4, 4)), 1))  # not symmetric
    with pytest.raises(IsingTypeError, match="engine"):
        IsingDistribution(h, J, engine=3)
    with pytest.raises(IsingInputError, match="sampler"):
        IsingDistribution(h, J, sampler="exact")
    with pytest.raises(IsingInputError, match="mask"):
        IsingDistribution(h, J, mask=np.array([True, False, True, True])).enumerate_support()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exact draws never warn
        assert d.sample(jax.random.key(0)).shape == (4,)
