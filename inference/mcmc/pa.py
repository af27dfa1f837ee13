"""Population annealing (Hukushima & Iba 2003; Machta 2010; Wang, Machta & Katzgraber 2015):
log Z, with a standard error, and marginals of an Ising model.

A population of ``R`` replicas starts at β = 0, where the uniform distribution over the
active spins is exact and ``log Z_0 = n_active · log 2``, and is annealed to the model's β.
Each step, from ``β_k`` with energies ``E_r``:

1. ``β_{k+1}`` is chosen by bisection so that the weights ``w_r = exp(-(β_{k+1} - β_k) E_r)``
   of the pilot population (below) keep an effective sample size ``(Σw)² / (R Σw²)`` equal
   to ``target_ess`` (0.9), or taken from a fixed ladder (``fractions``);
2. ``log Z += log mean_r w_r`` (Del Moral, Doucet & Jasra 2006: the product of these means
   is an unbiased estimate of ``Z/Z_0`` for a ladder that the weights did not choose);
3. the population is resampled in proportion to ``w``: ``"systematic"`` (one uniform ``u``,
   the ``(u + i)/R`` quantiles; the default), ``"residual"`` (``floor(R w_r)`` copies, the
   rest multinomial) or ``"multinomial"``; every scheme gives each replica ``R w_r``
   offspring in expectation;
4. every replica makes moves at ``β_{k+1}``: Swendsen–Wang cluster moves
   (:mod:`~isingattn.inference.mcmc.swendsen_wang_kernel`, exact for ``J ≥ 0``, the default
   there) or heat-bath sweeps (:mod:`~isingattn.inference.mcmc.gibbs_kernel`, any ``J``), in
   rounds of ``moves_per_temp`` (2): after each round the pilot's autocorrelation since the
   resampling (``pa_kernel.autocorrelation``: the larger of
   the connected spin autocorrelation over the population and the correlation of the
   replicas' energies) is compared with ``decorrelation`` (0.25), and rounds go on while it
   is above, up to ``max_moves_per_temp`` (32). Copies of one resampled replica are then
   about as different as independent replicas, which is what keeps the families many where
   the moves mix slowly (a glass at low temperature), and costs few extra moves where they
   mix fast. ``info["moves"]`` has the moves of every step, ``info["moves_capped"]`` the
   steps that stopped at the cap. With a fixed ladder the moves are fixed too
   (``moves_per_temp``): there is no pilot to choose them.

All of it runs in one ``lax.while_loop`` on the device (static shapes: at most
``max_temps`` steps; the ladder is kept in a fixed-size array). ``num_populations``
independent populations are one batch axis of that loop, and share one ladder and the
number of moves. ``mesh`` (a ``jax.sharding.Mesh``) splits every population's replicas
over its devices (one host or several, under ``jax.distributed``); resampling draws from
the whole population (global), and the reductions over replicas run on gathered arrays or
on exact integer sums, so a split run gives the one-device run's samples and ``log Z``.

The pilot: an adaptive step chosen from a population's own weights biases that
population's ``log Ẑ`` low (the step is short exactly where the sampled energies spread
wide; on an 8×8 torus at K_c with R = 128 the mean of ``Ẑ`` over 256 populations was
``e^-0.041 ± 0.010`` of Kaufman's ``Z``). So population 0, the pilot, chooses the ladder
and its ``log Ẑ`` is left out; the other ``Q = num_populations - 1`` populations are
unbiased for ``Z`` given that ladder (the same test: ``e^-0.003 ± 0.011``). The pilot's
replicas still count in the marginals. With a fixed ladder there is no pilot (``Q = P``).

The estimate and its standard error, from ``log Ẑ_q`` of the ``Q`` populations:

* ``log Z = log mean_q exp(log Ẑ_q)`` (averaging ``Ẑ``, which is unbiased, leaves a bias
  of only about ``-Var(log Ẑ_q) / 2Q``);
* ``info["log_z_se"]`` is the larger of two estimates: the spread,
  ``sd_q(log Ẑ_q) / sqrt(Q)`` (``info["log_z_se_spread"]``, ``Q - 1`` degrees of freedom:
  alone it makes ``|z| > 2`` common), and the family variance
  ``sqrt(Σ_q (ρ_t,q - 1) / R) / Q`` (``info["log_z_se_families"]``; Chan & Lai 2013; with
  ``ρ_t`` of Wang, Machta & Katzgraber 2015, below), which comes from each population's
  ancestry and is not noisy the way a spread over a few populations is. Measured over 20
  keys (benchmarks/README.md, "Population annealing: free energies"), it is calibrated
  on a glassy strip and conservative on the critical torus (about 1.8× the spread of the
  errors).

Family statistics: every replica descends from one replica at β = 0 (its family); with
``n_f`` the descendants of family ``f``, ``ρ_t = R Σ_f (n_f / R)²`` and
``info["families_eff"] = R / ρ_t``, the equilibration population size of Wang, Machta &
Katzgraber: roughly how many independent replicas the final population holds. Few
families means the moves did not decorrelate the population: the marginals are then
biased and the family variance itself unreliable; ``converged`` asks for ``min_families``.

``target_se`` adds batches of populations (a host loop over compiled batches) until the
standard error is reached or ``max_populations`` have run; ``info["target_se_reached"]``
says which.

The marginals are the means of the final populations (equal weights after the last
resampling and its moves), differentiable through the fluctuation–dissipation identities
(:func:`isingattn.fluctuation.weighted_sample_marginals`), as is ``log Z``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh

from isingattn import validate as V
from isingattn.errors import IsingInputError
from isingattn.fluctuation import weighted_sample_marginals
from isingattn.inference.mcmc.base import ColouredSweep
from isingattn.inference.mcmc.coloring import SCHEDULES, as_classes
from isingattn.inference.mcmc.pa_kernel import PAResult, anneal_populations
from isingattn.inference.mcmc.resampling import RESAMPLING
from isingattn.inference.mcmc.swendsen_wang_kernel import count_negative, negative_coupling_error
from isingattn.marginals import Label, Marginals
from isingattn.model import IsingModel, is_traced
from isingattn.sharding import check_split
from isingattn.sparse import SparseCouplings

MOVES = ("auto", "swendsen-wang", "gibbs")
def _batched(model: IsingModel, J):
    """``(h [B, n], J's weights, their vmap axis, active [B, n] or None, B)`` of a model
    batch, flattened; couplings shared by the batch stay unbatched (axis None)."""
    batch, n = tuple(model.batch_shape), model.n
    B = int(np.prod(batch, dtype=int))
    h = jnp.broadcast_to(model.h, batch + (n,)).reshape(B, n)
    sparse = isinstance(J, SparseCouplings)
    w = J.weights if sparse else J
    core = 1 if sparse else 2
    if w.ndim == core:
        axis = None
    else:
        w = jnp.broadcast_to(w, batch + w.shape[-core:]).reshape((B,) + w.shape[-core:])
        axis = 0
    act = model.active()
    if act is not None:
        act = jnp.broadcast_to(act, batch + (n,)).reshape(B, n)
    return h, w, axis, act, B


# ---------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------


class PopulationAnnealing(ColouredSweep):
    """Population annealing from β = 0 (see the module docstring); ``"pa"``.

    Config (static):

    * ``num_replicas`` (``R``, 1024): replicas per population;
    * ``num_populations`` (``P``, 4): independent populations, for the SE; with the adaptive
      ladder at least 3 (population 0 is the pilot), with ``fractions`` at least 2;
    * ``moves``: ``"auto"`` (Swendsen–Wang when every coupling of the concrete model is
      ``≥ 0``, else Gibbs; Gibbs for traced couplings), ``"swendsen-wang"`` (a negative
      coupling is refused) or ``"gibbs"``; ``moves_per_temp`` (2): the moves of a round, the
      least per temperature; ``max_moves_per_temp`` (32): the most (equal to
      ``moves_per_temp``: a fixed number); ``decorrelation`` (0.25): the pilot's
      autocorrelation since resampling below which the rounds stop;
    * ``target_ess`` (0.9): the ESS fraction each adaptive step keeps; ``max_temps`` (1024):
      the most steps; ``fractions``: a fixed ladder ``β_k/β`` (a tuple, increasing, the last
      1) in place of the adaptive one;
    * ``resampling``: ``"systematic"``, ``"residual"`` or ``"multinomial"``;
    * ``min_families`` (20): the least ``families_eff`` of a converged run (a heuristic: the
      32×32 torus at K = 0.6 keeps about 36 of R = 1024 with the defaults, and is accurate);
    * ``target_se`` (None): add batches of ``num_populations`` populations until
      ``log_z_se ≤ target_se`` or ``max_populations`` (64) have run; the run then leaves
      ``jax.jit`` for a host loop between compiled batches (under a caller's ``jax.jit``
      one batch runs);
    * ``schedule``/``colors``: the Gibbs sweep order, as in :class:`~isingattn.inference.mcmc.gibbs.Gibbs`;
    * ``mesh`` (None): a ``jax.sharding.Mesh`` over which each population's replicas are
      split (``num_replicas`` a multiple of its device count, else ``IsingInputError``);
      resampling stays global and the results are the one-device run's.

    ``marginals(model, *, key)`` returns:

    * ``log_z [*batch]`` with ``info["log_z_kind"] == "estimate"``, ``info["log_z_se"]``
      ``[*batch]`` (the larger of ``info["log_z_se_spread"]`` and
      ``info["log_z_se_families"]``), ``info["log_z_populations"] [*batch, P]`` and
      ``info["log_z_estimating"] [*batch, P]`` (False for the pilot);
    * ``mean [*batch, n]`` and ``corr`` (dense couplings): the final populations' moments;
    * ``samples [*batch, P·R, n]``: the final populations, population-major;
    * ``info["num_temps"] [*batch]`` (the most steps any population took),
      ``info["ladder"] [*batch, P, T + 1]`` (the same ladder in every row) and
      ``info["ess"] [*batch, P, T]`` (each population's ESS fraction at each step; ``T``:
      ``max_temps`` or the fixed ladder's length; NaN after the last step),
      ``info["families_eff"] [*batch]`` (the smallest over the populations),
      ``info["moves"] [*batch, P, T]`` (int32, the moves after each step; 0 after the last),
      ``info["decorrelation"] [*batch, P, T]`` (the pilot's autocorrelation after them; NaN
      with fixed moves), ``info["moves_per_temp"] [*batch]`` (their mean over the steps),
      ``info["moves_capped"] [*batch]`` (steps that stopped at ``max_moves_per_temp``),
      ``info["sweeps"] [*batch]`` (replica-moves in all: the budget), ``info["num_populations"]``,
      ``info["reached_beta"]``;
    * ``info["converged"] [*batch]``: every population reached β, ``families_eff ≥
      min_families``, a finite SE and (with ``target_se``) ``log_z_se ≤ target_se``; with
      Swendsen–Wang moves also that no coupling is negative. The warning says which failed.
    """

    num_replicas: int = eqx.field(static=True, default=1024, converter=V.plain)
    num_populations: int = eqx.field(static=True, default=4, converter=V.plain)
    moves: str = eqx.field(static=True, default="auto")
    moves_per_temp: int = eqx.field(static=True, default=2, converter=V.plain)
    max_moves_per_temp: int = eqx.field(static=True, default=32, converter=V.plain)
    decorrelation: float = eqx.field(static=True, default=0.25, converter=V.plain)
    target_ess: float = eqx.field(static=True, default=0.9, converter=V.plain)
    max_temps: int = eqx.field(static=True, default=1024, converter=V.plain)
    fractions: Optional[tuple] = eqx.field(static=True, default=None, converter=V.plain)
    resampling: str = eqx.field(static=True, default="systematic")
    min_families: float = eqx.field(static=True, default=20.0, converter=V.plain)
    target_se: Optional[float] = eqx.field(static=True, default=None, converter=V.plain)
    max_populations: int = eqx.field(static=True, default=64, converter=V.plain)
    schedule: str = eqx.field(static=True, default="systematic")
    colors: Optional[tuple] = eqx.field(static=True, default=None, converter=as_classes)
    mesh: Optional[Mesh] = eqx.field(static=True, default=None)

    def __check_init__(self):
        o = "PopulationAnnealing"
        V.positive_int("num_replicas", self.num_replicas, owner=o)
        V.positive_int("num_populations", self.num_populations, owner=o)
        V.positive_int("moves_per_temp", self.moves_per_temp, owner=o)
        V.positive_int("max_temps", self.max_temps, owner=o)
        V.positive_int("max_moves_per_temp", self.max_moves_per_temp, owner=o)
        V.float_in("decorrelation", self.decorrelation, 0.0, 1.0, owner=o, hi_open=True)
        check_split(self.mesh, self.num_replicas, "num_replicas", o)
        V.positive_int("max_populations", self.max_populations, owner=o)
        V.float_in("target_ess", self.target_ess, 0.0, 1.0, owner=o, lo_open=True, hi_open=True)
        V.float_in("min_families", self.min_families, 0.0, owner=o)
        V.choice("moves", self.moves, MOVES, owner=o)
        V.choice("resampling", self.resampling, RESAMPLING, owner=o)
        V.choice("schedule", self.schedule, SCHEDULES, owner=o)
        if self.max_moves_per_temp < self.moves_per_temp:
            raise IsingInputError(f"{o}: max_moves_per_temp ({self.max_moves_per_temp}) must be ≥ moves_per_temp "
                                  f"({self.moves_per_temp}), the least moves per temperature.")
        if self.num_replicas < 2:
            raise IsingInputError(f"{o}: num_replicas must be ≥ 2 (a population to resample); got "
                                  f"{self.num_replicas}.")
        least = 2 if self.fractions is not None else 3  # an adaptive ladder's pilot does not count
        if self.num_populations < least:
            raise IsingInputError(f"{o} needs num_populations ≥ {least} for a standard error (with an adaptive "
                                  f"ladder population 0 is the pilot that chooses it); got {self.num_populations}.")
        if self.target_se is not None:
            V.positive_float("target_se", self.target_se, owner=o)
            if self.max_populations < self.num_populations:
                raise IsingInputError(f"{o}: max_populations ({self.max_populations}) must be ≥ num_populations "
                                      f"({self.num_populations}).")
        if self.fractions is not None:
            try:
                f = np.asarray(self.fractions, dtype=np.float64)
            except (TypeError, ValueError):
                f = np.zeros((0,))
            if (not isinstance(self.fractions, (tuple, list)) or f.ndim != 1 or f.size == 0
                    or not np.all(np.isfinite(f)) or np.any(np.diff(f) <= 0) or f[0] <= 0 or f[-1] != 1.0):
                raise IsingInputError(f"{o}: fractions must be a tuple of β_k/β, increasing in (0, 1] and ending at "
                                      f"1; got {self.fractions!r}.")

    needs_key: ClassVar[bool] = True
    sparse_native: ClassVar[bool] = True

    @property
    def jit(self) -> bool:
        """Traced under ``eqx.filter_jit``, except with ``target_se``: then a host loop adds
        populations between compiled batches."""
        return self.target_se is None

    def _prepare(self, model: IsingModel) -> "PopulationAnnealing":
        """Resolve ``moves="auto"`` from the concrete couplings (traced: Gibbs), refuse a
        negative coupling for Swendsen–Wang, and colour the Gibbs sweep (host side)."""
        J = model.J
        sparse = isinstance(J, SparseCouplings)
        traced = is_traced(J.weights if sparse else J)
        eng = self
        if self.moves != "gibbs" and not traced:
            bad = int(count_negative(J))
            if bad and self.moves == "swendsen-wang":
                total = f"{int(np.prod(J.weights.shape))} edge weights" if sparse else "the pairs i < j"
                raise negative_coupling_error(bad, total, owner='PopulationAnnealing(moves="swendsen-wang")')
            if self.moves == "auto":
                eng = dataclasses.replace(self, moves="gibbs" if bad else "swendsen-wang")
        elif self.moves == "auto":
            eng = dataclasses.replace(self, moves="gibbs")
        if eng.moves == "gibbs":
            return ColouredSweep._prepare(eng, model)
        return eng

    def _run(self, model: IsingModel, key) -> PAResult:
        """One batch of ``num_populations`` populations for every model of the batch:
        :class:`PAResult` with a leading flattened batch axis ``[B, ...]``."""
        sg = lax.stop_gradient  # the populations carry no gradient; weighted_sample_marginals supplies it
        J = jax.tree_util.tree_map(sg, model.J)
        h, w, axis, act, B = _batched(model, J)
        moves = "gibbs" if self.moves == "auto" else self.moves
        sparse = isinstance(J, SparseCouplings)
        classes = self._sweep_classes(model) if moves == "gibbs" else None

        def one(k, hh, ww, aa):
            JJ = J.with_weights(ww) if sparse else ww
            return anneal_populations(k, sg(hh), JJ, sg(model.beta), aa, num_replicas=self.num_replicas,
                                      num_populations=self.num_populations, moves=moves,
                                      moves_per_temp=self.moves_per_temp,
                                      max_moves_per_temp=self.max_moves_per_temp, decorrelation=self.decorrelation,
                                      target_ess=self.target_ess, max_temps=self.max_temps, fractions=self.fractions,
                                      resampling=self.resampling, classes=classes, mesh=self.mesh)

        keys = jax.random.split(key, B)
        return jax.vmap(one, in_axes=(0, 0, axis, None if act is None else 0))(keys, h, w, act)

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        if self.target_se is None or is_traced(model.h, key):
            return self._assemble(model, self._run(model, key))
        runs = [_compiled_run(self, model, key)]
        while self.num_populations * len(runs) < self.max_populations:
            log_z, fam, est = (jnp.concatenate(x, axis=1) for x in
                               zip(*((r.log_z, r.families_eff, r.estimating) for r in runs)))
            if bool(jnp.all(_combine(log_z, fam, est, self.num_replicas)[1] <= self.target_se)):
                break
            runs.append(_compiled_run(self, model, jax.random.fold_in(key, len(runs))))
        return self._assemble(model, PAResult(*(jnp.concatenate(parts, axis=1) for parts in zip(*runs))))

    def _assemble(self, model: IsingModel, res: PAResult) -> Marginals:
        """The :class:`~isingattn.marginals.Marginals` of populations ``res`` (``[B, P, ...]``)."""
        n, dtype, batch = model.n, model.dtype, tuple(model.batch_shape)
        act = model.active()
        P = res.log_z.shape[-1]
        n_active = (jnp.full(batch, n, dtype) if act is None
                    else jnp.broadcast_to(act, batch + (n,)).sum(-1).astype(dtype))
        log_zp = res.log_z.reshape(batch + (P,)) + n_active[..., None] * jnp.log(2.0).astype(dtype)
        b = lambda x: x.reshape(batch + x.shape[1:])
        est = b(res.estimating)
        moves = b(res.moves)
        total = jnp.sum(moves, axis=(-2, -1)).astype(dtype)  # moves made, all populations
        adaptive = self.fractions is None and self.max_moves_per_temp > self.moves_per_temp
        log_z, se, se_spread, se_fam = _combine(log_zp, b(res.families_eff), est, self.num_replicas)
        fam = jnp.min(b(res.families_eff), axis=-1)
        reached = jnp.all(b(res.reached), axis=-1)
        converged = reached & (fam >= self.min_families) & jnp.isfinite(se)
        info = {"log_z_kind": Label("estimate"), "log_z_se": se, "log_z_se_spread": se_spread,
                "log_z_se_families": se_fam, "log_z_populations": log_zp, "log_z_estimating": est,
                "num_temps": jnp.max(b(res.num_temps), axis=-1), "ladder": b(res.ladder), "ess": b(res.ess),
                "families_eff": fam, "reached_beta": reached, "moves": moves, "decorrelation": b(res.decorrelation),
                "moves_per_temp": total / jnp.maximum(jnp.sum(b(res.num_temps), axis=-1), 1),
                # steps whose rounds stopped at the cap with the pilot's autocorrelation still above
                "moves_capped": jnp.sum((b(res.decorrelation) > self.decorrelation) & ~est[..., None], axis=(-2, -1))
                if adaptive else jnp.zeros(batch, jnp.int32),
                "sweeps": total * self.num_replicas, "num_populations": jnp.full(batch, P, jnp.int32)}
        if self.target_se is not None:
            info["target_se_reached"] = se <= self.target_se
            converged = converged & info["target_se_reached"]
        if self.moves == "swendsen-wang":
            info["negative_couplings"] = jnp.broadcast_to(count_negative(model.J), batch)
            converged = converged & (info["negative_couplings"] == 0)
        info["converged"] = converged
        s = res.spins.reshape(batch + (P * self.num_replicas, n))
        log_w = jnp.zeros(s.shape[:-1], dtype)  # equal weights after the last resampling
        return weighted_sample_marginals(model, s, log_w, info, log_z=log_z)

    def _warning(self, flag, info, bad, total) -> str:
        o = "PopulationAnnealing"
        neg = int(np.asarray(info.get("negative_couplings", 0)).max())
        if neg:
            return (f"{o}: the model has {neg} negative coupling(s); Swendsen–Wang moves need J ≥ 0, so the "
                    "estimate is not of this model. Use moves='gibbs'.")
        why = []
        reached = np.asarray(info["reached_beta"])
        if not reached.all():
            why.append(f"{int((~reached).sum())} did not reach β in {self.max_temps} steps (raise max_temps or lower "
                       "target_ess)")
        fam = np.asarray(info["families_eff"])
        if (fam < self.min_families).any():
            why.append(f"the fewest effective families is {fam.min():.3g} < min_families={self.min_families:g}: the "
                       "moves did not decorrelate the population (raise num_replicas or max_moves_per_temp, or "
                       "lower decorrelation)" + (f"; {int(np.asarray(info['moves_capped']).max())} steps stopped "
                                                 f"at max_moves_per_temp={self.max_moves_per_temp}"
                                                 if np.asarray(info["moves_capped"]).any() else ""))
        if "target_se_reached" in info and not np.asarray(info["target_se_reached"]).all():
            se = np.asarray(info["log_z_se"])
            why.append(f"log_z_se {np.nanmax(se):.3g} is above target_se={self.target_se:g} after "
                       f"{int(np.asarray(info['num_populations']).max())} populations, the most allowed "
                       f"(raise max_populations or num_replicas)")
        if not np.isfinite(np.asarray(info["log_z_se"])).all():
            why.append("the standard error is not finite")
        return f"{o}: {bad} of {total} models are not converged: " + "; ".join(why) + "."


def _combine(log_zp, families_eff, estimating, num_replicas: int):
    """``(log Z, SE, SE from the spread, SE from the families)`` of populations' estimates
    ``log_zp [..., P]``, their ``families_eff [..., P]`` and the ``estimating [..., P]`` mask
    (``Q`` of them): ``log Z = log mean_q Ẑ_q``, and the SE is the larger of
    ``sd_q(log Ẑ_q) / sqrt(Q)`` and ``sqrt(Σ_q (ρ_t,q - 1) / R) / Q``, the family (ancestry)
    variance of each population's estimate (Chan & Lai 2013; ``ρ_t / R = 1 / families_eff``,
    Wang, Machta & Katzgraber 2015)."""
    dtype = log_zp.dtype
    Q = jnp.sum(estimating, axis=-1).astype(dtype)
    log_z = jax.nn.logsumexp(jnp.where(estimating, log_zp, -jnp.inf), axis=-1) - jnp.log(Q)
    spread = jnp.std(log_zp, axis=-1, ddof=1, where=estimating) / jnp.sqrt(Q)
    var = jnp.maximum(1 / families_eff.astype(dtype) - 1 / num_replicas, 0)  # (ρ_t - 1) / R
    fam = jnp.sqrt(jnp.sum(jnp.where(estimating, var, 0), axis=-1)) / Q
    return log_z, jnp.maximum(spread, fam), spread, fam


@eqx.filter_jit
def _compiled_run(engine: PopulationAnnealing, model: IsingModel, key) -> PAResult:
    """One compiled batch of populations (the host loop of ``target_se``)."""
    return engine._run(model, key)
