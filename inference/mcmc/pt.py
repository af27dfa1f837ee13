"""Non-reversible parallel tempering (Syed, Bouchard-Côté, Deligiannidis & Doucet 2021) of
Ising models: the engine ``"pt"``, on the kernel of :mod:`~isingattn.inference.mcmc.pt_kernel`.

Every chain is ``R`` replicas at a ladder ``β = β_0 > β_1 > ... > β_{R-1} = beta_min`` (the
hot end; 0 by default). Each step sweeps every replica once with the Gibbs heat-bath kernel
(replicas × chains × models one batch of ONE sweep, dense or sparse couplings, systematic or
coloured), then runs the deterministic even–odd swap round. Where Gibbs freezes (a spin
glass, a ferromagnet below T_c) the cold replica's state is refreshed by states that crossed
the ladder: at β = 0 one sweep draws the uniform distribution exactly, so every round trip
brings an independent state down to β.

The run (:func:`run_tempering`):

* **Warmup**, ``num_warmup`` steps. With ``ladder=None`` the first three quarters adapt the
  ladder in ``adapt_rounds`` rounds of doubling length (Syed et al.'s schedule update,
  :func:`~isingattn.inference.mcmc.pt_kernel.adapt_ladder`): each round measures the mean
  swap rejection of every pair and moves the rungs so that the communication barrier is
  split evenly; the last quarter equilibrates at the final ladder. The initial ladder is
  linear in β when the hot end is 0 (near β = 0 the barrier grows about linearly in β,
  with the spread of the energy), geometric otherwise. A given ``ladder`` (fractions of the
  model's β) is used as is.
* **Sampling**, ``num_samples`` steps at the fixed ladder, every ``thin``-th kept: the
  target replica's spins (packed 32 draws to a word, as Gibbs stores them) and energy.

What it returns, at the model's β (replica 0): the marginals and samples, with Gibbs'
diagnostics (R-hat, ESS, MCSE, ``frozen``, ``converged``) computed on the packed draws by
the same functions (:func:`~isingattn.diagnostics.packed_spin_diagnostics`,
:func:`~isingattn.diagnostics.known_constant`), and ``log_z`` by the stepping stone along
the ladder (DESIGN.md §3)::

    log Z(β) = n_active log 2 + Σ_k log ⟨exp(-(β_k - β_{k+1}) E)⟩_{β_{k+1}}

with ``β_R = 0``. When the hot end is 0 every ratio is a mean over the sampled replicas;
with ``beta_min > 0`` the last one, ``Z(β_hot) / Z(0)``, is a mean over fresh uniform
draws (exact, but its variance grows as ``exp(β_hot² Var_0 E)``: keep ``beta_min`` small).
``info["log_z_se"]``: the delta method on batch means (each chain's draws cut into
``LOG_Z_BATCHES`` consecutive batches), which accounts for the autocorrelation of the
draws and for the correlation of the ratios along the ladder.

Cost: ``R`` times a Gibbs run of the same number of sweeps (the replicas' energies come from
each sweep's own change, exact every ``ENERGY_REFRESH`` steps), plus the swaps
(O(R · chains · n) copies). Where Gibbs mixes, PT is ``R`` times slower per draw; where it
does not, PT is the difference between a result and none. Check ``info["swap_rate"]``
(every pair well above 0; about equal after adaptation) and ``info["round_trip_rate"]``
(round trips per step and chain: 0 means the hot end never reached the cold one, so the
replicas did not help; raise ``num_replicas``).
"""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh

from isingattn import prng
from isingattn import validate as V
from isingattn.diagnostics import WORD, known_constant, packed_spin_diagnostics
from isingattn.energy import energy
from isingattn.errors import IsingInputError
from isingattn.fluctuation import packed_sample_marginals
from isingattn.inference.mcmc.base import ColouredSweep
from isingattn.inference.mcmc.coloring import SCHEDULES, as_classes
from isingattn.inference.mcmc.gibbs import check_chain_settings, keeps_samples
from isingattn.inference.mcmc.gibbs_kernel import GibbsState, init_spins, sweep_thresholds, sweep_with_thresholds
from isingattn.inference.mcmc.pt_kernel import COLD, NONE, adapt_ladder, safe_beta, swap_round
from isingattn.marginals import Label, Marginals
from isingattn.model import IsingModel
from isingattn.sharding import check_split, gathered, split_along
from isingattn.sparse import SparseCouplings

LOG_Z_BATCHES = 16  # batches per chain of the stepping stone's standard error
ENERGY_REFRESH = 64  # steps between exact energies (between them, each sweep's tracked change)
MIN_ROUND_TRIPS = 10  # round trips per chain that make a constant spin an answer, not a frozen chain
ADAPT_FRACTION = 0.75  # of the warmup spent adapting the ladder (the rest equilibrates at the final one)


def _as_ladder(x):
    """The ``ladder`` setting as a tuple of plain numbers (hashable, JSON), or as given for
    ``__check_init__`` to refuse."""
    if x is None or isinstance(x, (str, bytes)):
        return x
    if isinstance(x, (list, tuple, np.ndarray)):
        a = np.asarray(x, dtype=object)
        if a.ndim != 1:
            raise IsingInputError(f"ParallelTempering: ladder must be one sequence of fractions β_k / β (1-D); got an "
                                  f"array of shape {a.shape}.")
        return tuple(V.plain(v) for v in a.tolist())
    return x


def _ladder(beta, R: int, beta_min: float, fractions, dtype):
    """The starting ladder ``[R]`` at the model's ``beta`` (traced ok): ``beta · fractions``
    when given; else linear from β to 0 or geometric from β to ``min(beta_min, β)``."""
    beta = jnp.asarray(beta, dtype)
    if fractions is not None:
        return beta * jnp.asarray(fractions, dtype)
    if beta_min == 0:
        return beta * jnp.linspace(1.0, 0.0, R, dtype=dtype)
    hot = jnp.minimum(jnp.asarray(beta_min, dtype), beta)
    return beta * (hot / beta) ** jnp.linspace(0.0, 1.0, R, dtype=dtype)


def _round_lengths(num_warmup: int, rounds: int) -> list:
    """Lengths of the adaptation rounds: doubling, summing to ``ADAPT_FRACTION`` of the
    warmup (each round's swap statistics come from a chain twice as long as the last's)."""
    A = int(num_warmup * ADAPT_FRACTION)
    w = 2.0 ** np.arange(rounds)
    cuts = np.floor(np.cumsum(w) / w.sum() * A).astype(int)
    return [int(x) for x in np.diff(np.concatenate([[0], cuts])) if x > 0]


def run_tempering(key, h, J, beta, active, shape, *, num_warmup: int, num_samples: int, num_chains: int,
                  num_replicas: int, beta_min: float = 0.0, ladder=None, adapt_rounds: int = 4, thin: int = 1,
                  classes=None, mesh=None, init=None):
    """Run ``num_chains`` tempered chains of ``num_replicas`` replicas (module docstring).

    One loop over every step (warmup and sampling), so the sweep is compiled once; what a
    step records (ladder statistics, draws, stepping-stone terms) is selected by its index.

    Args:
        h, J: ``h [*batch, n]``, ``J [*batch, n, n]`` or :class:`~isingattn.sparse.SparseCouplings`;
        beta: scalar (traced ok); active ``[*batch, n]`` bool or None; shape ``(*batch, n)``;
        ladder: None (adapt) or ``R`` fractions of β, decreasing from 1.
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
        [*batch]`` (of their sum).
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

    betas = jnp.broadcast_to(_ladder(beta, R, beta_min, ladder, dtype).reshape((R,) + (1,) * (1 + len(batch))), bshape)
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
    # chains axis of each carried array (None: replicated), in the carry's order
    chain_axes = (2, 1, 1, None, 1, 2, 1, 0, 1, 0, 2)
    place = lambda c: tuple(x if a is None else split_along(x, mesh, a) for x, a in zip(c, chain_axes))

    # adaptation rounds end after the steps in `ends`; burn: the steps before the first draw
    ends = np.cumsum(_round_lengths(num_warmup, adapt_rounds)) if (ladder is None and R > 2) else np.zeros(0, int)
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

    def body(t, c):
        s, E, last, betas, rej, words, E0, flips, acc, trips, lse = c
        # one PT step (pt_kernel.pt_step, spin-major); t gives the parity and the key
        k_sweep, k_swap = jax.random.split(jax.random.fold_in(k_run, t))
        thr = split_along(sweep_thresholds(k_sweep, (n,) + E.shape, dtype, safe_beta(betas, dtype)[None]), mesh, 2)
        s0 = s[:, 0]
        new, ginfo = sweep_with_thresholds(to_sweep(thr), GibbsState(to_sweep(s)), h, J, classes)
        s = from_sweep(new.spins)
        # the sweep's own energy change (one multiply-add per spin; an energy costs a sweep on
        # a sparse graph), recomputed exactly every ENERGY_REFRESH steps so no drift builds up
        E = lax.cond(t % ENERGY_REFRESH == 0, lambda: sweep_energy(s), lambda: E + lanes_first(ginfo.delta_energy))
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
        sampling = t >= num_warmup
        acc = acc + jnp.where(sampling, info.accept_prob, 0)
        trips = trips + jnp.where(sampling, info.round_trips, 0)
        flips = flips + jnp.where(t >= burn, 0.5 * jnp.abs(s[:, 0] - s0).sum(0), 0)

        # draws: step t writes draw (t - burn) // thin, clipped: warmup writes land on draw 0
        # and are overwritten later, as are the first thin-1 steps of every block (Gibbs' rule)
        d = jnp.clip((t - burn) // thin, 0, D - 1)
        keep = (t >= burn) & ((t - burn) % thin == thin - 1)
        bit = (d % WORD).astype(jnp.uint32)
        word = lax.dynamic_index_in_dim(words, d // WORD, 0, keepdims=False)
        word = (word & ~(jnp.uint32(1) << bit)) | ((s[:, 0] > 0).astype(jnp.uint32) << bit)
        words = lax.dynamic_update_index_in_dim(words, word, d // WORD, 0)
        E0 = lax.dynamic_update_index_in_dim(E0, E[0], d, 0)
        b = (d * B) // D
        old = lax.dynamic_index_in_dim(lse, b, 0, keepdims=False)
        lse = lax.dynamic_update_index_in_dim(lse, jnp.where(keep, jnp.logaddexp(old, terms(t, E, betas)), old), b, 0)
        return place((s, E, last, betas, rej, words, E0, flips, acc, trips, lse))

    zeros = lambda shp, dt=dtype: jnp.zeros(shp, dt)
    carry = (s, E, last, betas, zeros((R - 1,) + lanes), zeros((-(-D // WORD), n) + lanes, jnp.uint32),
             zeros((D,) + lanes), zeros(lanes), zeros((R - 1,) + lanes), zeros(lanes, jnp.int32),
             jnp.full((B, K) + lanes, -jnp.inf, dtype))
    carry = lax.fori_loop(0, total, body, place(carry))
    s, E, last, betas, _, words, E0, flips, acc, trips, lse = gathered(carry, mesh)

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
    }


def _with_moment_gradients(log_z, model: IsingModel, mean, corr, mean_energy):
    """``log_z`` whose derivatives are the sampled moments, the identities of a log partition
    function: ``∂/∂h = β⟨s⟩``, ``∂/∂J_jk = ½β⟨s_j s_k⟩`` (dense ``J``; full symmetric),
    ``∂/∂β = -⟨E⟩``. The value is ``log_z``; the moments carry no gradient themselves."""
    sg = lax.stop_gradient
    h, J = model.masked_parameters()
    beta = model.beta
    f = beta * sg(-mean_energy) + sg(beta) * jnp.sum((h - sg(h)) * sg(mean), axis=-1)
    if corr is not None and not isinstance(J, SparseCouplings):
        f = f + 0.5 * sg(beta) * jnp.sum((J - sg(J)) * sg(corr), axis=(-2, -1))
    return sg(log_z) + f - sg(f)


class ParallelTempering(ColouredSweep):
    """Non-reversible parallel tempering with an adaptive ladder (module docstring); ``"pt"``.

    Config (static): ``num_warmup`` steps (the ladder adapts in the first three quarters);
    ``num_samples`` steps after warmup, every ``thin``-th kept (``num_samples // thin`` draws
    per chain); ``num_chains`` independent tempered chains (R-hat compares them);
    ``num_replicas`` ``R`` (≥ 2) per chain; ``beta_min`` the hot end, below the model's β (a
    concrete β ≤ ``beta_min`` is refused) (0: the uniform
    distribution, which one sweep samples exactly); ``ladder`` (None: adapt; or ``R``
    fractions ``β_k / β``, decreasing from 1 to ≥ 0, used as given); ``adapt_rounds``;
    ``schedule``/``colors`` as in :class:`~isingattn.inference.mcmc.gibbs.Gibbs`;
    ``diagnostics``, ``rhat_threshold``, ``rao_blackwell`` and ``keep_samples`` as in Gibbs;
    ``mesh`` (below); ``init`` (an array, not static: None, uniformly random spins, or the
    initial spins ``[num_chains, *batch, n]``, ±1 with 0 drawn at random, where every
    replica of a chain starts; the dimod sampler's ``initial_states``).

    ``marginals(model, *, key)`` returns, at the model's β (replica 0):

    * ``mean``, ``corr`` (dense), ``samples [*batch, chains · draws, n]`` (chain-major, see
      ``keep_samples``), the mean differentiable through the fluctuation–dissipation VJP;
    * ``log_z [*batch]`` (stepping stone; its gradient gives the sampled moments),
      ``info["log_z_kind"] == "estimate"``, ``info["log_z_se"] [*batch]``;
    * ``info["energy"] [*batch, chains, draws]``: the energy of each kept draw;
    * ``info["swap_rate"] [*batch, R-1]``: the mean swap acceptance of each adjacent pair
      (cold pair first); ``info["round_trip_rate"] [*batch]``: cold → hot → cold trips per
      step and chain; ``info["ladder"] [*batch, R]``: the final β of each replica;
    * ``info["flip_rate"] [*batch, chains]``: fraction of the target replica's active spins
      changed per step (sweep and swap);
    * with ``diagnostics``: ``r_hat``, ``ess``, ``mcse``, ``frozen`` ``[*batch, n]`` and
      ``converged [*batch]``, as Gibbs defines them (on the target replica's draws), with one
      difference: a spin that never changed in any draw is not ``frozen`` (R-hat 1, MCSE 0)
      when the hot end is β = 0 and every chain completed at least ``MIN_ROUND_TRIPS`` round
      trips, since each trip brought down a state drawn afresh at β = 0 (a spin of a glass
      frozen into its ground state: ``|⟨s⟩| > 0.999`` on the strips of the tests).
      ``converged`` also needs ``tempered [*batch]``: every chain made at least one round
      trip during sampling, every adjacent pair swapped at least once, and the ladder did not
      collapse (``beta_min < β``). Chains frozen in different states can agree on R-hat (a
      3×3 glass at β = 1e6 gave means ±0.35 for an exact 0 with R-hat fine); without tempering
      that agreement is evidence of nothing.

    ``mesh`` (a ``jax.sharding.Mesh``; None: one device) splits the **chains** axis over the
    mesh's devices (``num_chains`` a multiple of their count, else ``IsingInputError``): a
    chain's replicas and swaps stay on one device. The noise is drawn for the global arrays,
    so samples equal the unsharded run's; energies, swap rates, ladder and log Z may differ in
    the last bits at larger n (:func:`run_tempering`; DESIGN.md §3, "Samplers that mix where
    Gibbs freezes", also for two processes under ``jax.distributed``).

    The defaults (16 replicas, 2000 warmup and 16000 sampling steps, 4 chains) are sized
    for an 8×24 ±J strip at β = 2 (every marginal within 0.08 of exact); a larger
    or colder model needs more replicas when ``swap_rate`` falls below about 0.3.
    """

    # Defaults sized for an 8×24 ±J strip (β = 2: every marginal within
    # 0.08 of exact, about a minute on a shared 2-core CPU): a few dozen round trips per chain.
    num_warmup: int = eqx.field(static=True, default=2000, converter=V.plain)
    num_samples: int = eqx.field(static=True, default=16000, converter=V.plain)
    num_chains: int = eqx.field(static=True, default=4, converter=V.plain)
    num_replicas: int = eqx.field(static=True, default=16, converter=V.plain)
    beta_min: float = eqx.field(static=True, default=0.0, converter=V.plain)
    ladder: Optional[tuple] = eqx.field(static=True, default=None, converter=_as_ladder)
    adapt_rounds: int = eqx.field(static=True, default=4, converter=V.plain)
    thin: int = eqx.field(static=True, default=1, converter=V.plain)
    schedule: str = eqx.field(static=True, default="systematic")
    colors: Optional[tuple] = eqx.field(static=True, default=None, converter=as_classes)
    diagnostics: bool = eqx.field(static=True, default=True, converter=V.plain)
    rhat_threshold: float = eqx.field(static=True, default=1.05, converter=V.plain)
    rao_blackwell: bool = eqx.field(static=True, default=False, converter=V.plain)
    keep_samples: Optional[bool] = eqx.field(static=True, default=None, converter=V.plain)
    mesh: Optional[Mesh] = eqx.field(static=True, default=None)
    init: Optional[jax.Array] = None  # data, not config: changing it does not recompile

    def __check_init__(self):
        o = "ParallelTempering"
        check_chain_settings(self, o)  # Gibbs' settings, then PT's own
        check_split(self.mesh, self.num_chains, "num_chains", o)
        V.positive_int("adapt_rounds", self.adapt_rounds, owner=o)
        V.positive_int("num_replicas", self.num_replicas, owner=o)
        if self.num_replicas < 2:
            raise IsingInputError(f"{o}: num_replicas must be at least 2 (a ladder from the model's β to a hot end); "
                                  f"got {self.num_replicas}. With one replica, use Gibbs.")
        V.float_in("beta_min", self.beta_min, 0.0, owner=o)
        V.choice("schedule", self.schedule, SCHEDULES, owner=o)
        if self.ladder is not None:
            lad = self.ladder
            if not isinstance(lad, tuple) or not all(V._is_real(v) for v in lad):
                raise V.ConfigTypeError(f"{o}: ladder must be None or a sequence of numbers (fractions β_k / β); "
                                        f"got {lad!r}.")
            x = np.asarray(lad, float)
            if (len(x) != self.num_replicas or not np.all(np.isfinite(x)) or x[0] != 1.0 or np.any(np.diff(x) >= 0)
                    or x[-1] < 0):
                raise IsingInputError(
                    f"{o}: ladder must be num_replicas = {self.num_replicas} fractions β_k / β, strictly decreasing "
                    f"from 1.0 (the model's β) to a hot end ≥ 0, e.g. numpy.linspace(1, 0, {self.num_replicas}); "
                    f"got {lad!r}.")

    needs_key: ClassVar[bool] = True
    sparse_native: ClassVar[bool] = True  # the Gibbs kernel's colour-class sweeps on the edge list
    spin_info: ClassVar[tuple] = ("r_hat", "ess", "mcse", "frozen")

    def _keeps_samples(self, model: IsingModel) -> bool:
        return keeps_samples(self, model)

    def _prepare(self, model: IsingModel) -> "ParallelTempering":
        """Refuse a concrete ``β ≤ beta_min`` (the ladder would collapse onto the model's β), then
        the sweep classes (:class:`~isingattn.inference.mcmc.base.ColouredSweep`)."""
        if self.ladder is None and self.beta_min > 0 and not isinstance(model.beta, jax.core.Tracer):
            low = float(np.min(np.asarray(model.beta)))
            if low <= self.beta_min:
                raise IsingInputError(
                    f"ParallelTempering: beta_min = {self.beta_min:g} is not below the model's β = {low:g}: every "
                    "replica would sit at β and nothing would be tempered. Pass beta_min < β (0, the default, "
                    "tempers from the uniform distribution).")
        return super()._prepare(model)

    def _hot_is_zero(self) -> bool:
        return self.ladder[-1] == 0 if self.ladder is not None else self.beta_min == 0

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        n, dtype = model.n, model.dtype
        batch = tuple(model.batch_shape)
        C, D = self.num_chains, self.num_samples // self.thin
        sg = lax.stop_gradient  # the chains carry no gradient: the VJPs of the moments supply it
        h, J, beta = sg(model.h), jax.tree_util.tree_map(sg, model.J), sg(model.beta)
        act = model.active()
        out = run_tempering(key, h, J, beta, act, batch + (n,), num_warmup=self.num_warmup,
                            num_samples=self.num_samples, num_chains=C, num_replicas=self.num_replicas,
                            beta_min=float(self.beta_min), ladder=self.ladder, adapt_rounds=self.adapt_rounds,
                            thin=self.thin, classes=self._sweep_classes(model), mesh=self.mesh,
                            init=None if self.init is None else sg(self.init))
        last = lambda x, k: jnp.moveaxis(x, tuple(range(k)), tuple(range(-k, 0)))  # leading k axes to the end
        energy_trace = last(out["energy"], 2)  # [D, C, *batch] -> [*batch, D, C]
        energy_trace = jnp.swapaxes(energy_trace, -1, -2)  # [*batch, C, D]
        n_active = (jnp.full(batch, n, dtype) if act is None
                    else jnp.broadcast_to(act, batch + (n,)).sum(-1).astype(dtype))
        log_z = n_active * jnp.log(2.0).astype(dtype) + out["log_ratio"].sum(0)
        info = {
            "flip_rate": last(out["flip_rate"], 1),
            "swap_rate": last(out["swap_rate"], 1),
            "round_trip_rate": out["round_trip_rate"],
            "ladder": last(out["ladder"], 1),
            "energy": energy_trace,
            "log_z_kind": Label("estimate"),
            "log_z_se": out["log_ratio_se"],
        }
        words = out["words"].reshape(out["words"].shape[:2] + (-1,))  # [D/32, C, F]
        if self.diagnostics:
            # a spin constant in every draw is evidence of nothing for Gibbs; here, when every
            # chain brought states from β = 0 down to β at least MIN_ROUND_TRIPS times, it is
            # the right answer up to about 1 / round trips (spins frozen into the ground state)
            refreshed = (out["round_trips"].min(0) >= MIN_ROUND_TRIPS)[..., None] if self._hot_is_zero() else False
            info.update(_spin_diagnostics(words, D, C, h, J, beta, act, batch, n, dtype, float(self.rhat_threshold),
                                          refreshed))
        if self.diagnostics:
            # a chain that never went cold → hot → cold, or a pair of replicas that never swapped,
            # has not tempered: its R-hat can look fine on chains frozen in different states
            trips = jnp.moveaxis(out["round_trips"], 0, -1).min(-1)  # [*batch]
            swaps = jnp.all(info["swap_rate"] > 0, axis=-1)
            spread = (beta > self.beta_min) if self.ladder is None and self.beta_min > 0 else True
            info["tempered"] = (trips >= 1) & swaps & spread
            info["converged"] = info["converged"] & info["tempered"]
        m = packed_sample_marginals(model, words, D, info, keep_samples=self._keeps_samples(model),
                                    rao_blackwell=bool(self.rao_blackwell))
        log_z = _with_moment_gradients(log_z, model, m.mean, m.corr, energy_trace.mean((-2, -1)))
        return Marginals(mean=m.mean, corr=m.corr, log_z=log_z, samples=m.samples, info=m.info)

    def _warning(self, flag, info, bad, total) -> str:
        r = np.asarray(info["r_hat"])
        r = r[~np.isnan(r)]
        worst = float(r.max()) if r.size else float("nan")
        frozen = int(np.asarray(info["frozen"]).sum())
        trips = float(np.asarray(info["round_trip_rate"]).min())
        stuck = (f" {frozen} active spin(s) never changed in any chain (frozen: no R-hat, NaN)." if frozen else "")
        untempered = int((~np.asarray(info.get("tempered", True))).sum())
        if untempered:
            swaps = np.asarray(info["swap_rate"]).reshape(-1, self.num_replicas - 1).min(0)
            return (f"ParallelTempering: {untempered} of {total} models did not temper: some chain made no round "
                    f"trip cold → hot → cold (lowest rate {trips:.3g} per step) or some pair of replicas never "
                    f"swapped (lowest swap rate per pair {np.array2string(swaps, precision=2)}), so the chains may "
                    "sit frozen in different states and R-hat cannot tell. Raise num_warmup and num_samples, or "
                    "num_replicas; see info['tempered'], info['swap_rate'], info['round_trip_rate'].")
        return (f"ParallelTempering: {bad} of {total} models have a spin with split R-hat ≥ {self.rhat_threshold} "
                f"or undefined (worst defined {worst:.3g}): the chains have not mixed.{stuck} Lowest round-trip rate "
                f"{trips:.3g} per step. Raise num_samples, or num_replicas when some info['swap_rate'] is near 0 "
                "or round trips are rare; see info['converged'], info['r_hat'], info['swap_rate'].")


def _spin_diagnostics(words, D: int, C: int, h, J, beta, active, batch, n: int, dtype, rhat_threshold: float,
                      refreshed=False) -> dict:
    """Gibbs' diagnostics of the packed draws ``words [D/32, C, F]``: split R-hat, ESS and MCSE
    from exact counts (:func:`~isingattn.diagnostics.packed_spin_diagnostics`), ``frozen`` and
    ``converged`` by the rule every sampler shares (:func:`~isingattn.diagnostics.known_constant`).
    The same calls as ``gibbs._gibbs_marginals`` (which inlines them); ``refreshed``
    (broadcast to ``[*batch, n]``) adds the constants that PT's round trips vouch for."""
    first = (words[0, 0] & 1).astype(bool).reshape(batch + (n,))
    known = known_constant(h, J, beta, first, C * D, active) | refreshed
    rhat, ess, err, const = (v.reshape(batch + (n,)) for v in packed_spin_diagnostics(words, D, known.reshape(-1),
                                                                                     dtype=dtype))
    return dict(r_hat=rhat.astype(dtype), ess=ess.astype(dtype), mcse=err.astype(dtype), frozen=const & ~known,
                converged=jnp.all(rhat < rhat_threshold, axis=-1))
