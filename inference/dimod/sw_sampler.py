"""Swendsen–Wang as a ``dimod.Sampler``: :class:`SwendsenWangSampler`, on the base that
SQASampler, DQASampler and PTSampler share (:class:`~isingattn.inference.dimod.samplers.IsingSampler`:
defaults overridden per call, unknown keys refused, ``seed``, the empty BQM, BINARY models
sampled as their SPIN view, a ``dimod.SampleSet`` of ``num_reads`` rows with the BQM's own
energies)."""

from __future__ import annotations

import dataclasses
from collections import deque

import jax.numpy as jnp
import numpy as np

from isingattn.errors import IsingInputError
from isingattn.inference.dimod import ocean
from isingattn.inference.dimod.ocean import OCEAN_DEFAULTS
from isingattn.inference.dimod.samplers import PAD_TO, IsingSampler, check_beta, edge_list
from isingattn.inference.mcmc.swendsen_wang import SwendsenWang
from isingattn.model import IsingModel
from isingattn.sparse import SparseCouplings
from isingattn.validate import nonneg_int, positive_int

__all__ = ["SwendsenWangSampler", "ferromagnetic_gauge"]

_SW_DEFAULTS = dict(num_reads=10, beta=1.0, num_sweeps=100, **OCEAN_DEFAULTS)


def ferromagnetic_gauge(n: int, edges: np.ndarray, weights: np.ndarray):
    """``(tau, frustrated)``: signs ``tau [n]`` (±1) with ``tau_i tau_j J_ij ≥ 0`` on as many
    edges as a spanning forest fixes, and the number of edges left negative (0 exactly when
    the model is unfrustrated: every cycle has an even number of negative couplings).
    ``edges [E, 2]``, ``weights [E]``: the couplings in this package's sign (``J > 0``
    ferromagnetic). The substitution ``s_i -> tau_i s_i`` maps the model onto one with
    couplings ``tau_i tau_j J_ij`` and fields ``tau_i h_i`` and the same energies."""
    adj = [[] for _ in range(n)]
    for (i, j), w in zip(edges.tolist(), weights.tolist()):
        if w != 0:
            adj[i].append((j, w < 0))
            adj[j].append((i, w < 0))
    tau = np.zeros(n, np.int8)
    for root in range(n):  # breadth-first over each component; a negative edge flips the sign
        if tau[root]:
            continue
        tau[root] = 1
        queue = deque([root])
        while queue:
            i = queue.popleft()
            for j, neg in adj[i]:
                if not tau[j]:
                    tau[j] = -tau[i] if neg else tau[i]
                    queue.append(j)
    if len(edges):
        frustrated = int(np.sum(tau[edges[:, 0]] * tau[edges[:, 1]] * weights < 0))
    else:
        frustrated = 0
    return tau, frustrated


class SwendsenWangSampler(IsingSampler):
    """Swendsen–Wang cluster sampling (:class:`~isingattn.inference.mcmc.swendsen_wang.SwendsenWang`)
    as a ``dimod.Sampler`` that samples ``exp(-β E_bqm)`` at the β it is given.

    Parameters (defaults at construction, overridden per call): ``num_reads`` (10),
    ``beta`` (1.0, in the BQM's energy units: the dimod convention ``E = Σ a_i s_i + Σ b_ij
    s_i s_j + offset``, so a ferromagnetic coupling is ``b_ij < 0``; the offset does not
    change the distribution), ``num_sweeps`` (100 cluster moves per read), ``seed``, and
    Ocean's ``initial_states`` (a read's chain starts there), ``initial_states_generator``
    and ``interrupt_function``, with SQASampler's semantics
    (``ocean.reads``: reads in calls of at
    most ``READS_PER_CALL``, the interrupt asked between calls, ``num_sweeps=0`` returns the
    initial states). Each read is the final state of its own chain, so reads are
    independent and the set is reproducible from the seed.

    Couplings: Swendsen–Wang is exact for ferromagnets. A BQM with antiferromagnetic
    couplings (``b_ij > 0``) is accepted only when a change of sign of some spins
    (``s_i -> τ_i s_i``, a gauge transformation: same energies, found by a breadth-first
    search) makes every coupling ferromagnetic, which is the case exactly when the model
    is not frustrated (every cycle has an even number of antiferromagnetic couplings; any
    tree or bipartite antiferromagnet). ``info["gauge_flips"]`` counts the spins whose sign
    was changed. A frustrated BQM is refused with ``IsingInputError``, naming its
    antiferromagnetic couplings and the cycles' conflict: no cluster measure exists for it
    (use PTSampler).
    """

    DEFAULTS = _SW_DEFAULTS

    def _check(self, p) -> SwendsenWang:
        own = "SwendsenWangSampler"
        check_beta(p["beta"])
        ocean.check(p)
        num_sweeps = nonneg_int("num_sweeps", p["num_sweeps"], owner=own)  # 0: the initial states, unchanged
        return SwendsenWang(num_warmup=max(num_sweeps, 1) - 1, num_samples=1,
                            num_chains=positive_int("num_reads", p["num_reads"], owner=own), diagnostics=False,
                            keep_samples=True)

    def _properties(self) -> dict:
        return {"thermal": True, "couplings": "ferromagnetic, or unfrustrated (gauged)"}

    def _info(self, p, engine: SwendsenWang) -> dict:
        return {"beta": float(p["beta"]), "num_sweeps": int(p["num_sweeps"])}

    def _sample(self, bqm, p, engine: SwendsenWang, seed):
        model = IsingModel.from_bqm(bqm, beta=float(p["beta"]))  # SPIN view: h = -linear, J = -quadratic
        n, labels = model.n, model.labels
        J = model.J
        edges, w = edge_list(J)
        negative = int(np.sum(w < 0))
        tau = np.ones(n, np.int8)
        if negative:
            tau, frustrated = ferromagnetic_gauge(n, edges, w)
            if frustrated:
                raise IsingInputError(
                    f"SwendsenWangSampler: the BQM has {negative} antiferromagnetic coupling(s) (quadratic biases > 0 "
                    f"in the SPIN view) on a frustrated graph: whatever spins are relabelled, {frustrated} of them stay "
                    "antiferromagnetic (some cycle has an odd number of them). Swendsen–Wang has no cluster measure for "
                    "such a model; use PTSampler or dwave-samplers' SimulatedAnnealingSampler.")
        t = jnp.asarray(tau, model.dtype)
        h = model.h * t
        if isinstance(J, SparseCouplings):
            J = J.with_weights(J.weights * t[J.graph.edges[:, 0]] * t[J.graph.edges[:, 1]])
        else:
            J = J * t[:, None] * t[None, :]
        if not isinstance(J, SparseCouplings):  # masked padding: similar sizes share one compilation
            m = -(-n // PAD_TO) * PAD_TO
            model = IsingModel(jnp.pad(h, (0, m - n)), jnp.pad(J, ((0, m - n), (0, m - n))), model.beta,
                               mask=jnp.arange(m) < n)
        else:
            model = IsingModel(h, J, model.beta)
            m = n

        def run(key, init, c):  # the chains start at the gauged initial states
            init = jnp.asarray(init * np.pad(tau, (0, init.shape[1] - n)), model.dtype)
            out = dataclasses.replace(engine, num_chains=c, init=init).marginals(model, key=key)
            return np.asarray(out.samples)[:, :n] * tau, {}

        spins, _, interrupted, t = ocean.reads(bqm, labels, p, seed, run, width=m)
        return spins, labels, {"gauge_flips": int(np.sum(tau < 0)), "interrupted": interrupted}, t
