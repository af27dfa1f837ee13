"""Samplers for the calibration tests. The hidden-β sampler (dwave-samplers'
SimulatedAnnealingSampler at a fixed β that its caller cannot change, a stand-in for a QPU's
unknown temperature) is public: :class:`isingattn.inference.dimod.standins.HiddenBetaSampler`."""

import warnings

import dimod
import jax
import numpy as np

from isingattn.inference.dimod.standins import HiddenBetaSampler  # noqa: F401  (re-exported for the tests)


class GroundStateSampler(dimod.Sampler):
    """Returns the ground state (ExactSolver) for every read: an optimizer, no temperature."""

    parameters = {"num_reads": []}
    properties = {}

    def sample(self, bqm, num_reads=1, **ignored):
        g = dimod.ExactSolver().sample(bqm).lowest().truncate(1)
        return dimod.SampleSet.from_samples_bqm(
            (np.repeat(g.record.sample, num_reads, 0), list(g.variables)), bqm)


def dense_model(n, seed, h_scale=0.5, J_scale=0.4):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=n) * h_scale
    J = np.triu(rng.normal(size=(n, n)) * J_scale, 1)
    return h, J + J.T


def z_scores(samples, exact_mean):
    """``(mean - exact) / SE`` per spin, SE from the reads' ESS, computed here (initial
    positive sequence of autocorrelations over the read order; iid reads give ESS ≈ S)."""
    x = np.asarray(samples, np.float64)
    S = len(x)
    ess = np.empty(x.shape[1])
    for i in range(x.shape[1]):
        d = x[:, i] - x[:, i].mean()
        var = d @ d / S
        if var == 0:
            ess[i] = S
            continue
        rho = np.array([d[: S - k] @ d[k:] / (S * var) for k in range(1, min(S // 4, 200))])
        s = 0.0
        for k in range(0, len(rho) - 1, 2):
            pair = rho[k] + rho[k + 1]
            if pair <= 0:
                break
            s += pair
        ess[i] = S / max(1.0, 1 + 2 * s)
    se = np.sqrt(np.maximum(x.var(0), 1e-12) / ess)
    return (x.mean(0) - exact_mean) / se, se


class SortedExactSampler(dimod.Sampler):
    """Exact Boltzmann draws at ``beta``, returned aggregated and sorted by energy (as QPU
    sample sets come back), ``extra`` times as many reads as asked for."""

    parameters = {"num_reads": []}
    properties = {}

    def __init__(self, beta, extra=2, seed=0):
        self.beta, self.extra, self.rng = beta, extra, np.random.default_rng(seed)

    def sample(self, bqm, num_reads=1, **ignored):
        vs = list(bqm.variables)
        N = len(vs)
        S = 1 - 2 * ((np.arange(2**N)[:, None] >> np.arange(N)) & 1).astype(np.int8)
        E = bqm.energies((S, vs))
        p = np.exp(-self.beta * (E - E.min()))
        r = self.rng.choice(2**N, size=self.extra * num_reads, p=p / p.sum())
        ss = dimod.SampleSet.from_samples_bqm((S[r], vs), bqm).aggregate()
        order = np.argsort(ss.record.energy, kind="stable")
        return dimod.SampleSet(ss.record[order], ss.variables, {}, ss.vartype)


def run_recording_warnings(engine, model, seed=1):
    """``(engine.marginals(model, key=PRNGKey(seed)), the warnings it issued)``."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = engine.marginals(model, key=jax.random.PRNGKey(seed))
    return out, w
