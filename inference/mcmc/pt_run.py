"""The run of non-reversible parallel tempering (:func:`run_tempering`) behind the engine
``"pt"`` (:mod:`~isingattn.inference.mcmc.pt`): its step and its statistics on the shared run
loop (:func:`~isingattn.inference.mcmc.driver.run`, which packs the draws and keeps the energy
trace as it does for Gibbs and Swendsen–Wang), on the kernel of
:mod:`~isingattn.inference.mcmc.pt_kernel`, the ladder of
:mod:`~isingattn.inference.mcmc.pt_ladder` and the cluster move of
:mod:`~isingattn.inference.mcmc.houdayer`.

One step sweeps every replica once with the Gibbs heat-bath kernel (replicas × chains ×
models one batch of ONE sweep), adds a Houdayer move between chains ``2k`` and ``2k+1`` at
the colder half of the rungs when the model has no field, then runs the deterministic even–odd swap round.
Warmup adapts the ladder in rounds of doubling length; sampling keeps the target replica's
draws (packed), energies, swap and round-trip counts, every rung's energy moments and the
stepping stone's terms in batches (for ``log_ratio_se``).
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import prng
from isingattn.energy import energy
from isingattn.inference.mcmc.driver import Schedule, noise_chunk, run
from isingattn.inference.mcmc.gibbs_kernel import GibbsState, init_spins, sweep_with_thresholds
from isingattn.inference.mcmc.houdayer import edge_weights, houdayer_move
from isingattn.inference.mcmc.pt_kernel import COLD, NONE, safe_beta, swap_round
from isingattn.inference.mcmc.pt_ladder import adapt_ladder, initial_ladder, round_lengths
from isingattn.sharding import gathered, split_along
from isingattn.sparse import CouplingGraph, SparseCouplings

LOG_Z_BATCHES = 16  # batches per chain of the stepping stone's standard error
ENERGY_REFRESH = 64  # steps between exact energies (between them, each sweep's tracked change)


def run_tempering(key, h, J, beta, active, shape, *, num_warmup: int, num_samples: int, num_chains: int,
                  num_replicas: int, beta_min: float = 0.0, ladder=None, adapt_rounds: int = 4, thin: int = 1,
                  classes=None, mesh=None, graph: Optional[CouplingGraph] = None, init=None):
    """Run ``num_chains`` tempered chains of ``num_replicas`` replicas (module docstring).

    One loop over every step (warmup and sampling), so the sweep is compiled once; what a
    step records (ladder statistics, draws, stepping-stone terms) is selected by its index.
    The noise of up to ``driver.NOISE_CHUNK`` steps' sweeps is drawn at once, each step's from
    its own key as before.

    Args:
        h, J: ``h [*batch, n]``, ``J [*batch, n, n]`` or :class:`~isingattn.sparse.SparseCouplings`;
        beta: scalar (traced ok); active ``[*batch, n]`` bool or None; shape ``(*batch, n)``;
        ladder: None (adapt) or ``R`` fractions of β, decreasing from 1.
        graph: None, or the coupling graph of a zero-field model: then every step adds a
            Houdayer move (:mod:`~isingattn.inference.mcmc.houdayer`) between chains ``2k``
            and ``2k + 1`` at the colder ``⌈R/2⌉`` rungs (``num_chains`` even).
        init: None (uniformly random spins) or ``[C, *batch, n]``: every replica of a chain
            starts at its state, ±1, with 0 where a spin is drawn at random.
        mesh: None, or a ``jax.sharding.Mesh`` whose device count divides ``num_chains``:
            every per-chain array of the loop is split along its chains axis over all the
            mesh's axes (:func:`~isingattn.sharding.split_along`), the ladder is
            replicated. The noise is drawn for the global shapes, the swaps stay inside a
            chain (on one device), and the chains' mean rejection (ladder adaptation) and
            every reduction after the loop run on gathered arrays, so the result is the
            unsharded one bit for bit up to the rounding of the energies' sums over a
            device's share of the chains (``ParallelTempering``). The returned arrays are
            replicated.
    Returns:
        dict with ``words [ceil(D/32), C, *batch, n]`` (the target replica's draws, packed
        as :func:`~isingattn.inference.mcmc.gibbs.run_chains` packs them), ``energy [D, C,
        *batch]``, ``flip_rate [C, *batch]``, ``swap_rate [R-1, *batch]``, ``round_trip_rate
        [*batch]``, ``round_trips [C, *batch]`` (per chain, during sampling), ``ladder [R, *batch]``, ``log_ratio [K, *batch]`` (the stepping stone's
        terms, ``K = R - 1``, or ``R`` with the uniform step to β = 0), ``log_ratio_se
        [*batch]`` (of their sum), ``energy_sd [R, *batch]`` (of every rung over the sampling
        steps and chains).
    """
    R, C = num_replicas, num_chains
    D = num_samples // thin
    dtype = h.dtype
    shape = tuple(shape)
    batch, n = shape[:-1], shape[-1]
    h = jnp.asarray(h, dtype)
    J = J.astype(dtype).with_table() if isinstance(J, SparseCouplings) else jnp.asarray(J, dtype)
    lanes = (C,) + batch  # the axes of one replica's chains and models
    bshape = (R, 1) + batch  # a ladder, broadcast against energies [R, C, *batch]

    betas = jnp.broadcast_to(initial_ladder(beta, R, beta_min, ladder, dtype).reshape((R,) + (1,) * (1 + len(batch))), bshape)
    hot_is_zero = (ladder is None and beta_min == 0) or (ladder is not None and ladder[-1] == 0)
    k_init, k_run, k_unif = jax.random.split(key, 3)
    s = init_spins(k_init, (R,) + lanes + (n,), active, dtype).spins
    if init is not None:  # inactive spins (0) stay 0
        s = jnp.where((s != 0) & (init != 0), jnp.asarray(init, dtype), s)
    E = energy(h, J, s)
    last = jnp.full(E.shape, NONE, jnp.int32)
    # The loop carries the spins spin-major, [n, R, C, *batch], the sweep's own layout, so
    # the layout moves around each sweep cancel inside it (as in Gibbs' run_chains).
    to_t = lambda x: jnp.moveaxis(x, -1, 0)
    from_t = lambda x: jnp.moveaxis(x, 0, -1)
    s = to_t(s)
    # With a mesh, the sweep and the energy see the chains axis first ([C, R, *batch, n]), so
    # that their GEMMs' merged column axis (chains, replicas, models) splits into one
    # contiguous block per device; replicas first, it would be gathered onto every device.
    lanes_first = (lambda x: x) if mesh is None else (lambda x: jnp.swapaxes(x, 0, 1))
    to_sweep = lambda x: lanes_first(from_t(x))  # [n, R, C, ...] -> [R, C, ..., n] (or [C, R, ..., n])
    from_sweep = lambda x: to_t(lanes_first(x))
    sweep_energy = lambda s: lanes_first(energy(h, J, to_sweep(s)))  # [R, C, ...]

    # adaptation rounds end after the steps in `ends`; burn: the steps before the first draw
    ends = np.cumsum(round_lengths(num_warmup, adapt_rounds)) if (ladder is None and R > 2) else np.zeros(0, int)
    ends_arr = jnp.asarray(ends if ends.size else np.array([-1]), jnp.int32)
    round_start = jnp.asarray(np.concatenate([[0], ends[:-1]]) if ends.size else np.array([0]), jnp.int32)
    burn = num_warmup + num_samples % thin  # as Gibbs: the LAST step of each block of thin is kept
    total = burn + D * thin

    # stepping stone: ratio k is a mean of exp(x_k) over the draws of replica k+1,
    # x_k = -(β_k - β_{k+1}) E_{k+1}; with a hot end above 0, one more: fresh uniform draws
    # at β = 0, x = -β_{R-1} E. Accumulated as log-sum-exps per batch of draws.
    K = R - 1 + (0 if hot_is_zero else 1)
    B = max(1, min(LOG_Z_BATCHES, D))

    def terms(t, E, betas):
        x = -(betas[:-1] - betas[1:]) * E[1:]  # [R-1, C, *batch]
        if hot_is_zero:
            return x
        su = init_spins(jax.random.fold_in(k_unif, t), lanes + (n,), active, dtype).spins  # exact at β = 0
        return jnp.concatenate([x, (-betas[-1] * energy(h, J, su))[None]])

    # Houdayer's move runs at the colder half of the ladder: at the hot rungs the q = -1 sites
    # come near percolation, where the move mostly exchanges the two replicas whole and its
    # labelling takes the most rounds (Zhu, Ochoa & Katzgraber's ICM, PRL 115, 077201, 2015,
    # likewise keeps its cluster moves to the low temperatures)
    RH = (R + 1) // 2
    if graph is not None:  # the couplings on the graph's edges, edge axis first: [E, *batch]
        w_e = jnp.moveaxis(jnp.broadcast_to(edge_weights(J, graph), batch + (graph.E,)), -1, 0)

    def cluster_move(key, s, E):
        """Houdayer's move between chains 2k and 2k+1 at the colder half of the rungs
        (spin-major [n, R, C, ...])."""
        pairs = s[:, :RH].reshape((n, RH, C // 2, 2) + batch)
        a, b, hi = houdayer_move(key, pairs[:, :, :, 0], pairs[:, :, :, 1], w_e, graph)
        dE = jnp.stack([hi.delta_a, -hi.delta_a], axis=2).reshape((RH,) + E.shape[1:])  # the pair's sum is unchanged
        new = jnp.stack([a, b], axis=3).reshape((n, RH) + s.shape[2:])
        return jnp.concatenate([new, s[:, RH:]], axis=1), jnp.concatenate([E[:RH] + dE, E[RH:]])

    sched = Schedule(num_warmup, num_samples, thin)

    def noise(k, t0, L):  # the logistic noise of L steps, from each step's own key (fold_in(k_run, t))
        def one(t):
            k_sweep, _ = jax.random.split(jax.random.fold_in(k_run, t))
            return prng.logistic(k_sweep, (n,) + E.shape, dtype)
        return k, jax.vmap(one)(t0 + jnp.arange(L))  # [L, n, R, C, *batch]

    def step(t, logistic, st):
        # one PT step (pt_kernel.pt_step, spin-major); t gives the parity and the key
        s, E, last, betas, rej = st
        _, k_swap = jax.random.split(jax.random.fold_in(k_run, t))
        thr = split_along(logistic * (0.5 / safe_beta(betas, dtype)[None]), mesh, 2)  # sweep_thresholds
        s0 = s[:, 0]
        new, ginfo = sweep_with_thresholds(to_sweep(thr), GibbsState(to_sweep(s)), h, J, classes)
        s = from_sweep(new.spins)
        # the sweep's own energy change (one multiply-add per spin; an energy costs a sweep on
        # a sparse graph), recomputed exactly every ENERGY_REFRESH steps so no drift builds up
        E = lax.cond(t % ENERGY_REFRESH == 0, lambda: sweep_energy(s), lambda: E + lanes_first(ginfo.delta_energy))
        if graph is not None:
            s, E = cluster_move(jax.random.fold_in(k_swap, 1), s, E)
        u = prng.uniform(k_swap, (R - 1,) + lanes, dtype)
        s, E, last, info = swap_round(u, s, E, last, betas, t % 2, axis=1)

        # warmup: the ladder adapts at the end of each round, on the round's mean rejection
        rej = rej + (1 - info.accept_prob)
        k = jnp.searchsorted(ends_arr, t)  # the round of step t
        at_end = (k < ends.size) & (t == ends_arr[jnp.minimum(k, ends_arr.size - 1)] - 1)

        def adapt(args):
            betas, rej = args
            L = (ends_arr[k] - round_start[k]).astype(dtype)
            # one ladder per model, from its chains' mean (gathered: the unsharded sum order)
            new = adapt_ladder(betas[:, 0], gathered(rej, mesh).mean(1) / L)
            return jnp.broadcast_to(new[:, None], bshape), jnp.zeros_like(rej)

        betas, rej = lax.cond(at_end, adapt, lambda a: a, (betas, rej))
        # round trips are counted from the start of sampling
        last = jnp.where(t == num_warmup - 1, jnp.full_like(last, NONE).at[0].set(COLD), last)
        # the target replica's flips (sweep and swap)
        return (s, E, last, betas, rej), (info, 0.5 * jnp.abs(s[:, 0] - s0).sum(0))

    def accumulate(t, st, out, ex):
        _, E, _, betas, _ = st
        info = out[0]
        acc, trips, lse, em = ex
        sampling = t >= num_warmup
        acc = acc + jnp.where(sampling, info.accept_prob, 0)
        trips = trips + jnp.where(sampling, info.round_trips, 0)
        # every rung's energy moments over sampling, shifted by its energy at the last warmup
        # step (sums of squares of raw energies would cancel catastrophically in float32)
        x = E - em[0]
        em = jnp.where(t == num_warmup - 1, jnp.stack([E, 0 * E, 0 * E]),
                       em + jnp.where(sampling, jnp.stack([0 * E, x, x * x]), 0))
        # the stepping stone's terms of the kept draws, by batch of draws
        d = jnp.clip((t - burn) // thin, 0, D - 1)
        keep = (t >= burn) & ((t - burn) % thin == thin - 1)
        b = (d * B) // D
        old = lax.dynamic_index_in_dim(lse, b, 0, keepdims=False)
        lse = lax.dynamic_update_index_in_dim(lse, jnp.where(keep, jnp.logaddexp(old, terms(t, E, betas)), old), b, 0)
        return acc, trips, lse, em

    # chains axis of each carried array (None: replicated)
    state_axes, trace_axes, extra_axes = (2, 1, 1, None, 1), (2, 1, 0), (1, 0, 2, 2)

    def split(xs, axes):  # a tuple or a named tuple (the driver's Trace), each leaf split along its chains axis
        out = [x if a is None else split_along(x, mesh, a) for x, a in zip(xs, axes)]
        return type(xs)(*out) if hasattr(xs, "_fields") else tuple(out)

    constrain = None if mesh is None else (lambda st, tr, ex: (split(st, state_axes), split(tr, trace_axes),
                                                               split(ex, extra_axes)))
    zeros = lambda shp, dt=dtype: jnp.zeros(shp, dt)
    state0 = (s, E, last, betas, zeros((R - 1,) + lanes))
    extra0 = (zeros((R - 1,) + lanes), zeros(lanes, jnp.int32), jnp.full((B, K) + lanes, -jnp.inf, dtype),
              zeros((3, R) + lanes))
    if mesh is not None:
        state0, extra0 = split(state0, state_axes), split(extra0, extra_axes)
    L = noise_chunk(total, n * R * int(np.prod(lanes)))
    state, _, trace, extra = run(step, state0, None, noise, sched, target=lambda st: (st[0][:, 0], st[1][0]),
                                 flips=lambda out: out[1], chunk=L, extra=extra0, accumulate=accumulate,
                                 constrain=constrain)
    (s, E, last, betas, _), (words, E0, flips), (acc, trips, lse, em) = gathered((state, tuple(trace), extra), mesh)

    steps = D * thin
    active_count = jnp.maximum(jnp.abs(s[:, 0]).sum(0), 1)
    # stepping stone: the ratios, then the delta method over (batch, chain) units
    counts = np.bincount((np.arange(D) * B) // D, minlength=B).astype(np.float64)  # draws per batch
    log_counts = jnp.asarray(np.log(counts), dtype).reshape((B,) + (1,) * (lse.ndim - 1))
    log_mean = jax.nn.logsumexp(lse, axis=(0, 2)) - jnp.log(jnp.asarray(D * C, dtype))  # [K, *batch]
    unit = jnp.exp(lse - log_counts - log_mean[None, :, None])  # [B, K, C, *batch]: batch mean / overall mean
    y = unit.sum(1).reshape((B * C,) + batch)  # linearized log-ratio sum per unit (up to a constant)
    U = B * C
    se = jnp.std(y, axis=0, ddof=1) / jnp.sqrt(U) if U > 1 else jnp.full(batch, jnp.nan, dtype)
    N = total - num_warmup
    mean_c = em[0] + em[1] / N  # [R, C, *batch]: each chain's mean energy at each rung
    var = jnp.mean(em[2] / N - (em[1] / N) ** 2, axis=1) + jnp.var(mean_c, axis=1)  # pooled over chains
    return {
        "words": jnp.moveaxis(words, 1, -1),  # [D/32, n, C, *batch] -> [D/32, C, *batch, n]
        "energy": E0,
        "flip_rate": flips / active_count / steps,
        "swap_rate": acc.mean(1) / (total - num_warmup),
        "round_trip_rate": trips.astype(dtype).mean(0) / (total - num_warmup),
        "round_trips": trips,
        "ladder": betas[:, 0],
        "log_ratio": log_mean,
        "log_ratio_se": se,
        "energy_sd": jnp.sqrt(jnp.maximum(var, 0)),
    }


# the pilot of ParallelTempering(num_replicas=None): compiled once per model structure
pilot_run = jax.jit(run_tempering, static_argnums=(5,), static_argnames=(
    "num_warmup", "num_samples", "num_chains", "num_replicas", "ladder", "classes", "graph"))
