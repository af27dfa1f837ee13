"""Swendsen–Wang cluster sampling of ferromagnetic Ising models: the engine
``inference.get("swendsen-wang")`` over the pure move of
:mod:`~isingattn.inference.mcmc.swendsen_wang_kernel`.

Near a critical point single-spin updates slow down as ``L^2.17`` (Gibbs' integrated
autocorrelation time of the energy on an ``L × L`` torus at ``K_c``); a Swendsen–Wang move
flips whole Fortuin–Kasteleyn clusters, and its autocorrelation time grows only as a small
power or log of ``L``. The price: one move costs a cluster labelling, 7-10 rounds of
``O(E)`` gathers and a scatter, and it is exact only for ``J ≥ 0`` (a model with a negative
coupling is refused). Measured at ``K_c`` (benchmarks/swendsen_wang.py, 2 shared cores, load
~5, 16 chains): ``τ_int(E)`` 8.4 sweeps at 64×64 against Gibbs' 162, ~15 at 256×256 against
Gibbs' ≥ 1100; 1800 chain-moves/s at 64×64 and 75 at 256×256, about openjij's C++
Swendsen–Wang (1.1x), not the 2x the issue asks for.

The run mirrors :class:`~isingattn.inference.mcmc.gibbs.Gibbs`: the same settings
(``num_warmup``, ``num_samples``, ``num_chains``, ``thin``, ``diagnostics``,
``rhat_threshold``, ``rao_blackwell``, ``keep_samples``), the same initial states for the
same key, the draws packed 32 to a word as the loop goes, and the same outputs and
diagnostics, computed by the same functions (:func:`~isingattn.diagnostics.packed_spin_diagnostics`,
:func:`~isingattn.diagnostics.known_constant`, :func:`~isingattn.fluctuation.packed_sample_marginals`).
"""

from __future__ import annotations

import math
from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import prng
from isingattn import validate as V
from isingattn.energy import energy
from isingattn.engine import Engine
from isingattn.fluctuation import packed_sample_marginals
from isingattn.inference.mcmc.driver import (Schedule, chain_diagnostics, chain_keys, check_chain_settings, keeps_samples,
                                             run)
from isingattn.inference.mcmc.gibbs import chain_init
from isingattn.inference.mcmc.swendsen_wang_kernel import (
    bond_probabilities,
    count_negative,
    negative_coupling_error,
    num_words,
    sweep_with_bits,
)
from isingattn.marginals import Marginals
from isingattn.model import IsingModel, is_traced
from isingattn.sparse import SparseCouplings


def run_chains(key, h, J, beta, active, shape, *, num_warmup: int, num_samples: int, num_chains: int, thin: int = 1,
               init=None):
    """Run ``num_chains`` Swendsen–Wang chains on the shared run loop
    (:func:`~isingattn.inference.mcmc.driver.run`).

    Same schedule as :func:`isingattn.inference.mcmc.gibbs.run_chains`: ``num_warmup``
    discarded moves, then ``num_samples`` moves of which every ``thin``-th is kept
    (``D = num_samples // thin`` draws); the same per-chain keys and initial states. Each
    move's random words come from the chain's key, split once per move.

    The loop works in the kernel's node-major layout ``[n, *batch, C]`` (a neighbour's
    labels for every chain and model are one contiguous row).

    Args:
        shape: ``(*batch, n)``, the spin shape of one chain.
        init: None (uniformly random spins) or ``[C, *batch, n]``: the chains' initial
            states, ±1, with 0 where a spin is drawn at random.
    Returns:
        words ``[ceil(D/32), C, *batch, n]`` uint32 (the draws packed as
        :func:`~isingattn.diagnostics.pack_spins` packs them), the energies ``[D, C, *batch]``
        of the kept draws, the mean flip rate over the kept moves ``[C, *batch]``, and the
        most labelling rounds any move took ``[]``.
    """
    schedule = Schedule(num_warmup, num_samples, thin)
    dtype = h.dtype
    shape = tuple(shape)
    batch, n = shape[:-1], shape[-1]
    B = math.prod(batch)
    h = jnp.asarray(h, dtype)
    J = J.astype(dtype) if isinstance(J, SparseCouplings) else jnp.asarray(J, dtype)

    state, k = jax.vmap(lambda kc: chain_init(kc, shape, active, dtype))(chain_keys(key, num_chains))
    if init is not None:  # inactive spins (0) stay 0
        state = state._replace(spins=jnp.where((state.spins != 0) & (init != 0), jnp.asarray(init, dtype), state.spins))
    to_t = lambda x: jnp.moveaxis(x, (0, -1), (-1, 0))  # [C, *batch, n] -> [n, *batch, C]
    from_t = lambda x: jnp.moveaxis(x, (0, -1), (-1, 0))  # and back
    lanes = lambda e: jnp.moveaxis(e, 0, -1)  # [C, *batch] -> [*batch, C]
    s = to_t(state.spins)
    probs = bond_probabilities(h, J, beta, dtype, len(batch), chain_axis=True)
    W = num_words(n, J)
    blocks = -(-(W * B) // 2)

    def noise(k, t0, L):  # each move's key, the chain's key split once per move
        return lax.scan(lambda k, _: prng.split(k), k, None, length=L)  # raw key data [L, C, 2]

    def step(t, k_move, st):
        s, _ = st
        # the move's words are drawn inside it: they are as many as the edges, and drawn for a
        # chunk of moves at once they would cost a round trip through memory
        y0, y1 = prng.random_bits(k_move, blocks)  # [blocks, C] each
        bits = jnp.concatenate([y0, y1])[: W * B].reshape((W,) + batch + (num_chains,))
        new, _, rounds = sweep_with_bits(bits, s, probs, J)
        # flips counted as a product with a row of ones (XLA:CPU's column sum over the spins is slow)
        flips = (jnp.ones((1, n), dtype) @ (new != s).astype(dtype).reshape(n, -1)).reshape(new.shape[1:])
        return (new, lanes(energy(h, J, from_t(new)))), (flips, rounds)

    # one move per chunk: a move (a labelling while_loop) nested in a chunk's inner loop ran 25%
    # slower on XLA:CPU (benchmarks/swendsen_wang.py, L = 64), and bulk noise has nothing to gain here
    L = 1
    _, _, trace, rounds = run(step, (s, jnp.zeros(batch + (num_chains,), dtype)), jax.random.key_data(k), noise,
                              schedule, target=lambda st: st, flips=lambda info: info[0], chunk=L,
                              extra=jnp.int32(0), accumulate=lambda t, st, info, r: jnp.maximum(r, info[1]))
    active_count = jnp.maximum(jnp.abs(state.spins).sum(-1), 1)
    words = jnp.moveaxis(trace.words, 1, -1)  # [D/32, n, *batch, C] -> [D/32, *batch, C, n]
    words = jnp.moveaxis(words, -2, 1)  # -> [D/32, C, *batch, n]
    rate = jnp.moveaxis(trace.flips, -1, 0) / active_count / (schedule.draws * thin)  # [C, *batch]
    return words, jnp.moveaxis(trace.energy, -1, 1), rate, rounds


class SwendsenWang(Engine):
    """Swendsen–Wang cluster sampling (``"swendsen-wang"``), vectorized over chains and the
    whole model batch, for couplings ``J ≥ 0`` on any graph, dense or sparse, with fields
    (through a ghost spin: :mod:`~isingattn.inference.mcmc.swendsen_wang_kernel`).

    Config (static), as :class:`~isingattn.inference.mcmc.gibbs.Gibbs`: ``num_warmup``
    discarded moves; ``num_samples`` moves after warmup, every ``thin``-th kept;
    ``num_chains``; ``diagnostics`` (R-hat/ESS/MCSE); ``rhat_threshold``; ``rao_blackwell``;
    ``keep_samples`` (``None``: keep the float samples up to 256 MiB); ``init`` (an array,
    not static: None, uniformly random spins, or the chains' initial states ``[num_chains,
    *batch, n]``, ±1 with 0 drawn at random; the dimod sampler's ``initial_states``).

    ``marginals(model, *, key)`` returns the sample marginals of the draws (``samples
    [*batch, chains * draws, n]``, chain-major), with the mean differentiable through the
    fluctuation–dissipation VJP, and ``info``:

    * ``energy [*batch, chains, draws]``: the energy ``E(s)`` of every kept draw (for
      autocorrelation times and heat capacities); ``thin [*batch]``: the thinning they were kept at;
    * ``r_hat``, ``ess``, ``mcse``, ``frozen [*batch, n]`` and ``converged [*batch]``, with
      Gibbs' definitions (known-constant spins, frozen spins NaN, NaN fails the threshold);
    * ``flip_rate [*batch, chains]``: fraction of active spins flipped per move;
      ``labelling_rounds [*batch]``: the most labelling rounds a move took (over the batch);
    * ``negative_couplings [*batch]``: how many couplings are negative (over the batch). A concrete model with any
      is refused (``IsingInputError``); under ``jax.jit`` the couplings cannot be read, so
      ``J ≥ 0`` is expected and a negative coupling makes ``converged`` False.
    """

    num_warmup: int = eqx.field(static=True, default=100, converter=V.plain)
    num_samples: int = eqx.field(static=True, default=500, converter=V.plain)
    num_chains: int = eqx.field(static=True, default=4, converter=V.plain)
    thin: int = eqx.field(static=True, default=1, converter=V.plain)
    diagnostics: bool = eqx.field(static=True, default=True, converter=V.plain)
    rhat_threshold: float = eqx.field(static=True, default=1.05, converter=V.plain)
    rao_blackwell: bool = eqx.field(static=True, default=False, converter=V.plain)
    keep_samples: Optional[bool] = eqx.field(static=True, default=None, converter=V.plain)
    init: Optional[jax.Array] = None  # data, not config: changing it does not recompile

    def __check_init__(self):
        check_chain_settings(self, "SwendsenWang")

    needs_key: ClassVar[bool] = True
    sparse_native: ClassVar[bool] = True  # labelling over the neighbour table, O(E) per round
    spin_info: ClassVar[tuple] = ("r_hat", "ess", "mcse", "frozen")

    def _prepare(self, model: IsingModel) -> Engine:
        """Refuse a concrete model with a negative coupling (host side, before tracing)."""
        J = model.J
        w = J.weights if isinstance(J, SparseCouplings) else J
        if not is_traced(w):
            bad = int(count_negative(J))
            if bad:
                total = (f"{int(np.prod(J.weights.shape))} edge weights" if isinstance(J, SparseCouplings)
                         else f"{int(np.prod(J.shape[:-2], dtype=int)) * model.n * (model.n - 1) // 2} pairs")
                raise negative_coupling_error(bad, total)
        return self

    def _keeps_samples(self, model: IsingModel) -> bool:
        return keeps_samples(self, model)

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        n, dtype = model.n, model.dtype
        batch = tuple(model.batch_shape)
        h, beta = lax.stop_gradient(model.h), lax.stop_gradient(model.beta)
        J = jax.tree_util.tree_map(lax.stop_gradient, model.J)
        words, E, rates, rounds = run_chains(
            key, h, J, beta, model.active(), batch + (n,), num_warmup=self.num_warmup,
            num_samples=self.num_samples, num_chains=self.num_chains, thin=self.thin,
            init=None if self.init is None else lax.stop_gradient(self.init))
        C, D = self.num_chains, self.num_samples // self.thin
        negative = count_negative(J)
        info = {"flip_rate": jnp.moveaxis(rates, 0, -1), "energy": jnp.moveaxis(E, (0, 1), (-1, -2)),
                # batch-shaped like every info entry (so causal buckets and batches join them)
                "thin": jnp.full(batch, self.thin, jnp.int32),
                "labelling_rounds": jnp.broadcast_to(rounds, batch),
                "negative_couplings": jnp.broadcast_to(negative, batch)}
        words = words.reshape(words.shape[:2] + (-1,))  # [D/32, C, F]
        if self.diagnostics:  # Gibbs' diagnostics, from the same counts on the packed words
            info.update(chain_diagnostics(words, D, C, h, J, beta, model.active(), batch, n, dtype,
                                          float(self.rhat_threshold)))
            info["converged"] = info["converged"] & (info["negative_couplings"] == 0)
        return packed_sample_marginals(model, words, D, info, keep_samples=self._keeps_samples(model),
                                       rao_blackwell=bool(self.rao_blackwell))

    def _warning(self, flag, info, bad, total) -> str:
        neg = int(np.asarray(info.get("negative_couplings", 0)))
        if neg:
            return (f"SwendsenWang: the model has {neg} negative coupling(s); Swendsen–Wang needs J ≥ 0, so its "
                    "samples are not from the model. Use Gibbs or parallel tempering.")
        r = np.asarray(info["r_hat"])
        r = r[~np.isnan(r)]
        worst = float(r.max()) if r.size else float("nan")
        frozen = int(np.asarray(info["frozen"]).sum())
        stuck = (f" {frozen} active spin(s) never changed in any chain (frozen: no R-hat, NaN)." if frozen else "")
        return (f"SwendsenWang: {bad} of {total} models have a spin with split R-hat ≥ {self.rhat_threshold} "
                f"or undefined (worst defined {worst:.3g}): the chains have not mixed.{stuck} Raise "
                "num_warmup/num_samples or use more chains; see info['converged'], info['r_hat'], info['frozen'].")
