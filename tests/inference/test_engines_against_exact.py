"""One suite, every engine, against Exact on dense, chain and 2D-lattice models.

Samplers must agree within 4 Monte Carlo standard errors, SE = sample std / sqrt(ESS),
with the ESS computed here by ArviZ from the returned samples (Gibbs: its chains; SQA and
dimod: the reads, as one chain), never from the engine's own diagnostics. Mean-field engines meet their stated bounds: BP is exact on trees
(the chain). DQA is only approximately Boltzmann (a fast anneal reaches high
temperature only); its calibrated accuracy is tested in test_dqa.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import IsingModel, inference
from isingattn.instances import random_model
from isingattn.inference.dqa import DQA
from isingattn.inference.dimod import DimodEngine
from isingattn.inference.exact import Exact
from isingattn.inference.mcmc import Gibbs, SQA

N = 8
GRAPHS = ("dense", "chain", "lattice")

CHAINS = {"gibbs": 4, "gibbs-rb": 4}  # the others return independent reads: one chain for the ESS

SAMPLERS = {
    "gibbs": lambda: Gibbs(num_warmup=100, num_samples=1000, num_chains=4),
    "sqa": lambda: SQA(num_sweeps=100, num_reads=512, thermal_sweeps=50),
    # Rao-Blackwellized means, held to the plain samples' SE (never larger for independent reads)
    "gibbs-rb": lambda: Gibbs(num_warmup=100, num_samples=1000, num_chains=4, rao_blackwell=True),
    "sqa-rb": lambda: SQA(num_sweeps=100, num_reads=512, thermal_sweeps=50, rao_blackwell=True),
    "dimod": lambda: DimodEngine(num_reads=1000, num_sweeps=100),
}


def _models(beta):
    """The three graphs as one batched model (J per batch element)."""
    rng = np.random.default_rng(int(beta * 10))
    hs, Js = zip(*(random_model(rng, N, h_scale=0.7, J_scale=0.6 if g != "dense" else None, graph=g) for g in GRAPHS))
    return IsingModel(np.stack(hs), np.stack(Js), beta=beta)


@pytest.fixture(scope="module")
def references():
    return {b: np.asarray(Exact().marginals(_models(b)).mean) for b in (0.5, 1.0)}


def _ess(samples, chains: int):
    """``[batch, n]`` bulk ESS of each spin by ArviZ (an estimator independent of the engines),
    ``samples [batch, chains * draws, n]`` chain-major; NaN (a constant spin) becomes 1."""
    import arviz as az

    b, S, n = samples.shape
    x = samples.reshape(b, chains, S // chains, n)
    ess = np.array([[az.ess(x[i, :, :, j]) for j in range(n)] for i in range(b)], dtype=float)
    return np.where(np.isfinite(ess), ess, 1.0)


@pytest.mark.parametrize("beta", [0.5, 1.0])
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_samplers_within_four_standard_errors(name, beta, references):
    model = _models(beta)
    out = SAMPLERS[name]().marginals(model, key=jax.random.PRNGKey(11))
    mean, samples = np.asarray(out.mean), np.asarray(out.samples)
    ess = _ess(samples, CHAINS.get(name, 1))
    se = samples.std(-2) / np.sqrt(ess)
    err = np.abs(mean - references[beta])
    # a spin whose samples never vary has SE 0; allow one read's worth there
    tol = 4 * np.maximum(se, 1.0 / samples.shape[-2])
    assert np.all(err <= tol), {g: (err[i].max(), tol[i][err[i].argmax()]) for i, g in enumerate(GRAPHS)}


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_bp_exact_on_the_chain(beta, references):
    # BP is exact on trees only; on the loopy dense and lattice models it carries no
    # guarantee (DESIGN's 0.05-0.08 bar is an average at n=16, see test_meanfield.py)
    bp = np.asarray(inference.get("meanfield-bp", tol=1e-10, max_iter=2000).marginals(_models(beta)).mean)
    np.testing.assert_allclose(bp[1], references[beta][1], atol=1e-7)


@pytest.mark.parametrize("method,order", [("naive", 2), ("tap", 3)])
def test_mean_field_small_coupling_accuracy(method, order):
    """Error of naive MF is O(J²) and of TAP O(J³): halving J divides it by ~4 or ~8."""
    rng = np.random.default_rng(0)
    h, J = random_model(rng, N, h_scale=0.5, J_scale=1.0)
    eng = inference.get(f"meanfield-{method}", tol=1e-12, max_iter=5000)
    errs = []
    for s in (0.1, 0.05):
        m = IsingModel(jnp.asarray(h), jnp.asarray(J * s / np.sqrt(N)))
        errs.append(np.abs(np.asarray(eng.marginals(m).mean) - np.asarray(Exact().marginals(m).mean)).max())
    ratio = errs[0] / errs[1]
    assert 2**order * 0.75 < ratio < 2**order * 1.25, (errs, ratio)


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_dqa_within_four_standard_errors_of_its_own_bias(beta, references):
    """DQA samples |ψ|², which is Boltzmann only to O(β²) (a fast anneal). Its shots must
    agree with the exact |ψ|² marginals within 4 MCSE, and we report how far those sit
    from Exact: the approximation error, measured rather than assumed."""
    from isingattn.energy import spin_table

    model = _models(beta)
    samples, probs, info = DQA(num_shots=2048).run(model, key=jax.random.PRNGKey(3))
    samples, probs = np.asarray(samples), np.asarray(probs)
    psi_mean = probs @ np.asarray(spin_table(N, jnp.float64))  # exact marginals of |ψ|²
    se = samples.std(-2) / np.sqrt(samples.shape[-2])  # shots are independent
    assert np.all(np.abs(samples.mean(-2) - psi_mean) <= 4 * np.maximum(se, 1.0 / samples.shape[-2]))
    # Measured here: max bias 0.05 at β=0.5 and 0.30 at β=1 (lattice). No tight bound holds
    # at β=1, so assert only that DQA is at least twice as close to Exact as a
    # model-blind sampler (whose error is |⟨s⟩|) for every model.
    bias = np.abs(psi_mean - references[beta]).max(-1)
    assert np.all(bias < 0.5 * np.abs(references[beta]).max(-1)), bias
