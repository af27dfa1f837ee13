"""The population annealing loop (blackjax style: the kernel apart from the engine): one
``lax.while_loop`` that anneals ``P`` populations of ``R`` replicas of one model from β = 0
to β, with reweighting, resampling and moves at each step. The algorithm, the pilot ladder
and the estimates built on :class:`PAResult` are described in
:mod:`~isingattn.inference.mcmc.pa`, whose engine calls :func:`anneal_populations`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import prng
from isingattn.energy import energy
from isingattn.inference.mcmc.gibbs_kernel import GibbsState, init_spins, sweep_with_thresholds
from isingattn.inference.mcmc.resampling import adaptive_step, ess_fraction, resample
from isingattn.inference.mcmc.swendsen_wang_kernel import bond_probabilities, num_words, sweep_with_bits
from isingattn.sharding import gathered, split_along
from isingattn.sparse import SparseCouplings

MOVE_BLOCK = 256  # replicas per Swendsen–Wang block
class PAResult(NamedTuple):
    """What :func:`anneal_populations` returns for one model and ``P`` populations of ``R``.

    * spins ``[P, R, n]``: the final populations (equal weights);
    * log_z ``[P]``: ``log Ẑ_p - log Z_0``;
    * ladder ``[P, T + 1]``: ``β_0 = 0, β_1, ...``, NaN after the last step (``T = max_temps``);
    * ess ``[P, T]``: the ESS fraction of each step's weights, NaN after the last step;
    * num_temps ``[P]`` int32: the steps taken; reached ``[P]``: β was reached;
    * families_eff ``[P]``: ``R / ρ_t`` of the final population;
    * estimating ``[P]`` bool: the population's ``log Ẑ`` counts (False for the pilot);
    * moves ``[P, T]`` int32: the moves made after each step (0 after the last step);
    * decorrelation ``[P, T]``: the pilot's autocorrelation after them (:func:`autocorrelation`;
      NaN after the last step and where the number of moves was fixed).
    """

    spins: jax.Array
    log_z: jax.Array
    ladder: jax.Array
    ess: jax.Array
    num_temps: jax.Array
    reached: jax.Array
    families_eff: jax.Array
    estimating: jax.Array
    moves: jax.Array
    decorrelation: jax.Array


def autocorrelation(s0, s, E0, E):
    """How much a population ``s [R, n]`` (energies ``E [R]``) still remembers the state
    ``s0`` (``E0``) it had after resampling, before its moves: the larger of the connected
    spin autocorrelation over the population,
    ``(Σ_i <s0_i s_i> - <s0_i><s_i>) / Σ_i (1 - <s0_i>²)``, and the energy autocorrelation
    ``corr_r(E0_r, E_r)``. Both are 1 before any move and about 0 once every replica is
    independent of where it started: then copies of one resampled replica have drifted
    apart, which is what keeps the population's families many. (The spin term alone is blind
    to Swendsen–Wang at h = 0, whose flips of whole clusters zero it in one move while the
    cluster structure, and the energy, persist.) ``s`` may be split over devices: the spin
    sums are of ±1 and 0, exact in any order; ``E0``, ``E`` are gathered."""
    dtype = E.dtype
    R = s.shape[0]
    m0, m = jnp.sum(s0, axis=0) / R, jnp.sum(s, axis=0) / R  # integer sums: exact
    q = jnp.sum(s0 * s) / R
    var = jnp.sum(s0 * s0) / R - jnp.sum(m0 * m0)  # masked spins (0) add nothing
    spin = jnp.where(var > 0.5, (q - jnp.sum(m0 * m)) / jnp.maximum(var, 1), 0)
    e0, e = E0 - jnp.mean(E0), E - jnp.mean(E)
    den = jnp.sqrt(jnp.sum(e0 * e0) * jnp.sum(e * e))
    en = jnp.where(den > 0, jnp.sum(e0 * e) / jnp.where(den > 0, den, 1), 0)
    return jnp.maximum(spin, en).astype(dtype)


def _move_swendsen_wang(key, s, h, J, b, parallel: bool = False):
    """One Swendsen–Wang move of spins ``[P, R, n]``, population ``p`` at ``b[p]``, in blocks
    of ``MOVE_BLOCK`` replicas one after another: a block's state stays in cache, where the
    whole population's does not (16×16 torus: about 30% less CPU than one block of P·R).
    ``parallel``: the blocks side by side (``vmap``, the same numbers), so that a population
    split over devices moves on each device at once."""
    P, R, n = s.shape
    c = math.gcd(R, MOVE_BLOCK)
    k = R // c
    W = num_words(n, J)

    def block(args):
        key, sb, bb = args  # [c, n], scalar
        y0, y1 = prng.random_bits(key, -(-(W * c) // 2))
        bits = jnp.concatenate([y0, y1])[: W * c].reshape(W, c)
        probs = tuple(x[..., None] for x in bond_probabilities(h, J, bb, s.dtype, 0))  # the chain axis
        new_t, _, _ = sweep_with_bits(bits, sb.T, probs, J)  # node-major [n, c]
        return new_t.T

    args = (jax.random.split(key, P * k), s.reshape(P * k, c, n), jnp.repeat(b, k))
    out = jax.vmap(block)(args) if parallel else lax.map(block, args)
    return out.reshape(P, R, n)


def _move_gibbs(key, s, h, J, b, classes):
    """One heat-bath sweep of spins ``[P, R, n]``, population ``p`` at ``b[p]``: the new
    spins and each replica's energy change ``[P, R]``."""
    t = prng.logistic(key, s.shape, s.dtype) * (0.5 / b)[:, None, None]
    new, info = sweep_with_thresholds(t, GibbsState(s), h, J, classes)
    return new.spins, info.delta_energy


def anneal_populations(key, h, J, beta, active, *, num_replicas: int, num_populations: int, moves: str = "gibbs",
                       moves_per_temp: int = 2, max_moves_per_temp=None, decorrelation: float = 0.25,
                       target_ess: float = 0.9, max_temps: int = 1024, fractions=None, resampling: str = "systematic",
                       classes=None, mesh=None) -> PAResult:
    """Anneal ``num_populations`` independent populations of ``num_replicas`` replicas from
    β = 0 to ``beta`` (module docstring), one model.

    Args:
        h ``[n]``; J ``[n, n]`` or :class:`~isingattn.sparse.SparseCouplings` with weights
        ``[E]``; beta a scalar; active ``[n]`` bool or None; moves ``"gibbs"`` or
        ``"swendsen-wang"`` (``J ≥ 0``; not checked here); moves_per_temp: the least moves
        after each step; max_moves_per_temp: the most (None: as many as the least, a fixed
        number); between them the pilot's :func:`autocorrelation` since the resampling decides:
        moves go on while it is above ``decorrelation``; fractions: a fixed ladder ``β_k / β``
        ``[K]``, increasing, the last 1 (None: adaptive, at most ``max_temps`` steps, chosen
        from the pilot population 0 and shared by all; with a fixed ladder there is no pilot,
        and the moves are ``moves_per_temp``); classes: the Gibbs sweep's colour classes;
        mesh: None, or a ``jax.sharding.Mesh`` whose device count divides ``num_replicas``:
        the replicas axis is split over it (:func:`~isingattn.sharding.split_along`);
        resampling draws from the whole population, and every reduction over replicas runs on
        gathered arrays or on exact integer sums, so the result is the unsplit run's.
    Returns:
        :class:`PAResult`.
    """
    P, R = num_populations, num_replicas
    dtype = h.dtype
    n = h.shape[-1]
    J = J.astype(dtype) if isinstance(J, SparseCouplings) else jnp.asarray(J, dtype)
    if moves == "gibbs" and isinstance(J, SparseCouplings):
        J = J.with_table()
    beta = jnp.asarray(beta, dtype)
    if fractions is not None:
        fractions = jnp.asarray(np.asarray(fractions), dtype)
        T = fractions.shape[0]
    else:
        T = max_temps
    lo = moves_per_temp
    hi = lo if (max_moves_per_temp is None or fractions is not None) else max(lo, max_moves_per_temp)
    split = lambda x: split_along(x, mesh, 1)  # [P, R, ...]: the replicas over the devices
    k_init, k_run = jax.random.split(key)
    s = split(init_spins(k_init, (P, R, n), active, dtype).spins)  # exact at β = 0
    fam = jnp.broadcast_to(jnp.arange(R, dtype=jnp.int32), (P, R))
    nan = jnp.array(jnp.nan, dtype)
    ladder = jnp.full((P, T + 1), nan).at[:, 0].set(0)
    ess_hist = jnp.full((P, T), nan)
    moves_hist = jnp.zeros((P, T), jnp.int32)
    dec_hist = jnp.full((P, T), nan)

    def move(key, s, b):
        """One move: ``(spins, the energy change of each replica of the pilot [R] or None)``;
        a heat-bath sweep knows its energy change, a Swendsen–Wang move does not."""
        if moves == "swendsen-wang":
            return split(_move_swendsen_wang(key, s, h, J, b, parallel=mesh is not None)), None
        new, dE = _move_gibbs(key, s, h, J, b, classes)
        return split(new), dE[0]

    def some_moves(key, s, b, j0, count):
        def one(j, c):
            s, E = c
            s, dE = move(jax.random.fold_in(key, j0 + j), s, b)
            return s, (E if dE is None else E + dE)

        return lambda E: lax.fori_loop(0, count, one, (s, E))

    def make_moves(key, s, b, E0):
        """Rounds of ``lo`` moves while the pilot's autocorrelation (from its energies ``E0``
        [R] before them) is above the threshold, at most ``hi`` moves, one check per round:
        ``(spins, moves made, the last autocorrelation or NaN)``."""
        if hi == lo:
            return some_moves(key, s, b, 0, lo)(E0)[0], jnp.int32(lo), nan
        s0 = s[0]

        def body(c):
            j, s, E, _ = c
            s, E = some_moves(key, s, b, j, lo)(E)
            if moves == "swendsen-wang":
                E = energy(h, J, s[0])
            E = gathered(E, mesh)
            return j + lo, s, E, autocorrelation(s0, s[0], E0, E)

        def cond(c):
            j, r = c[0], c[-1]
            return (j == 0) | ((r > decorrelation) & (j + lo <= hi))

        j, s, _, r = lax.while_loop(cond, body, (jnp.int32(0), s, E0, jnp.array(jnp.inf, dtype)))
        return s, j, r

    def step(carry):
        k, s, fam, b, log_z, ladder, ess_hist, moves_hist, dec_hist, steps = carry
        key = jax.random.fold_in(k_run, k)
        k_res, k_move = jax.random.split(key)
        E = gathered(energy(h, J, s), mesh)  # [P, R], whole: the reductions below in one order
        remaining = jnp.maximum(beta - b, 0)
        if fractions is None:
            # one ladder for all populations, from the pilot's energies only: a step chosen
            # from a population's own weights biases its log Ẑ low (Z is unbiased only for a
            # ladder the weights did not choose), the pilot's log Ẑ is left out of the estimate
            d = adaptive_step(E[0], remaining[0], target_ess)
            b_new = jnp.broadcast_to(jnp.where(d >= remaining[0], beta, b[0] + d), b.shape)  # lands on β exactly
            d = b_new - b
        else:
            b_new = jnp.broadcast_to(beta * fractions[k], b.shape)
            d = b_new - b
        log_w = -d[:, None] * E
        log_z = log_z + jax.nn.logsumexp(log_w, axis=-1) - jnp.log(jnp.asarray(R, dtype))
        idx = jax.vmap(resample, in_axes=(0, 0, None))(jax.random.split(k_res, P), log_w, resampling)
        s = split(jnp.take_along_axis(s, idx[..., None], axis=1))  # global: from the whole population
        fam = jnp.take_along_axis(fam, idx, axis=1)
        active_pop = b < beta  # populations still annealing (the others make extra moves at β)
        ess_hist = ess_hist.at[:, k].set(jnp.where(active_pop, ess_fraction(log_w), nan))
        ladder = ladder.at[:, k + 1].set(jnp.where(active_pop, b_new, nan))
        steps = steps + active_pop.astype(jnp.int32)
        # a floor on β for the sweep's 1/2β: only a degenerate first step of 0 would need it
        b_move = jnp.maximum(b_new, jnp.finfo(dtype).tiny)
        # the pilot decides how many moves every population makes: like the ladder, a choice
        # the estimating populations' weights took no part in
        s, j, r = make_moves(k_move, s, b_move, E[0][idx[0]])
        moves_hist = moves_hist.at[:, k].set(jnp.where(active_pop, j, 0))
        dec_hist = dec_hist.at[:, k].set(jnp.where(active_pop, r, nan))
        return k + 1, s, fam, b_new, log_z, ladder, ess_hist, moves_hist, dec_hist, steps

    def cond(carry):
        k, b = carry[0], carry[3]
        return (k < T) & jnp.any(b < beta)

    zeros = jnp.zeros((P,), dtype)
    carry = (jnp.int32(0), s, fam, zeros, zeros, ladder, ess_hist, moves_hist, dec_hist, jnp.zeros((P,), jnp.int32))
    _, s, fam, b, log_z, ladder, ess_hist, moves_hist, dec_hist, steps = gathered(lax.while_loop(cond, step, carry),
                                                                                  mesh)
    counts = jax.vmap(lambda f: jnp.zeros((R,), dtype).at[f].add(1))(fam)  # n_f
    families_eff = R * R / jnp.sum(counts * counts, axis=-1)  # R / ρ_t, ρ_t = R Σ_f (n_f/R)²
    estimating = jnp.ones((P,), bool) if fractions is not None else jnp.arange(P) > 0
    return PAResult(s, log_z, ladder, ess_hist, steps, b >= beta, families_eff, estimating, moves_hist, dec_hist)
