"""The one run loop of the chain samplers: Gibbs, Swendsen–Wang and parallel tempering.

Each sampler gives a kernel (blackjax style: a pure ``step`` on a ``State`` named tuple) and
:func:`run` does the rest, the same way for all of them:

* **schedule** (``numpyro.infer.MCMC``'s): ``num_warmup`` discarded steps, then
  ``num_samples`` steps of which every ``thin``-th is kept, ``D = num_samples // thin``
  draws. As ``fori_collect`` does, the LAST step of each block of ``thin`` is kept, so the
  ``num_samples % thin`` leftover steps join the burn-in.
* **noise in bulk**: the loop runs in chunks of ``chunk`` steps; ``noise(key, t0, L)``
  draws the random input of a chunk's ``L`` steps at once (bigger fused Threefry calls than
  one step's), and ``step(t, noise_t, state)`` only consumes it.
* **the draws, packed** 32 to a word as the loop goes (one bit per spin and draw: a
  million-spin lattice's 16 chains × 100 draws take 200 MiB, not 6.4 GiB). A step writes
  draw ``(t - burn) // thin``, clipped: warmup writes land on draw 0 and are overwritten,
  as are the first ``thin - 1`` steps of every block. A chunk (at most 32 steps) sets its
  bits in two carried words and stores them once at its end: a store of the whole word
  array per step would cost more than a sweep of a sparse lattice.
* **the energy trace** of the kept draws, from the state's own ``energy`` (which a kernel
  tracks from its sweeps' energy changes, so it costs no energy evaluation per step).
* **flip counts** over the kept steps, from the step's own count (reduced inside the
  sweep, per chain), not from a difference of whole spin arrays.

Everything a sampler needs beyond that (parallel tempering's swap rates, round trips,
ladder adaptation, stepping-stone sums) rides along in ``extra``: an accumulator pytree
updated by ``accumulate(t, state, info, extra)`` after each step.

Spins are spin-major, ``[n, *lanes]``: the lanes (chains, models, replicas) trail, so a
spin's row is contiguous over all of them, the layout the kernels' sweeps work in.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import validate as V
from isingattn.diagnostics import WORD, known_constant, packed_spin_diagnostics
from isingattn.errors import IsingInputError
from isingattn.model import IsingModel

__all__ = ["Trace", "Schedule", "run", "chain_keys", "noise_chunk", "check_chain_settings", "keeps_samples",
           "chain_diagnostics", "NOISE_CHUNK", "NOISE_CHUNK_ELEMENTS", "SAMPLES_LIMIT_BYTES"]

NOISE_CHUNK = 32  # steps whose noise is drawn at once
NOISE_CHUNK_ELEMENTS = 2**24  # at most this many random numbers (64 MiB of float32) at a time
SAMPLES_LIMIT_BYTES = 2**28  # keep_samples=None keeps float samples up to this size (256 MiB)


class Schedule(NamedTuple):
    """Which steps are kept (module docstring): ``D`` draws, the first kept step is the last of
    ``burn + thin`` steps, ``total`` steps in all."""

    num_warmup: int
    num_samples: int
    thin: int

    @property
    def draws(self) -> int:
        return self.num_samples // self.thin

    @property
    def burn(self) -> int:
        return self.num_warmup + self.num_samples % self.thin

    @property
    def total(self) -> int:
        return self.burn + self.draws * self.thin


class Trace(NamedTuple):
    """What :func:`run` records.

    * words: ``[ceil(D/32), n, *lanes]`` uint32: bit ``b`` of word ``j`` is +1 in draw ``32j + b``.
    * energy: ``[D, *lanes]``, the energy of each draw.
    * flips: ``[*lanes]``, spins flipped over all kept steps (``t ≥ burn``).
    """

    words: jax.Array
    energy: jax.Array
    flips: jax.Array


def chain_keys(key, num_chains: int):
    """Per-chain keys exactly as ``numpyro.infer.MCMC`` derives them."""
    return jax.random.split(key, num_chains) if num_chains > 1 else key[None]


def noise_chunk(total: int, elements_per_step: int) -> int:
    """Steps per chunk: ``NOISE_CHUNK``, fewer when a step's noise is large (at most
    ``NOISE_CHUNK_ELEMENTS`` numbers a chunk) or the run is short."""
    return max(1, min(NOISE_CHUNK, total, NOISE_CHUNK_ELEMENTS // max(elements_per_step, 1)))


def run(step: Callable, state, key, noise: Callable, schedule: Schedule, *, target: Callable, flips: Callable,
        chunk: int, extra=(), accumulate: Optional[Callable] = None, refresh: Optional[Callable] = None,
        constrain: Optional[Callable] = None):
    """Run a kernel for ``schedule.total`` steps and record its draws (module docstring).

    Args:
        step: ``(t, noise_t, state) -> (state, info)``, one transition; ``t`` the step index
            (traced), ``noise_t`` step ``t``'s slice of the chunk's noise.
        state: the initial state (any pytree).
        key: what ``noise`` draws from (any pytree, carried through the loop).
        noise: ``(key, t0, L) -> (key, noise)``: the noise of steps ``t0 .. t0 + L - 1``,
            every leaf with a leading axis ``L`` (``L`` static, ``t0`` traced).
        schedule: :class:`Schedule`.
        target: ``state -> (spins [n, *lanes], energy [*lanes])``, what is recorded: the spins
            to pack and their energy.
        flips: ``info -> [*lanes]``, how many of those spins the step flipped.
        chunk: steps per chunk (static; :func:`noise_chunk`).
        extra, accumulate: an accumulator pytree and ``(t, state, info, extra) -> extra``.
        refresh: None or ``state -> state``, run at the start of every chunk (e.g. an exact
            energy, so that a tracked energy accumulates no rounding drift).
        constrain: None or ``(state, trace, extra) -> (state, trace, extra)``, applied to the
            carry after each step (sharding constraints).
    Returns:
        ``(state, key, Trace, extra)`` after the last step.
    """
    D, burn, total, thin = schedule.draws, schedule.burn, schedule.total, schedule.thin
    L = max(1, min(chunk, total, WORD))  # a chunk's draws then lie in at most two words
    constrain = constrain or (lambda *c: c)
    spins0, E0 = jax.eval_shape(target, state)
    lanes = E0.shape
    n = spins0.shape[0]
    # one spare word: a chunk's second word register may point past the last
    trace = Trace(jnp.zeros((-(-D // WORD) + 1, n) + lanes, jnp.uint32), jnp.zeros((D,) + lanes, E0.dtype),
                  jnp.zeros(lanes, E0.dtype))

    def one(t, nz, w0, carry):
        state, trace, lo, hi, extra = carry
        state, info = step(t, nz, state)
        spins, E = target(state)
        d = jnp.clip((t - burn) // thin, 0, D - 1)
        bit = (d % WORD).astype(jnp.uint32)
        new = lambda w: (w & ~(jnp.uint32(1) << bit)) | ((spins > 0).astype(jnp.uint32) << bit)
        upper = d // WORD > w0  # the chunk has reached its second word
        lo, hi = jnp.where(upper, lo, new(lo)), jnp.where(upper, new(hi), hi)
        energies = lax.dynamic_update_index_in_dim(trace.energy, E, d, 0)
        flipped = trace.flips + jnp.where(t >= burn, flips(info), 0)
        if accumulate is not None:
            extra = accumulate(t, state, info, extra)
        state, trace, extra = constrain(state, trace._replace(energy=energies, flips=flipped), extra)
        return state, trace, lo, hi, extra

    def chunk_body(c, carry):
        state, key, trace, extra = carry
        t0 = c * L
        key, nz = noise(key, t0, L)
        if refresh is not None:
            state = refresh(state)
        # the chunk's draws go to two word registers, stored once after the chunk: the loop
        # over steps neither reads nor writes the stored words
        w0 = jnp.clip((t0 - burn) // thin, 0, D - 1) // WORD
        lo = lax.dynamic_index_in_dim(trace.words, w0, 0, keepdims=False)
        hi = jnp.zeros_like(lo)
        inner = lambda j, cr: one(t0 + j, jax.tree_util.tree_map(lambda x: x[j], nz), w0, cr)
        state, trace, lo, hi, extra = lax.fori_loop(0, jnp.minimum(L, total - t0), inner, (state, trace, lo, hi, extra))
        words = lax.dynamic_update_index_in_dim(trace.words, lo, w0, 0)
        words = lax.dynamic_update_index_in_dim(words, hi, w0 + 1, 0)
        state, trace, extra = constrain(state, trace._replace(words=words), extra)
        return state, key, trace, extra

    state, key, trace, extra = lax.fori_loop(0, -(-total // L), chunk_body, (state, key, trace, extra))
    return state, key, trace._replace(words=trace.words[:-1]), extra


def check_chain_settings(engine, owner: str) -> None:
    """The settings that every chain engine shares (Gibbs, Swendsen–Wang, parallel tempering):
    ``num_warmup``, ``num_samples``, ``num_chains``, ``thin``, ``diagnostics``,
    ``rao_blackwell``, ``keep_samples`` and ``rhat_threshold``, and enough kept draws per
    chain (4 for split R-hat)."""
    V.nonneg_int("num_warmup", engine.num_warmup, owner=owner)
    for name in ("num_samples", "num_chains", "thin"):
        V.positive_int(name, getattr(engine, name), owner=owner)
    for name in ("diagnostics", "rao_blackwell"):
        V.boolean(name, getattr(engine, name), owner=owner)
    if engine.keep_samples is not None:
        V.boolean("keep_samples", engine.keep_samples, owner=owner)
    # R-hat is ≥ 1 up to noise: a threshold ≤ 1 could never be met
    V.float_in("rhat_threshold", engine.rhat_threshold, 1.0, owner=owner, lo_open=True)
    draws = engine.num_samples // engine.thin
    need = 4 if engine.diagnostics else 1
    if draws < need:
        raise IsingInputError(
            f"{owner} keeps num_samples // thin = {engine.num_samples} // {engine.thin} = {draws} draws per chain; "
            f"need at least {need}{' for split R-hat' if engine.diagnostics else ''}. Raise num_samples or lower thin."
        )


def keeps_samples(engine, model: IsingModel) -> bool:
    """Whether a chain engine returns float samples: ``engine.keep_samples``, or (None) when
    its ``num_chains × draws`` samples of ``model`` take at most ``SAMPLES_LIMIT_BYTES``."""
    if engine.keep_samples is not None:
        return bool(engine.keep_samples)
    size = engine.num_chains * (engine.num_samples // engine.thin) * model.n * int(np.prod(model.batch_shape, dtype=int))
    return size * jnp.dtype(model.dtype).itemsize <= SAMPLES_LIMIT_BYTES


def chain_diagnostics(words, D: int, C: int, h, J, beta, active, batch, n: int, dtype, rhat_threshold: float,
                      refreshed=False) -> dict:
    """The diagnostics every chain engine reports, from the packed draws ``words [D/32, C, F]``:
    split R-hat, ESS and MCSE from exact counts (:func:`~isingattn.diagnostics.packed_spin_diagnostics`;
    NaN for a frozen spin), ``frozen`` and ``converged`` by the rule every sampler shares
    (:func:`~isingattn.diagnostics.known_constant`). ``refreshed`` (broadcast to ``[*batch, n]``)
    adds constants that something else vouches for (parallel tempering's round trips)."""
    first = (words[0, 0] & 1).astype(bool).reshape(batch + (n,))
    known = known_constant(h, J, beta, first, C * D, active) | refreshed
    rhat, ess, err, const = (v.reshape(batch + (n,)) for v in packed_spin_diagnostics(words, D, known.reshape(-1),
                                                                                     dtype=dtype))
    return dict(r_hat=rhat.astype(dtype), ess=ess.astype(dtype), mcse=err.astype(dtype), frozen=const & ~known,
                converged=jnp.all(rhat < rhat_threshold, axis=-1))  # NaN (frozen) counts as not converged
