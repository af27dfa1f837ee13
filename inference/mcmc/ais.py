"""Annealed importance sampling (Neal 2001): log Z, and marginals, of an Ising model.

Chains start at β = 0, where the uniform distribution over the active spins is exact and
``log Z_0 = n_active · log 2``, and are annealed through ``0 = β_0 < β_1 < ... < β_K = β``.
Before the move to ``β_k`` each chain's log weight gains ``-(β_k - β_{k-1}) E(s)``; then
the chain makes ``sweeps_per_temp`` moves at ``β_k`` with the ``transition`` kernel:

* ``"gibbs"`` (the default): heat-bath sweeps, the kernel of
  :class:`~isingattn.inference.mcmc.gibbs.Gibbs` (dense or sparse couplings, systematic or
  coloured sweeps), for any couplings;
* ``"swendsen-wang"``: Swendsen–Wang cluster moves, the kernel of
  :class:`~isingattn.inference.mcmc.swendsen_wang.SwendsenWang`, for ``J ≥ 0`` only (a model
  with a negative coupling is refused). Near and above a ferromagnet's critical coupling
  single-spin sweeps do not carry the chains through the transition (a few chains then
  carry the weight, and the SE underestimates the error); cluster moves do.

With ``C`` chains and weights ``w_c``:

* ``log Z = log Z_0 + log mean_c w_c``: ``Z`` itself is unbiased, ``log Z`` is biased low
  by about half its variance;
* ``info["log_z_se"]``: the delta-method standard error ``sd(w) / (sqrt(C) mean(w))``,
  which is ``sqrt((Σ p_c² - 1/C) · C/(C-1))`` in the normalized weights ``p``;
* ``info["weight_ess"] = 1 / Σ p_c²``, the chains' effective number;
* the marginals are the ``p``-weighted means of the final states (the samples at β),
  differentiable through the weighted fluctuation–dissipation identities
  (:func:`isingattn.fluctuation.weighted_sample_marginals`), as is ``log Z``.

Cost: ``num_temps · sweeps_per_temp`` moves of every chain, the chains a batch axis of
one state (no vmap). With Gibbs the energies come from the sweeps' own changes; with
Swendsen–Wang (a move costs a cluster labelling, several ``O(E)`` rounds) the energy is
computed exactly once per temperature. The variance of the weights
grows with the work dissipated by annealing too fast: raise ``num_temps`` when
``weight_ess`` is small against ``num_chains`` or ``log_z_se`` is large.

For log Z by default use population annealing (``"pa"``,
:class:`~isingattn.inference.mcmc.PopulationAnnealing`): its ladder adapts to the
model, resampling keeps the weights even, and its SE is calibrated over seeds, where
AIS's fixed ladder must be sized by hand (the default 512 temperatures leave the error
several SE on 32×32 and 64×64 tori at and above K_c, with a weight ESS near 1). Given
the same number of sweeps as a population-annealing run, AIS with Swendsen–Wang moves
was about as accurate on 16×16 tori, and on 32×32 at K_c its SE understated its error
(benchmarks/README.md, "Population annealing: free energies").
"""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import prng
from isingattn import validate as V
from isingattn.energy import energy
from isingattn.errors import IsingInputError
from isingattn.fluctuation import weighted_sample_marginals
from isingattn.inference.mcmc.base import ColouredSweep
from isingattn.inference.mcmc.coloring import SCHEDULES, as_classes
from isingattn.inference.mcmc.driver import noise_chunk
from isingattn.inference.mcmc.gibbs_kernel import GibbsState, init_spins, sweep_with_thresholds
from isingattn.inference.mcmc.swendsen_wang_kernel import (
    SwendsenWangState,
    count_negative,
    negative_coupling_error,
    swendsen_wang_sweep,
)
from isingattn.marginals import Label, Marginals
from isingattn.model import IsingModel, is_traced
from isingattn.sparse import SparseCouplings

SPACINGS = ("linear", "quadratic")
TRANSITIONS = ("gibbs", "swendsen-wang")
MIN_WEIGHT_ESS = 10  # effective chains below which the weights vouch for nothing (the ESS is always ≥ 1)


def beta_fractions(num_temps: int, spacing: str = "linear") -> np.ndarray:
    """``[num_temps]`` fractions ``β_k / β`` for ``k = 1..K`` (``β_K = β``): ``"linear"``
    ``k/K``, or ``"quadratic"`` ``(k/K)²`` (more steps near β = 0, where the entropy
    dominates and weights vary little; fewer at high β)."""
    x = np.arange(1, num_temps + 1, dtype=np.float64) / num_temps
    return x if spacing == "linear" else x**2


def anneal(key, h, J, beta, active, shape, fractions, *, num_chains: int, sweeps_per_temp: int = 1, classes=None):
    """Anneal ``num_chains`` chains from β = 0 to ``beta`` through ``beta · fractions``.

    Args:
        h, J: ``h [*batch, n]``, ``J [*batch, n, n]`` or :class:`~isingattn.sparse.SparseCouplings`;
        active ``[*batch, n]`` bool or None; shape ``(*batch, n)``; fractions ``[K]``
        increasing in (0, 1], the last 1.
    Returns:
        ``spins [C, *batch, n]`` (the final states), ``log_w [C, *batch]`` (log weights, without
        ``log Z_0``) and ``energy [C, *batch]`` of the final states.

    The loop is Gibbs's (:func:`~isingattn.inference.mcmc.gibbs.run_chains`): spins carried
    spin-major, the logistic noise of ``NOISE_CHUNK`` sweeps drawn at once and scaled by
    each sweep's ``1/2β``, and the energy that the weights need tracked from each sweep's
    own change (``GibbsInfo.delta_energy``), recomputed exactly once a chunk. An energy per
    temperature would cost as much as a sweep on a sparse graph.
    """
    dtype = h.dtype
    shape = tuple(shape)
    J = J.astype(dtype).with_table() if isinstance(J, SparseCouplings) else jnp.asarray(J, dtype)
    betas = jnp.asarray(beta, dtype) * jnp.asarray(np.concatenate([[0.0], np.asarray(fractions)]), dtype)
    spt = sweeps_per_temp
    total = (betas.shape[0] - 1) * spt  # sweeps; sweep t runs at betas[t // spt + 1]
    k_init, k_run = jax.random.split(key)
    s = init_spins(k_init, (num_chains,) + shape, active, dtype).spins  # exact at β = 0
    to_t = lambda x: jnp.moveaxis(x, -1, 0)  # [C, *batch, n] -> [n, C, *batch]
    from_t = lambda x: jnp.moveaxis(x, 0, -1)
    L = noise_chunk(total, num_chains * int(np.prod(shape)))
    keys = jax.random.split(k_run, -(-total // L))

    def sweep(t, carry, noise):
        s_t, E, log_w = carry
        k = t // spt
        b_prev, b = betas[k], betas[k + 1]
        # entering β_k: the weight gains -(β_k - β_{k-1}) E(s), then the chain moves at β_k
        log_w = log_w - jnp.where(t % spt == 0, (b - b_prev) * E, 0)
        new, info = sweep_with_thresholds(from_t(noise * (0.5 / b)), GibbsState(from_t(s_t)), h, J, classes)
        return to_t(new.spins), E + info.delta_energy, log_w

    def chunk(c, carry):
        s_t, log_w = carry
        noise = prng.logistic(keys[c], (L,) + s_t.shape, dtype)  # [L, n, C, *batch]
        E = energy(h, J, from_t(s_t))  # exact once a chunk: no drift builds up
        inner = lambda j, cr: sweep(c * L + j, cr, noise[j])
        s_t, _, log_w = lax.fori_loop(0, jnp.minimum(L, total - c * L), inner, (s_t, E, log_w))
        return s_t, log_w

    log_w = jnp.zeros((num_chains,) + shape[:-1], dtype)
    s_t, log_w = lax.fori_loop(0, keys.shape[0], chunk, (to_t(s), log_w))
    s = from_t(s_t)
    return s, log_w, energy(h, J, s)


def anneal_swendsen_wang(key, h, J, beta, active, shape, fractions, *, num_chains: int, sweeps_per_temp: int = 1):
    """:func:`anneal` with Swendsen–Wang moves (``J ≥ 0``; not checked here) in place of
    Gibbs sweeps: same arguments (no sweep classes), same initial states for the same key,
    same returns (``spins [C, *batch, n]``, ``log_w [C, *batch]``, ``energy [C, *batch]``).

    Each temperature computes the energy exactly once, adds ``-(β_k - β_{k-1}) E(s)`` to
    the log weights, then makes ``sweeps_per_temp`` moves of
    :func:`~isingattn.inference.mcmc.swendsen_wang_kernel.swendsen_wang_sweep` at ``β_k``,
    move ``t`` drawing from ``fold_in(key, t)``. A move's labelling costs several ``O(E)``
    rounds, so the energy (one ``O(E)`` pass) adds little.
    """
    dtype = h.dtype
    shape = tuple(shape)
    J = J.astype(dtype) if isinstance(J, SparseCouplings) else jnp.asarray(J, dtype)
    betas = jnp.asarray(beta, dtype) * jnp.asarray(np.concatenate([[0.0], np.asarray(fractions)]), dtype)
    spt = sweeps_per_temp
    k_init, k_run = jax.random.split(key)
    s = init_spins(k_init, (num_chains,) + shape, active, dtype).spins  # exact at β = 0, as anneal's

    def temperature(k, carry):
        s, log_w = carry
        log_w = log_w - (betas[k + 1] - betas[k]) * energy(h, J, s)

        def move(j, s):
            new, _ = swendsen_wang_sweep(jax.random.fold_in(k_run, k * spt + j), SwendsenWangState(s), h, J,
                                         betas[k + 1])
            return new.spins

        return lax.fori_loop(0, spt, move, s), log_w

    log_w = jnp.zeros((num_chains,) + shape[:-1], dtype)
    s, log_w = lax.fori_loop(0, betas.shape[0] - 1, temperature, (s, log_w))
    return s, log_w, energy(h, J, s)


class AIS(ColouredSweep):
    """Annealed importance sampling from β = 0 (see the module docstring); ``"ais"``.

    Config (static): ``num_chains`` (256), ``num_temps`` (``K``, 512), ``sweeps_per_temp``
    (1: moves per temperature), ``spacing`` of the β ladder (``"linear"`` or
    ``"quadratic"``), ``transition`` (``"gibbs"`` or ``"swendsen-wang"``: the move at each
    temperature, see the module docstring), and the Gibbs sweep order ``schedule``/``colors``
    as in :class:`~isingattn.inference.mcmc.gibbs.Gibbs` (unused by Swendsen–Wang).

    With ``transition="swendsen-wang"`` a concrete model with a negative coupling is refused
    (``IsingInputError``); under ``jax.jit`` the couplings cannot be read, so ``J ≥ 0`` is
    expected and a negative coupling makes ``converged`` False.

    ``marginals(model, *, key)`` returns:

    * ``log_z [*batch]``, ``info["log_z_kind"] == "estimate"``, ``info["log_z_se"]``;
    * ``mean [*batch, n]`` and ``corr``: weighted moments of the final states;
    * ``samples [*batch, num_chains, n]``: the final states (weighted: see ``info["weights"]``);
    * ``info["weights"] [*batch, C]`` (normalized), ``info["weight_ess"] [*batch]``,
      ``info["energy"] [*batch, C, 1]`` (the energy of each chain's one kept draw) and
      ``info["converged"] [*batch]``: ``weight_ess ≥ max(num_chains / 10, 10)``, a heuristic
      that the weights are not dominated by a few chains (and, with Swendsen–Wang, that no
      coupling is negative). The ESS is at least 1 whatever the weights, so fewer than 10
      effective chains never count: with ``num_chains < 10`` the run is never converged.
    """

    num_chains: int = eqx.field(static=True, default=256, converter=V.plain)
    num_temps: int = eqx.field(static=True, default=512, converter=V.plain)
    sweeps_per_temp: int = eqx.field(static=True, default=1, converter=V.plain)
    spacing: str = eqx.field(static=True, default="linear")
    transition: str = eqx.field(static=True, default="gibbs")
    schedule: str = eqx.field(static=True, default="systematic")
    colors: Optional[tuple] = eqx.field(static=True, default=None, converter=as_classes)

    def __check_init__(self):
        o = "AIS"
        V.positive_int("num_temps", self.num_temps, owner=o)
        V.positive_int("sweeps_per_temp", self.sweeps_per_temp, owner=o)
        V.choice("spacing", self.spacing, SPACINGS, owner=o)
        V.choice("transition", self.transition, TRANSITIONS, owner=o)
        V.choice("schedule", self.schedule, SCHEDULES, owner=o)
        V.positive_int("num_chains", self.num_chains, owner=o)
        if self.num_chains < 2:
            raise IsingInputError(f"AIS needs num_chains >= 2 for a standard error; got {self.num_chains}.")

    needs_key: ClassVar[bool] = True
    sparse_native: ClassVar[bool] = True

    def _prepare(self, model: IsingModel) -> "AIS":
        """Gibbs: the sweep classes (:class:`~isingattn.inference.mcmc.base.ColouredSweep`).
        Swendsen–Wang: refuse a concrete model with a negative coupling (host side)."""
        if self.transition == "gibbs":
            return super()._prepare(model)
        J = model.J
        sparse = isinstance(J, SparseCouplings)
        if not is_traced(J.weights if sparse else J):
            bad = int(count_negative(J))
            if bad:
                total = f"{int(np.prod(J.weights.shape))} edge weights" if sparse else "the pairs i < j"
                raise negative_coupling_error(bad, total, owner='AIS(transition="swendsen-wang")')
        return self

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        n, dtype, batch = model.n, model.dtype, tuple(model.batch_shape)
        sg = lax.stop_gradient  # the chains carry no gradient; weighted_sample_marginals supplies it
        h, J, beta = sg(model.h), jax.tree_util.tree_map(sg, model.J), sg(model.beta)
        act = model.active()
        fractions = beta_fractions(self.num_temps, self.spacing)
        if self.transition == "swendsen-wang":
            s, log_w, E = anneal_swendsen_wang(key, h, J, beta, act, batch + (n,), fractions,
                                               num_chains=self.num_chains, sweeps_per_temp=self.sweeps_per_temp)
        else:
            s, log_w, E = anneal(key, h, J, beta, act, batch + (n,), fractions, num_chains=self.num_chains,
                                 sweeps_per_temp=self.sweeps_per_temp, classes=self._sweep_classes(model))
        C = self.num_chains
        log_w = jnp.moveaxis(log_w, 0, -1)  # [*batch, C]
        n_active = jnp.full(batch, n, dtype) if act is None else jnp.broadcast_to(act, batch + (n,)).sum(-1).astype(dtype)
        log_z = n_active * jnp.log(2.0).astype(dtype) + jax.nn.logsumexp(log_w, axis=-1) - jnp.log(C).astype(dtype)
        p = jax.nn.softmax(log_w, axis=-1)
        sum_p2 = jnp.sum(p * p, axis=-1)
        ess = 1.0 / sum_p2
        se = jnp.sqrt(jnp.maximum(sum_p2 - 1.0 / C, 0.0) * C / (C - 1))
        info = {"log_z_kind": Label("estimate"), "log_z_se": se, "weight_ess": ess, "weights": p,
                "energy": jnp.moveaxis(E, 0, -1)[..., None], "converged": ess >= max(C / 10, MIN_WEIGHT_ESS)}
        if self.transition == "swendsen-wang":
            info["negative_couplings"] = jnp.broadcast_to(count_negative(J), batch)
            info["converged"] = info["converged"] & (info["negative_couplings"] == 0)
        return weighted_sample_marginals(model, jnp.moveaxis(s, 0, -2), log_w, info, log_z=log_z)

    def _warning(self, flag, info, bad, total) -> str:
        neg = int(np.asarray(info.get("negative_couplings", 0)).max())
        if neg:
            return (f"AIS: the model has {neg} negative coupling(s); Swendsen–Wang moves need J ≥ 0, so the "
                    "estimate is not of this model. Use transition='gibbs'.")
        ess = np.asarray(info["weight_ess"])
        return (f"AIS: {bad} of {total} models have a weight ESS below max(num_chains / 10, {MIN_WEIGHT_ESS}) (lowest "
                f"{ess.min():.3g} of "
                f"{self.num_chains} chains): a few chains carry the estimate, and its standard error is itself "
                "unreliable. Raise num_temps (a slower anneal) or sweeps_per_temp, and num_chains (at least "
                f"{MIN_WEIGHT_ESS} effective chains are needed).")
