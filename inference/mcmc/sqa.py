"""Path-integral simulated quantum annealing (SQA), DESIGN.md §3.

The transverse-field model ``H = E(σ^z) - Γ Σ_i σ^x_i`` at inverse temperature β is
mapped by Suzuki–Trotter onto ``P`` classical replicas ``s^0 .. s^{P-1}`` (a ring in
``k``) with the weight

    w(s) = exp[ -(β/P) Σ_k E(s^k) + K Σ_k Σ_i s_i^k s_i^{k+1} ],   K = -½ ln tanh(βΓ/P) > 0.

Moves (one *sweep* visits every spin ``i = 0..n-1`` once):

* single-spin Metropolis in replica ``k``:
  ``ΔS = (β/P) ΔE_k(i) + 2K s_i^k (s_i^{k-1} + s_i^{k+1})``, ``ΔE_k(i) = 2 s_i^k F_i^k``
  with the local field ``F^k = h + J s^k``. Replicas interact only through the ring,
  so for one spin ``i`` all replicas of one colour of the ring (even ``k``, then odd
  ``k``; a third colour for the last replica when ``P`` is odd) are updated at once.
* global move: flip spin ``i`` in every replica. The ring term is invariant, so it is
  accepted with ``exp(-(β/P) Σ_k ΔE_k(i))``. It is the only move that still works when
  ``Γ → 0`` (``K → ∞`` locks the replicas together).

How a sweep is computed: the skeleton shared with Gibbs (:mod:`isingattn.inference.mcmc.sweep`),
in spin-major layout ``[n, P, reads, ...]``, ``SWEEP_BLOCK`` spins at a time. One GEMM
gives a block's local fields in every replica from the CURRENT spins (exact, so no
rounding drift builds up over sweeps), then one elementwise fusion
(:func:`~isingattn.inference.mcmc.sqa_kernel.ring_update`) makes all the moves of the block's
spins in order (the couplings inside the block are applied as each spin changes;
replicas are unrolled into rows, so the ring and the global move's sum are index
arithmetic). The Metropolis noise of a whole sweep is
drawn at once as ``-log u`` (:mod:`isingattn.prng`): a move is accepted iff
``ΔS < -log u``. A sweep costs ``O(P n²)`` per read and model, in ``n / SWEEP_BLOCK``
GEMMs and fusions instead of ``n`` rank-1 updates of every replica's fields.

Schedules lower ``Γ`` at fixed ``β`` over ``num_sweeps`` sweeps
(:func:`gamma_values`): ``("linear", Γ_max, Γ_min)`` steps ``Γ`` by equal differences,
``("geometric", Γ_max, Γ_min)`` by equal ratios (``Γ_min > 0``), which spends more
sweeps at small ``Γ`` where the replicas lock.

Modes:

* ``"anneal"`` — ground-state search, like openjij's ``SQASampler``: after the
  schedule each read returns its lowest-energy replica (openjij's ``get_solution``
  does the same). This is *not* a Boltzmann sampler at β.
* ``"thermal"`` — samples ``exp(-β E)``. The schedule is continued to ``Γ = 0``, where
  ``K = ∞`` locks the ring: the weight of a locked ring is ``exp(-β E(s))`` and the
  global move is then exactly a classical Metropolis update at β. So each read keeps
  one replica (replica 0 — a fixed index; picking the best replica would bias the
  sample) and runs ``thermal_sweeps`` classical Metropolis sweeps at β (a ``P = 1``
  sweep of the same kernel). The annealed path-integral state is the initial
  condition; the tail makes the samples exact in the long-run limit. The split
  R-hat of the energy over the tail (reads as chains) is reported, and a warning is
  issued when it exceeds ``RHAT_THRESHOLD``. A spin with one value in every read and
  tail sweep is ``frozen`` (unless its own field pins it, as in Gibbs): reads that never
  moved are no evidence of convergence, so such a model is not ``converged``, and a
  constant energy there gives R-hat NaN rather than 1.

Where it becomes slow: cost is ``num_reads · P · n² · num_sweeps`` per model for dense
couplings (``n²`` becomes ``E`` on a sparse graph: colour-class sweeps on the edge list),
plus ``num_reads · n² · thermal_sweeps``. Thermal mode returns one sample per read (its
state after the tail), so its Monte Carlo error falls as ``1/sqrt(num_reads)``.
Measured against openjij's C++ SQASampler (one thread) in benchmarks/sqa_groundstate.py
(see benchmarks/README.md); compilation takes a few seconds per shape and configuration.
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from isingattn.inference.mcmc.sqa_kernel import (
    SQAState,
    check_schedule,
    gamma_values,
    sqa_sweep,
)
from jax import lax

from isingattn import prng
from isingattn import validate as V
from isingattn.diagnostics import known_constant, split_gelman_rubin
from isingattn.energy import energy
from isingattn.inference.mcmc.base import ColouredSweep
from isingattn.errors import IsingInputError
from isingattn.fluctuation import sample_marginals
from isingattn.marginals import Marginals
from isingattn.inference.mcmc.coloring import SCHEDULES as SWEEP_SCHEDULES
from isingattn.inference.mcmc.coloring import as_classes
from isingattn.model import IsingModel
from isingattn.sparse import insert_batch_axis

MODES = ("anneal", "thermal")
RHAT_THRESHOLD = 1.1  # split R-hat of the tail energy above which thermal samples are flagged


# ---- the kernel (blackjax style) ------------------------------------------------------------


def check_config(*, num_sweeps, trotter, gamma_schedule, mode, num_reads, thermal_sweeps):
    """Raise ``IsingInputError``/``IsingTypeError`` for an invalid SQA configuration."""
    for name, v in (("num_sweeps", num_sweeps), ("trotter", trotter), ("num_reads", num_reads)):
        V.positive_int(name, v, owner="SQA")
    V.nonneg_int("thermal_sweeps", thermal_sweeps, owner="SQA")
    if not isinstance(mode, str) or mode not in MODES:
        raise IsingInputError(f"mode must be one of {MODES}; got {mode!r}. 'thermal' samples exp(-βE), 'anneal' searches ground states.")
    check_schedule(gamma_schedule)


@partial(jax.jit, static_argnames=("num_reads", "trotter", "num_sweeps", "gamma_schedule", "mode",
                                   "thermal_sweeps", "global_moves", "classes"))
def sqa_sample(key, h, J, beta, *, num_reads: int, trotter: int, num_sweeps: int, gamma_schedule: tuple,
               mode: str, thermal_sweeps: int, global_moves: bool = True, classes=None, init=None):
    """Run SQA and return one sample per read.

    Args:
        key: PRNG key. Every read, replica and spin draws its own uniforms from
            ``fold_in(key, sweep)`` (disjoint positions of the stream), so reads are
            independent and the result is a pure function of the key.
        h, J: ``h [..., n]``, ``J [..., n, n]`` (symmetric, zero diagonal) or a
            :class:`~isingattn.sparse.SparseCouplings`: broadcast batch of models; beta: scalar.
        classes: static colour classes of the sweep (:func:`sqa_sweep`); None: the
            systematic scan (dense J only).
        init: None (every replica of every read starts uniformly at random) or initial
            classical states ``[num_reads, n]`` in {-1, 0, +1} (dtype of h, shared by the
            batch): a read's nonzero entries start every replica there, its zeros at random.
            ``num_sweeps = 0`` then returns them (anneal mode: the lowest-energy replica).
        others: see :class:`SQA`.

    Returns:
        ``samples [..., num_reads, n]`` (dtype of h) and an info dict of ``[...]`` arrays:
        ``acceptance_single``, ``acceptance_global`` (means over reads and annealing
        sweeps), ``energy`` ``[..., num_reads]`` of the returned samples and, for
        ``mode="thermal"``, ``rhat_energy``, ``frozen [..., n]`` and ``converged``.
    """
    dt = h.dtype
    n = h.shape[-1]
    batch = jnp.broadcast_shapes(h.shape[:-1], J.shape[:-2])
    h = jnp.broadcast_to(h, batch + (n,))
    beta = jnp.asarray(beta, dt)
    gammas = jnp.asarray(gamma_values(gamma_schedule, num_sweeps), dt)
    P = trotter

    R = num_reads
    J_r = insert_batch_axis(J)  # J for states [R, *batch, P, n]: a size-1 axis for the replicas
    # Reads are a batch axis of the state [R, *batch, P, n] (not a vmap). Each sweep is
    # the public kernel sqa_sweep with key fold_in(key, sweep): its noise for every spin,
    # replica and read is drawn at once. The loop carries the spins in the kernel's own
    # spin-major layout [n, P, R, *batch], so the layout moves around each sweep cancel
    # inside it (carried in the state's layout they cost ~12% at n = 64, P = 8).
    to_t = lambda x: jnp.moveaxis(x, (-1, -2), (0, 1))
    from_t = lambda x: jnp.moveaxis(x, (0, 1), (-1, -2))

    def run_sweeps(key, s_t, gammas, P, global_moves, trace_energy=False):
        def body(s_t, xs):
            t, g = xs
            state, info = sqa_sweep(jax.random.fold_in(key, t), SQAState(from_t(s_t)), h, J, beta, g, P,
                                    global_moves=global_moves, classes=classes)
            s = state.spins
            E = energy(h[..., None, :], J_r, s) if trace_energy else None
            seen = (jnp.any(s > 0, axis=(0, -2)), jnp.any(s < 0, axis=(0, -2))) if trace_energy else None  # [*batch, n]
            return to_t(s), (info.acceptance_single, info.acceptance_global, E, seen)

        s_t, trace = lax.scan(body, s_t, (jnp.arange(gammas.shape[0]), gammas))
        return SQAState(from_t(s_t)), trace

    k_init, k_anneal, k_tail = jax.random.split(key, 3)
    spins = jnp.where(prng.uniform(k_init, (n, P, R) + batch, dt) < 0.5, -1.0, 1.0).astype(dt)
    if init is not None:  # [R, n] -> [n, 1, R, 1...]: every replica of a read starts from its state
        s0 = jnp.asarray(init, dt).T.reshape((n, 1, R) + (1,) * len(batch))
        spins = jnp.where(s0 == 0, spins, s0)
    state, (acc_s, acc_g, _, _) = run_sweeps(k_anneal, spins, gammas, P, global_moves)
    info = {"acceptance_single": acc_s.mean((0, 1)), "acceptance_global": acc_g.mean((0, 1))}
    if mode == "anneal":
        E = energy(h[..., None, :], J_r, state.spins)  # [R, ..., P]
        best = jnp.argmin(E, axis=-1)  # the lowest-energy replica, as openjij's get_solution
        s = jnp.take_along_axis(state.spins, best[..., None, None], axis=-2)[..., 0, :]
        E = jnp.min(E, axis=-1)
    else:
        # thermal: Γ -> 0 locks the ring; keep replica 0 and run classical sweeps at β
        s1 = state.spins[..., :1, :]
        if thermal_sweeps:
            tail, (_, _, Etrace, (up, down)) = run_sweeps(k_tail, to_t(s1), jnp.zeros((thermal_sweeps,), dt), 1,
                                                          False, True)
            s1 = tail.spins
            up, down = (jnp.any(x, axis=0) for x in (up, down))  # [T, *batch, n] -> [*batch, n]
            frozen = (up != down) & ~known_constant(h, J, beta, up, R * thermal_sweeps)
            Etrace = jnp.swapaxes(Etrace[..., 0], 0, 1)  # [T, R, ...] -> [R, T, ...]
            # a constant energy is known to be mixed only when no spin is frozen
            rhat = split_gelman_rubin(Etrace, known=~jnp.any(frozen, axis=-1))
        else:
            rhat = jnp.full(batch, jnp.nan, dt)
            frozen = jnp.zeros(batch + (n,), bool)
        s = s1[..., 0, :]
        E = energy(h, J, s)
        info["rhat_energy"] = rhat
        info["frozen"] = frozen
        # NaN (too short a tail, or a constant energy of frozen reads) counts as not converged
        info["converged"] = (rhat < RHAT_THRESHOLD) & ~jnp.any(frozen, axis=-1)
    r = len(batch)
    info["energy"] = jnp.moveaxis(E, 0, r)
    return jnp.moveaxis(s, 0, r), info


# ---- the engine -------------------------------------------------------------------------------


def _as_tuple(x):
    """Static config must be hashable: lists become tuples (anything else is left for
    check_config to reject with a clear message)."""
    return tuple(V.plain(v) for v in x) if isinstance(x, (list, tuple)) else x


class SQA(ColouredSweep):
    """Path-integral simulated quantum annealing (see the module docstring).

    Config (static):
        num_sweeps: annealing sweeps (Γ lowered over them).
        trotter: number of Trotter replicas ``P``.
        gamma_schedule: ``(kind, Γ_max, Γ_min)``, kind ``"linear"`` or ``"geometric"``;
            Γ in the units of the energy.
        beta: inverse temperature; ``None`` uses the model's β. A given β also becomes
            the β of the returned model statistics (their gradient uses it).
        mode: ``"thermal"`` (samples ``exp(-βE)``; gradients by fluctuation–dissipation)
            or ``"anneal"`` (lowest-energy replica of each read; a ground-state search,
            its "marginals" are not Boltzmann marginals at β).
        num_reads: independent reads = samples per model.
        thermal_sweeps: classical Metropolis sweeps at β after the anneal (thermal mode).
        global_moves: propose flipping a spin in all replicas at once.
        rao_blackwell: report the mean of ``tanh(β(h + J s))`` over the reads instead of
            the mean of ``s`` (:mod:`isingattn.fluctuation`; thermal mode; recommended for
            training attention).
        schedule, colors: the order of a sweep, as in :class:`~isingattn.inference.mcmc.Gibbs`:
            ``"systematic"`` (spins ``0..n-1``, blocked GEMMs for dense J) or ``"colored"``
            (the classes of a proper colouring, each moved at once). Sparse couplings
            always sweep by classes (O(E) per sweep).

    ``marginals(model, key=key)`` returns :func:`~isingattn.fluctuation.sample_marginals`
    of the ``[..., num_reads, n]`` samples, so it is differentiable in ``h``, ``J``, β and
    works inside ``jit``. ``info``: ``acceptance_single``, ``acceptance_global``,
    ``energy``, and in thermal mode ``rhat_energy``, ``frozen`` ``[..., n]`` (spins that kept
    one value in every read and tail sweep, not pinned by their field) and ``converged``
    (R-hat below ``RHAT_THRESHOLD`` and no frozen spin; a warning is issued when, called
    eagerly, some model is not converged).

    Cost: ``num_reads · n² · (trotter · num_sweeps + thermal_sweeps)`` per model.
    """

    num_sweeps: int = eqx.field(static=True, default=1000, converter=V.plain)
    trotter: int = eqx.field(static=True, default=8, converter=V.plain)
    gamma_schedule: tuple = eqx.field(static=True, default=("linear", 3.0, 0.01), converter=_as_tuple)
    beta: Optional[float] = eqx.field(static=True, default=None, converter=V.plain)
    mode: str = eqx.field(static=True, default="thermal")
    num_reads: int = eqx.field(static=True, default=64, converter=V.plain)
    thermal_sweeps: int = eqx.field(static=True, default=100, converter=V.plain)
    global_moves: bool = eqx.field(static=True, default=True, converter=V.plain)
    rao_blackwell: bool = eqx.field(static=True, default=False, converter=V.plain)
    schedule: str = eqx.field(static=True, default="systematic")
    colors: Optional[tuple] = eqx.field(static=True, default=None, converter=as_classes)

    def __check_init__(self):
        V.choice("schedule", self.schedule, SWEEP_SCHEDULES, owner="SQA")
        check_config(num_sweeps=self.num_sweeps, trotter=self.trotter, gamma_schedule=self.gamma_schedule,
                     mode=self.mode, num_reads=self.num_reads, thermal_sweeps=self.thermal_sweeps)
        if self.beta is not None:  # None: the model's β
            V.positive_float("beta", self.beta, owner="SQA")
        for name in ("global_moves", "rao_blackwell"):
            V.boolean(name, getattr(self, name), owner="SQA")

    needs_key: ClassVar[bool] = True
    sparse_native: ClassVar[bool] = True  # colour-class sweeps on the edge list
    spin_info: ClassVar[tuple] = ("frozen",)

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        if self.beta is not None:
            model = eqx.tree_at(lambda m: m.beta, model, jnp.asarray(self.beta, model.dtype))
        h, J = model.masked_parameters()
        sg = lax.stop_gradient  # samples carry no gradient; sample_marginals supplies it
        samples, info = sqa_sample(key, sg(h), sg(J), sg(model.beta), num_reads=self.num_reads, trotter=self.trotter,
                                   num_sweeps=self.num_sweeps, gamma_schedule=tuple(self.gamma_schedule),
                                   mode=self.mode, thermal_sweeps=self.thermal_sweeps, global_moves=self.global_moves,
                                   classes=self._sweep_classes(model))
        return sample_marginals(model, samples, info, rao_blackwell=self.rao_blackwell)

    def _warning(self, flag, info, bad, total) -> str:  # info["converged"]: thermal mode only
        frozen = int(np.sum(np.asarray(info.get("frozen", 0))))
        stuck = (f" {frozen} spin(s) kept one value in every read and tail sweep (info['frozen']): reads that "
                 "never moved are no evidence of convergence." if frozen else "")
        rhats = np.asarray(info["rhat_energy"])
        worst = float(np.nanmax(rhats)) if np.isfinite(rhats).any() or np.isinf(rhats).any() else float("nan")
        return (f"SQA thermal tail did not pass the split R-hat check for {bad} of {total} model(s) "
                f"(max R-hat of the energy {worst:.3g} > {RHAT_THRESHOLD}; NaN means thermal_sweeps < 4 or frozen "
                f"reads).{stuck} Samples may not follow exp(-βE) yet: raise "
                "thermal_sweeps or num_sweeps. info['converged'] flags the models.")
