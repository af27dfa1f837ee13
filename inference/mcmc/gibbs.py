"""Heat-bath Gibbs sampling (MCMC) of Ising models, as a pure kernel, a NumPyro
``MCMCKernel`` and an engine (DESIGN.md §3 "Gibbs / MCMC via NumPyro").

Three layers share ONE transition function, :func:`gibbs_sweep`:

* :func:`gibbs_sweep` (blackjax style): ``(key, GibbsState, h, J, beta, classes)
  -> (GibbsState, GibbsInfo)``, one heat-bath sweep over every spin. Spins are
  visited class by class; the spins of a class are updated in parallel, so a class
  must not contain two coupled spins. ``classes=None`` is the systematic scan
  ``0..n-1``; :func:`color_classes` gives the classes of a greedy colouring of the
  coupling graph (networkx), which makes a chain or a 2D lattice two parallel
  half-sweeps. The built-in ``numpyro.infer.DiscreteGibbs`` re-evaluates the whole
  potential per spin (``O(n³)`` per sweep); here a sweep costs ``O(n²)`` per model.
* :class:`~isingattn.inference.mcmc.numpyro_kernel.IsingGibbsKernel`: the kernel as a
  ``numpyro.infer.mcmc.MCMCKernel``, so ``numpyro.infer.MCMC`` supplies chains, warmup,
  thinning, the progress bar, ``get_samples`` and ``print_summary``, and
  ``az.from_numpyro`` works (:mod:`~isingattn.inference.mcmc.arviz_export`).
* :class:`Gibbs` (``inference.get("gibbs")``): the engine. One jitted loop over
  sweeps with the chains as a batch axis, for the whole model batch (every query of
  an attention layer at once). Same key => same chains as ``MCMC`` with
  ``chain_method="vectorized"`` and the same settings (a test checks it).

How a sweep is computed (each step measured on CPU, dense n = 64, 256 chains):

* The heat-bath rule ``s_i' = +1 iff u_i < sigmoid(2β f_i)`` is the comparison
  ``f_i > logit(u_i) / 2β``: the logistic noise of whole sweeps is drawn in bulk
  (:mod:`isingattn.prng`, fused Threefry), and the sequential part only compares.
* Dense ``J`` allows no parallel updates within a chain, so the systematic scan is
  sequential; its parallelism is over chains and models. It is the skeleton shared
  with SQA (:mod:`isingattn.inference.mcmc.sweep`): ``SWEEP_BLOCK`` spins at a time in
  spin-major layout, one GEMM for a block's exact fields, then the heat-bath block
  update (:func:`heat_bath_update`); 2x the spin-update rate of ``n`` rank-1 updates.

Randomness: one key per chain (``random.split(key, num_chains)``, as ``MCMC``
does); a chain splits its key once for its initial state and once per sweep.

Masked (inactive) spins are held at 0 for the whole run: the sweep updates a spin
``s_i`` to ``±|s_i|``, so a 0 stays 0 and contributes nothing to the fields.

Cost and where it gets slow: ``O(n²)`` per sweep and model for dense ``J``;
the systematic scan is ``n / SWEEP_BLOCK`` sequential steps per sweep (each
vectorized over chains and models), so small batches of large dense models are
latency-bound. Measured (benchmarks/gibbs.py, shared 2-core CPU, float32, dense
n = 64, 256 chains): see benchmarks/README.md. Strongly coupled or low-temperature
models mix slowly (single-spin moves): check ``info["r_hat"]`` / ``info["ess"]``.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from isingattn.inference.mcmc.coloring import SCHEDULES, as_classes
from isingattn.inference.mcmc.driver import (Schedule, chain_diagnostics, chain_keys, check_chain_settings,
                                             keeps_samples, noise_chunk, run)
from isingattn.inference.mcmc.gibbs_kernel import gibbs_sweep, init_spins, spin_major_sweep, sweep_thresholds
from jax import lax

from isingattn import prng
from isingattn import validate as V
from isingattn.energy import energy
from isingattn.inference.mcmc.base import ColouredSweep
from isingattn.fluctuation import packed_sample_marginals
from isingattn.marginals import Marginals
from isingattn.model import IsingModel
from isingattn.sparse import SparseCouplings

# ---------------------------------------------------------------------------------
# The pure kernel
# ---------------------------------------------------------------------------------


def chain_init(key, shape, active, dtype):
    """(state, carried key) of one chain, as :meth:`IsingGibbsKernel.init` does it."""
    k_init, k = jax.random.split(key)
    return init_spins(k_init, shape, active, dtype), k


def chain_step(state, key, h, J, beta, classes):
    """One MCMC transition of one chain: split the carried key, sweep."""
    key, k_sweep = jax.random.split(key)
    state, info = gibbs_sweep(k_sweep, state, h, J, beta, classes)
    return state, key, info


def run_chains(key, h, J, beta, active, shape, *, num_warmup: int, num_samples: int, num_chains: int,
               thin: int = 1, classes=None):
    """Run ``num_chains`` chains of :func:`gibbs_sweep` on the shared run loop
    (:func:`~isingattn.inference.mcmc.driver.run`).

    Same semantics as ``MCMC(num_warmup, num_samples, thinning=thin)``: warmup
    sweeps are discarded, then ``num_samples`` sweeps of which every ``thin``-th is
    kept (``num_samples // thin`` draws). Chain ``c`` uses exactly the keys and
    noise of ``IsingGibbsKernel`` run as chain ``c`` of a vectorized ``MCMC``.

    The chains are a batch axis of one state (not a ``vmap``), so each block of the
    systematic scan is one GEMM over every chain and model. Each sweep is the kernel's
    :func:`spin_major_sweep` (what :func:`gibbs_sweep` runs), given noise drawn for
    ``driver.NOISE_CHUNK`` sweeps at once; the state carries each chain's energy, tracked from
    the sweeps' own energy changes and recomputed exactly once a chunk (no drift builds up).

    Args:
        shape: ``(*batch, n)``, the spin shape of one chain.
    Returns:
        words ``[ceil(D/32), C, *batch, n]`` uint32, the draws ``[D, C, *batch, n]``
        packed as :func:`~isingattn.diagnostics.pack_spins` packs them (bit ``b`` of word
        ``j``: draw ``32j + b`` is +1; unpack with
        :func:`~isingattn.fluctuation.unpack_samples`), the mean flip rate over the
        kept sweeps ``[C, *batch]``, and the energy of each draw ``[D, C, *batch]``.
    """
    schedule = Schedule(num_warmup, num_samples, thin)
    dtype = h.dtype
    shape = tuple(shape)
    h = jnp.asarray(h, dtype)
    J = J.astype(dtype).with_table() if isinstance(J, SparseCouplings) else jnp.asarray(J, dtype)

    state, k = jax.vmap(lambda kc: chain_init(kc, shape, active, dtype))(chain_keys(key, num_chains))
    # The loop carries spins and noise in the kernel's own spin-major layout [n, C, *batch],
    # so no layout moves happen inside it.
    to_t = lambda x: jnp.moveaxis(x, -1, 0)  # [C, *batch, n] -> [n, C, *batch]
    from_t = lambda x: jnp.moveaxis(x, 0, -1)
    s = to_t(state.spins)
    # batched keys [C, 2] give thresholds [*batch, n, C]
    noise_of = lambda keys: jnp.moveaxis(sweep_thresholds(keys, shape, dtype, beta), (-2, -1), (0, 1))

    def noise(k, t0, L):  # the keys chain_step splits; prng.split is jax.random.split bit for bit, fused
        k, keys = lax.scan(lambda k, _: prng.split(k), k, None, length=L)  # keys [L, C, 2]
        return k, jax.vmap(noise_of)(keys)  # [L, n, C, *batch]

    def step(t, thresholds, st):
        s, E = st
        new, dE, flips = spin_major_sweep(thresholds, s, h, J, classes)
        return (new, E + dE), flips

    L = noise_chunk(schedule.total, num_chains * int(np.prod(shape)))
    (_, _), _, trace, _ = run(step, (s, jnp.zeros(s.shape[1:], dtype)), jax.random.key_data(k), noise, schedule,
                              target=lambda st: st, flips=lambda f: f, chunk=L,
                              refresh=lambda st: (st[0], energy(h, J, from_t(st[0]))))
    active_count = jnp.maximum(jnp.abs(state.spins).sum(-1), 1)
    words = jnp.moveaxis(trace.words, 1, -1)  # [D/32, n, C, *batch] -> [D/32, C, *batch, n]
    return words, trace.flips / active_count / (schedule.draws * thin), trace.energy


# ---------------------------------------------------------------------------------
# Engine
# ---------------------------------------------------------------------------------


class Gibbs(ColouredSweep):
    """Heat-bath Gibbs sampling, vectorized over chains and the whole model batch.

    Config (static): ``num_warmup`` discarded sweeps; ``num_samples`` sweeps after
    warmup, of which every ``thin``-th is kept (``num_samples // thin`` draws per
    chain, as in ``numpyro.infer.MCMC``); ``num_chains``; ``schedule``
    (``"systematic"`` or ``"colored"``); ``colors`` (optional fixed colouring,
    needed for colored updates under jit, see :func:`schedule_classes`);
    ``diagnostics`` (R-hat/ESS/MCSE in ``info``, from exact counts on the draws packed 32
    to a word, :func:`isingattn.diagnostics.spin_diagnostics`; R-hat costs one pass over
    the words, the ESS its lag counts: ``draws/32`` word operations per lag, chain and spin,
    for every lag until each spin's Geyer sequence has ended (an FFT past 256 lags): see
    benchmarks/README.md, ``gibbs_as_called.py``; under ``jit`` unread diagnostics are dropped anyway);
    ``rhat_threshold``;
    ``rao_blackwell`` (report the mean of ``tanh(β(h + J s))`` over the draws instead of
    the mean of ``s``: lower variance and never exactly ±1, see
    :mod:`isingattn.fluctuation`; recommended for training attention);
    ``keep_samples`` (return the float samples in ``Marginals.samples``; ``None``, the
    default: when they take at most ``driver.SAMPLES_LIMIT_BYTES``, 256 MiB. The draws are
    always stored packed, 1 bit each; the mean, its gradient and the diagnostics are
    computed from those bits, so a million-spin lattice runs without its samples).

    ``marginals(model, *, key)`` returns :func:`packed_sample_marginals` of the draws
    (``samples [*batch, chains * draws, n]``, chain-major, or None, see ``keep_samples``),
    so the mean is differentiable through the fluctuation–dissipation VJP. ``info``:

    * ``flip_rate [*batch, chains]``: fraction of active spins flipped per sweep
      (heat bath always accepts; this is the acceptance-rate analogue).
    * ``energy [*batch, chains, draws]``: ``E(s)`` of each kept draw (every ``thin``-th sweep
      after warmup, so its autocorrelation time is in units of ``thin`` sweeps), for
      integrated autocorrelation times and heat capacities. Tracked from each sweep's own
      energy change (:class:`GibbsInfo`), recomputed exactly every ``driver.NOISE_CHUNK`` sweeps.
    * ``r_hat``, ``ess``, ``mcse`` ``[*batch, n]`` (with ``diagnostics``): split
      R-hat and ESS (numpyro's estimators, computed in JAX so they work under
      jit), and the Monte Carlo standard error ``std / sqrt(ess)`` of each mean.
      ``corr`` (always) is the sample second moment, counted the same way
      (:func:`isingattn.fluctuation.spin_second_moment`).
      Inactive spins, and spins pinned by a field that outweighs all their couplings
      (:func:`isingattn.diagnostics.known_constant`), report ``r_hat = 1``, ``ess = chains·draws``, ``mcse = 0``.
    * ``frozen [*batch, n]`` (with ``diagnostics``): any other active spin that never
      changed in any draw of any chain. It gets ``r_hat = ess = mcse = NaN``: chains
      that never move are no evidence of mixing (e.g. ``|J| = 1e3``, all chains stuck
      in one state), whatever the dtype.
    * ``converged [*batch]``: every spin has ``r_hat < rhat_threshold`` (so no spin
      is frozen). When
      values are concrete a ``RuntimeWarning`` names the failures.

    Works inside ``jax.jit``/``grad`` (e.g. in ``boltzmann_attention`` while
    training); the sampler itself sees ``stop_gradient`` parameters.
    """

    num_warmup: int = eqx.field(static=True, default=200, converter=V.plain)
    num_samples: int = eqx.field(static=True, default=500, converter=V.plain)
    num_chains: int = eqx.field(static=True, default=4, converter=V.plain)
    schedule: str = eqx.field(static=True, default="systematic")
    thin: int = eqx.field(static=True, default=1, converter=V.plain)
    colors: Optional[tuple] = eqx.field(static=True, default=None, converter=as_classes)
    diagnostics: bool = eqx.field(static=True, default=True, converter=V.plain)
    rhat_threshold: float = eqx.field(static=True, default=1.05, converter=V.plain)
    rao_blackwell: bool = eqx.field(static=True, default=False, converter=V.plain)
    keep_samples: Optional[bool] = eqx.field(static=True, default=None, converter=V.plain)

    def __check_init__(self):
        check_chain_settings(self, "Gibbs")
        V.choice("schedule", self.schedule, SCHEDULES, owner="Gibbs")

    needs_key: ClassVar[bool] = True
    sparse_native: ClassVar[bool] = True  # colour-class sweeps on the edge list (O(E) per sweep)
    spin_info: ClassVar[tuple] = ("r_hat", "ess", "mcse", "frozen")

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        classes = self._sweep_classes(model)
        return _gibbs_marginals(model, key, (self.num_warmup, self.num_samples, self.num_chains, self.thin,
                                             self.diagnostics, float(self.rhat_threshold), classes,
                                             bool(self.rao_blackwell), self._keeps_samples(model)))

    def _keeps_samples(self, model: IsingModel) -> bool:
        return keeps_samples(self, model)

    def _warning(self, flag, info, bad, total) -> str:
        r = np.asarray(info["r_hat"])
        r = r[~np.isnan(r)]
        worst = float(r.max()) if r.size else float("nan")
        frozen = int(np.asarray(info["frozen"]).sum())
        stuck = (f" {frozen} active spin(s) never changed in any chain (frozen: no R-hat, NaN); their "
                 "marginals are not estimates." if frozen else "")
        return (f"Gibbs: {bad} of {total} models have a spin with split R-hat ≥ {self.rhat_threshold} "
                f"or undefined (worst defined {worst:.3g}): the chains have not mixed.{stuck} Raise "
                "num_warmup/num_samples, use more chains, or (strong couplings) another engine; see "
                "info['converged'], info['r_hat'], info['frozen'], info['flip_rate'].")


def _gibbs_marginals(model: IsingModel, key, config) -> Marginals:
    (num_warmup, num_samples, num_chains, thin, diagnostics, rhat_threshold, classes, rao_blackwell,
     keep_samples) = config
    n, dtype = model.n, model.dtype
    batch = tuple(model.batch_shape)
    # The sampler needs no derivatives: gradients come from the fluctuation–dissipation VJP.
    h, J, beta = (lax.stop_gradient(x) for x in (model.h, model.J, model.beta))
    words, rates, energies = run_chains(
        key, h, J, beta, model.active(), batch + (n,), num_warmup=num_warmup,
        num_samples=num_samples, num_chains=num_chains, thin=thin, classes=classes,
    )  # words [D/32, C, *batch, n] (the draws, packed), rates [C, *batch]
    C, D = num_chains, num_samples // thin
    info = {"flip_rate": jnp.moveaxis(rates, 0, -1), "energy": jnp.moveaxis(energies, (0, 1), (-1, -2))}
    # every statistic below is a count on the packed words: the float draws are never made
    words = words.reshape(words.shape[:2] + (-1,))  # [D/32, C, F]
    if diagnostics:  # split R-hat, ESS and MCSE from exact counts on the packed spins
        info.update(chain_diagnostics(words, D, C, h, J, beta, model.active(), batch, n, dtype, rhat_threshold))
    return packed_sample_marginals(model, words, D, info, keep_samples=keep_samples, rao_blackwell=rao_blackwell)
