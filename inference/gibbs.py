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
* :class:`IsingGibbsKernel`: the kernel as a ``numpyro.infer.mcmc.MCMCKernel``, so
  ``numpyro.infer.MCMC`` supplies chains, warmup, thinning, the progress bar,
  ``get_samples`` and ``print_summary``, and ``az.from_numpyro`` works.
* :class:`Gibbs` (``inference.get("gibbs")``): the engine. One jitted loop over
  sweeps with the chains as a batch axis, for the whole model batch (every query of
  an attention layer at once). Same key => same chains as ``MCMC`` with
  ``chain_method="vectorized"`` and the same settings (a test checks it).

How a sweep is computed (each step measured on CPU, dense n = 64, 256 chains):

* The heat-bath rule ``s_i' = +1 iff u_i < sigmoid(2β f_i)`` is the comparison
  ``f_i > logit(u_i) / 2β``: the logistic noise of whole sweeps is drawn in bulk
  (:mod:`isingattn.prng`, fused Threefry), and the sequential part only compares.
* Dense ``J`` allows no parallel updates within a chain, so the systematic scan is
  sequential; its parallelism is over chains and models. It goes ``SWEEP_BLOCK``
  spins at a time in spin-major layout ``[n, chains·models]``: one GEMM gives a
  block's fields from the current spins, then one small fusion updates the block's
  spins in order (the couplings inside the block are applied as each spin changes).
  This is ``n / SWEEP_BLOCK`` GEMMs and fusions per sweep instead of ``n`` rank-1
  updates of the ``[n, chains]`` field matrix (2x the spin-update rate), and the
  fields are exact at every block (no drift from incremental updates).

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

import operator
import warnings
from typing import NamedTuple, Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn import prng
from isingattn import validate as V
from isingattn.causal import by_prefix
from isingattn.energy import energy, local_field, local_field_rows
from isingattn.engine import Engine, register
from isingattn.errors import IsingInputError
from isingattn.fluctuation import sample_marginals
from isingattn.marginals import Marginals
from isingattn.model import IsingModel

try:  # numpyro is a hard dependency; the import is kept local to the kernel class.
    from numpyro.infer.mcmc import MCMCKernel
    from numpyro.util import is_prng_key
except ImportError:  # pragma: no cover
    MCMCKernel = object

    def is_prng_key(key):  # type: ignore[no-redef]
        return True

SCHEDULES = ("systematic", "colored")
# Spins per block of the systematic scan (see gibbs_sweep). Measured on a 2-core CPU,
# dense n = 64, 256 chains, float32: b = 2: 46, 4: 57, 8: 41 M updates/s (sweep
# alone); b = 16 is slower still (XLA splits the unrolled block update).
SWEEP_BLOCK = 4
NOISE_CHUNK = 32  # sweeps whose noise run_chains draws at once

__all__ = [
    "GibbsState",
    "GibbsInfo",
    "gibbs_sweep",
    "sweep_thresholds",
    "sweep_with_thresholds",
    "init_spins",
    "color_classes",
    "schedule_classes",
    "split_gelman_rubin",
    "effective_sample_size",
    "IsingGibbsKernel",
    "IsingMCMCState",
    "Gibbs",
    "to_inference_data",
]


# ---------------------------------------------------------------------------------
# The pure kernel
# ---------------------------------------------------------------------------------


class GibbsState(NamedTuple):
    """State of a batch of chains.

    spins: ``[..., n]`` in {-1, +1}; 0 marks an inactive (masked) spin, which the
        kernel never changes. Leading axes are any mix of chains and models; ``h``
        and ``J`` broadcast against them.
    """

    spins: jax.Array


class GibbsInfo(NamedTuple):
    """Diagnostics of one sweep.

    flip_rate: ``[...]``, the fraction of active spins that changed sign. A
        heat-bath update is always accepted, so this is the analogue of an
        acceptance rate: near 0 means the chain is frozen.
    """

    flip_rate: jax.Array


def _class_table(classes, n: int):
    """Padded ``[K, m]`` index table and validity mask of the update classes."""
    if classes is None:
        return np.arange(n, dtype=np.int32)[:, None], np.ones((n, 1), bool)
    m = max(len(c) for c in classes)
    # Pad with the class's own first index: reads of a duplicate are harmless and its
    # update is multiplied by valid = False, so scatter-adds of duplicates add 0.
    idx = np.array([list(c) + [c[0]] * (m - len(c)) for c in classes], dtype=np.int32)
    valid = np.array([[True] * len(c) + [False] * (m - len(c)) for c in classes])
    return idx, valid


def _update_block(G, t, s, J_in):
    """Heat-bath updates of ``b`` consecutive spins, in order, for every chain and model
    (spin-major: the block's spins on axis 0).

    G: ``[b, ...]`` their local fields with the block's OLD spins; t: ``[b, ...]``
    thresholds from :func:`sweep_thresholds`; s: ``[b, ...]`` old spins (0 = inactive,
    kept 0); J_in: ``[b, b, ...]`` couplings inside the block. Returns the new spins.

    Spin ``i`` sees the spins ``j < i`` of the block already updated:
    ``f_i = G_i + Σ_{j<i} J_ij (s_j' - s_j)``. Unrolled, this is ONE elementwise XLA
    fusion over chains and models (b(b-1)/2 multiply-adds each); up to b = 8 XLA keeps
    it one fusion, at b = 16 it splits it and recomputes (measured).
    """
    new, d = [], []
    for i in range(G.shape[0]):
        f = G[i]
        for j in range(i):
            f = f + J_in[i, j] * d[j]
        a = jnp.abs(s[i])
        new.append(jnp.where(f > t[i], a, -a))
        d.append(new[i] - s[i])
    return jnp.stack(new)


def _spin_major(h, J, r: int, chains_last: bool = False):
    """``h``, ``J`` for :func:`_systematic_sweep_t`, for spins ``[n, *batch]`` with ``r``
    batch axes (``[n, *batch, C]`` with ``chains_last``): ``h_t [n, *batch']`` and
    ``J_t`` ``[n, n]`` when one ``J`` serves every chain and model (block fields are
    then plain GEMMs), else ``[n, n, *batch']``; size 1 where shared."""
    n = J.shape[-1]
    h = h.reshape((1,) * max(r - (h.ndim - 1), 0) + h.shape)
    h_t = jnp.moveaxis(h, -1, 0)
    if all(d == 1 for d in J.shape[:-2]):
        J_t = J.reshape(n, n)
    else:
        J = J.reshape((1,) * max(r - (J.ndim - 2), 0) + J.shape)
        J_t = jnp.moveaxis(J, (-2, -1), (0, 1))
        J_t = J_t[..., None] if chains_last else J_t
    return (h_t[..., None] if chains_last else h_t), J_t


def _systematic_sweep_t(t_t, s_t, h_t, J_t):
    """The systematic scan ``0..n-1``, ``SWEEP_BLOCK`` spins at a time, in spin-major
    layout: ``t_t, s_t [n, ...]`` (thresholds, spins; chains and models trailing, so a
    block's rows are contiguous over all of them), ``h_t, J_t`` from :func:`_spin_major`.

    Per block, one GEMM gives the block's fields from the CURRENT spins (recomputed
    exactly, so no rounding drift builds up), then :func:`_update_block`. Returns the
    new spins ``[n, ...]``."""
    n = s_t.shape[0]
    b = min(SWEEP_BLOCK, n)
    K, rem = divmod(n, b)
    split = lambda x: x[: K * b].reshape((K, b) + x.shape[1:])  # leading axis: block
    J_in = jnp.stack([J_t[k * b : (k + 1) * b, k * b : (k + 1) * b] for k in range(K)])  # [K, b, b, ...]

    def block(s_t, x):
        k, h_k, J_k, Jin_k, t_k = x
        G = local_field_rows(h_k, J_k, s_t)  # [b, ...]
        old = lax.dynamic_slice_in_dim(s_t, k * b, b, axis=0)
        return lax.dynamic_update_slice_in_dim(s_t, _update_block(G, t_k, old, Jin_k), k * b, axis=0), None

    s_t, _ = lax.scan(block, s_t, (jnp.arange(K), split(h_t), split(J_t), J_in, split(t_t)))
    if rem:  # the last n % b spins: one more, smaller block
        G = local_field_rows(h_t[K * b :], J_t[K * b :], s_t)
        tail = _update_block(G, t_t[K * b :], s_t[K * b :], J_t[K * b :, K * b :])
        s_t = lax.dynamic_update_slice_in_dim(s_t, tail, K * b, axis=0)
    return s_t


def sweep_thresholds(key, shape, dtype, beta):
    """The noise of one sweep: ``logistic / 2β``, ``[*shape]``. Spin ``i`` becomes +1
    iff its local field exceeds its threshold, which happens with probability
    ``sigmoid(2β f_i)``: the heat-bath rule, with no transcendental in the sweep."""
    return prng.logistic(key, shape, dtype) * (0.5 / jnp.asarray(beta, dtype))


def gibbs_sweep(key, state: GibbsState, h, J, beta, classes: Optional[Sequence[Sequence[int]]] = None):
    """One heat-bath sweep: every active spin is resampled once from its conditional
    ``p(s_i = +1 | rest) = sigmoid(2β (h_i + Σ_j J_ij s_j))``.

    Args:
        key: PRNG key (one key for the whole array of chains given).
        state: :class:`GibbsState` with spins ``[..., n]``.
        h: fields ``[..., n]``, J: couplings ``[..., n, n]`` (symmetric, zero
            diagonal), both broadcast against ``state.spins``; beta: scalar > 0.
        classes: static sequence of index sequences partitioning ``range(n)``,
            visited in order; spins of one class are updated in parallel and must
            be pairwise uncoupled. ``None``: systematic scan ``0, 1, ..., n-1``.

    Returns:
        ``(GibbsState, GibbsInfo)``. Cost ``O(n²)`` per model: for the systematic
        scan, ``n / SWEEP_BLOCK`` field GEMMs plus one small fusion per block; for
        classes, one field GEMM and an ``O(n · |class|)`` update per class.
    """
    t = sweep_thresholds(key, state.spins.shape, state.spins.dtype, beta)
    return sweep_with_thresholds(t, state, h, J, classes)


def sweep_with_thresholds(t, state: GibbsState, h, J, classes=None):
    """:func:`gibbs_sweep` with its noise given: ``t [..., n]`` from :func:`sweep_thresholds`
    (so that a run can draw the noise of many sweeps at once)."""
    s = state.spins
    n, r = s.shape[-1], s.ndim - 1
    dtype = s.dtype
    J = jnp.asarray(J, dtype)
    J = J.reshape((1,) * max(r - (J.ndim - 2), 0) + J.shape)  # batch axes aligned with the spins'
    h = jnp.asarray(h, dtype)

    if classes is None:
        h_t, J_t = _spin_major(h, J, r)
        new = jnp.moveaxis(_systematic_sweep_t(jnp.moveaxis(t, -1, 0), jnp.moveaxis(s, -1, 0), h_t, J_t), 0, -1)
    else:  # colour classes: every spin of a class at once (they are mutually uncoupled)
        field = jnp.broadcast_to(local_field(h, J, s), s.shape)  # once per sweep: no rounding drift builds up
        # Spin-major layout [n, ...]: a class's fields, thresholds and coupling rows
        # are leading-axis gathers.
        s_t, f_t, t_t = (jnp.moveaxis(x, -1, 0) for x in (s, field, t))
        a_t = jnp.abs(s_t)  # 1 active, 0 inactive (held at 0)
        J_t = jnp.moveaxis(J, (-2, -1), (0, 1))  # [i, k, *batch]: row i of J, over spins k
        idx, valid = _class_table(classes, n)
        pad = (slice(None),) + (None,) * r

        def step(carry, cls):
            s_t, f = carry
            i, ok = cls  # [m] indices of the class, [m] validity
            new = jnp.where(f[i] > t_t[i], a_t[i], -a_t[i])
            d = (new - s_t[i]) * ok.astype(dtype)[pad]  # [m, ...]: 0 or ±2; 0 for padding
            return (s_t.at[i].add(d), f + jnp.einsum("mk...,m...->k...", J_t[i], d)), None

        (new_t, _), _ = lax.scan(step, (s_t, f_t), (jnp.asarray(idx), jnp.asarray(valid)))
        new = jnp.moveaxis(new_t, 0, -1)
    rate = 0.5 * jnp.abs(new - s).sum(-1) / jnp.maximum(jnp.abs(s).sum(-1), 1)
    return GibbsState(new), GibbsInfo(rate)


def init_spins(key, shape, active=None, dtype=jnp.float32) -> GibbsState:
    """Uniformly random ±1 spins of ``shape`` (``[..., n]``); inactive spins are 0."""
    s = jax.random.rademacher(key, shape, dtype=dtype)
    if active is not None:
        s = jnp.where(active, s, jnp.zeros((), dtype))
    return GibbsState(s)


# ---------------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------------


def color_classes(J) -> tuple:
    """Greedy colouring (networkx, ``largest_first``) of the graph of nonzero couplings.

    J: concrete ``[..., n, n]``; the graph is the union over batch axes. Returns a
    tuple of tuples of spin indices (each class sorted, classes ordered by their
    smallest index), usable as ``classes`` in :func:`gibbs_sweep`. A dense ``J``
    gives one spin per class, ``((0,), (1,), ...)``: the systematic scan.
    """
    import networkx as nx

    J = np.asarray(J)
    n = J.shape[-1]
    nz = np.any(J.reshape(-1, n, n) != 0, axis=0)
    G = nx.Graph()
    G.add_nodes_from(range(n))
    jj, kk = np.nonzero(np.triu(nz | nz.T, 1))
    G.add_edges_from(zip(jj.tolist(), kk.tolist()))
    color = nx.greedy_color(G, strategy="largest_first")
    groups: dict[int, list[int]] = {}
    for v, c in color.items():
        groups.setdefault(c, []).append(v)
    return tuple(sorted((tuple(sorted(g)) for g in groups.values()), key=lambda c: c[0]))


def _index_classes(colors) -> tuple:
    """Nested sequences of spin indices -> tuple of tuples of ``int``. Only integers are
    indices: ``int("x")`` would raise a bare ValueError and ``int(0.5)`` silently give 0."""
    def index(i):
        if isinstance(i, (bool, np.bool_)):
            raise TypeError
        return operator.index(i)

    try:
        return tuple(tuple(index(i) for i in c) for c in colors)
    except TypeError:
        raise IsingInputError(f"colors must be a sequence of sequences of integer spin indices, e.g. ((0, 2), (1, 3)); "
                              f"got {colors!r}.") from None


def _check_classes(classes, n: int, J=None) -> tuple:
    classes = _index_classes(classes)
    flat = sorted(i for c in classes for i in c)
    if flat != list(range(n)) or any(len(c) == 0 for c in classes):
        raise IsingInputError(
            f"colors must partition the spins 0..{n - 1} into non-empty classes (each spin exactly once); got {classes}. "
            "Use inference.gibbs.color_classes(J) to compute them."
        )
    if J is not None and not isinstance(J, jax.core.Tracer):
        nz = np.any(np.asarray(J).reshape(-1, n, n) != 0, axis=0)
        for c in classes:
            sub = nz[np.ix_(c, c)]
            if sub.any():
                j, k = np.argwhere(sub)[0]
                raise IsingInputError(
                    f"colors: spins {c[j]} and {c[k]} are in the same class but coupled (J != 0); a class is updated in "
                    "parallel, so its spins must be uncoupled. Use inference.gibbs.color_classes(J)."
                )
    return classes


def schedule_classes(schedule: str, J, colors=None):
    """The static update classes of a schedule: ``None`` (systematic) or a tuple of
    index tuples (colored). For ``colored`` the colouring comes from ``colors`` if
    given, else from the nonzero pattern of a concrete ``J``; under ``jit`` with a
    traced ``J`` and no ``colors`` the sparsity is unknown, so it warns and falls
    back to the systematic scan (still a correct sampler)."""
    if schedule not in SCHEDULES:
        raise IsingInputError(f"schedule must be one of {SCHEDULES}; got {schedule!r}.")
    n = J.shape[-1]
    if schedule == "systematic":
        return None
    if colors is not None:
        return _check_classes(colors, n, J)
    if isinstance(J, jax.core.Tracer):
        warnings.warn(
            "Gibbs(schedule='colored'): J is traced (inside jit/grad), so its sparsity pattern cannot be read; "
            "falling back to the systematic scan. Pass colors=inference.gibbs.color_classes(J_structure) to Gibbs "
            "to keep colored updates under jit.",
            stacklevel=3,
        )
        return None
    classes = color_classes(J)
    return None if len(classes) == n else classes


# ---------------------------------------------------------------------------------
# Diagnostics in JAX (ports of numpyro.diagnostics, which is numpy-only)
# ---------------------------------------------------------------------------------


def _chain_variance_stats(x):
    C, N = x.shape[:2]
    var_within = x.var(axis=1, ddof=1).mean(0)
    var_estimator = var_within * (N - 1) / N
    if C > 1:
        var_estimator = var_estimator + x.mean(axis=1).var(axis=0, ddof=1)
    else:
        var_within = var_estimator
    return var_within, var_estimator


def _is_constant(x):
    """``[...]``: every draw of every chain equal (tested exactly: under jit a variance
    of constant draws can come out as ±1e-17 instead of 0)."""
    return jnp.all(x == x[:1, :1], axis=(0, 1))


def split_gelman_rubin(x, known=None):
    """Split R-hat of ``x [C, N, ...]`` (chains, draws, ...) -> ``[...]``, in JAX.

    Same estimator as ``numpyro.diagnostics.split_gelman_rubin``; usable under jit.
    Needs ``N >= 4``. Where every draw of every chain is identical (zero variance) the
    estimator is 0/0. ``known [...]`` (bool, broadcast) says where such a constant is
    known exactly (e.g. a masked spin): there it returns 1; elsewhere NaN, since chains
    that never moved say nothing about mixing. ``known=None`` treats every constant as
    known (1).
    """
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[1] < 4:
        raise IsingInputError(f"split R-hat needs x [chains, draws >= 4, ...]; got shape {x.shape}.")
    const = _is_constant(x)
    if known is not None:  # an unexplained constant: no R-hat (NaN fails every threshold)
        return jnp.where(const & ~known, jnp.nan, split_gelman_rubin(x))
    half = x.shape[1] // 2
    x = jnp.concatenate([x[:, :half], x[:, -half:]], axis=0)
    var_within, var_estimator = _chain_variance_stats(x)
    rhat = jnp.sqrt(var_estimator / jnp.where(var_within > 0, var_within, 1.0))
    return jnp.where(const, 1.0, jnp.where(var_within > 0, rhat, jnp.inf))


def _fft_next_fast_len(target: int) -> int:
    if target <= 2:
        return target
    while True:
        m = target
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        if m == 1:
            return target
        target += 1


def effective_sample_size(x, known=None):
    """ESS of ``x [C, N, ...]`` (chains, draws, ...) -> ``[...]``, in JAX.

    Same estimator as ``numpyro.diagnostics.effective_sample_size`` (Geyer's
    initial monotone sequence on the FFT autocovariance, Stan's multi-chain
    ``rho``); usable under jit. Zero-variance quantities get ``C·N`` where ``known``
    (as in :func:`split_gelman_rubin`; ``None``: everywhere) and NaN elsewhere.
    """
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[1] < 2:
        raise IsingInputError(f"ESS needs x [chains, draws >= 2, ...]; got shape {x.shape}.")
    if known is not None:
        return jnp.where(_is_constant(x) & ~known, jnp.nan, effective_sample_size(x))
    C, N = x.shape[:2]
    xt = jnp.moveaxis(x, 1, -1)  # [C, ..., N]
    c = xt - xt.mean(-1, keepdims=True)
    M2 = 2 * _fft_next_fast_len(N)
    f = jnp.fft.rfft(c, n=M2, axis=-1)
    # Only the chain average of the autocovariances is used, and the inverse FFT is
    # linear: average the power spectra first (one inverse FFT instead of C).
    power = (jnp.real(f) ** 2 + jnp.imag(f) ** 2).mean(0)
    gamma_mean = jnp.moveaxis(jnp.fft.irfft(power, n=M2, axis=-1)[..., :N] / N, -1, 0)  # [N, ...]
    var_within, var_estimator = _chain_variance_stats(x)
    const = _is_constant(x) | (var_estimator <= 0)
    safe = jnp.where(const, 1.0, var_estimator)
    rho = 1.0 - (var_within - gamma_mean) / safe  # [N, ...]
    rho = rho.at[0].set(1.0)
    Rho = rho[:-1:2] + rho[1::2]
    Rho = jnp.concatenate([Rho[:1], lax.cummin(jnp.clip(Rho[1:], 0, None), axis=0)], axis=0)
    tau = -1.0 + 2.0 * Rho.sum(0)
    return jnp.where(const, float(C * N), C * N / tau)


# ---------------------------------------------------------------------------------
# Chains (shared by the engine and the MCMC kernel)
# ---------------------------------------------------------------------------------


def _chain_keys(key, num_chains: int):
    """Per-chain keys exactly as ``numpyro.infer.MCMC`` derives them."""
    return jax.random.split(key, num_chains) if num_chains > 1 else key[None]


def _chain_init(key, shape, active, dtype):
    """(state, carried key) of one chain, as :meth:`IsingGibbsKernel.init` does it."""
    k_init, k = jax.random.split(key)
    return init_spins(k_init, shape, active, dtype), k


def _chain_step(state, key, h, J, beta, classes):
    """One MCMC transition of one chain: split the carried key, sweep."""
    key, k_sweep = jax.random.split(key)
    state, info = gibbs_sweep(k_sweep, state, h, J, beta, classes)
    return state, key, info


def run_chains(key, h, J, beta, active, shape, *, num_warmup: int, num_samples: int, num_chains: int,
               thin: int = 1, classes=None):
    """Run ``num_chains`` chains of :func:`gibbs_sweep` in one loop over sweeps.

    Same semantics as ``MCMC(num_warmup, num_samples, thinning=thin)``: warmup
    sweeps are discarded, then ``num_samples`` sweeps of which every ``thin``-th is
    kept (``num_samples // thin`` draws). Chain ``c`` uses exactly the keys and
    noise of ``IsingGibbsKernel`` run as chain ``c`` of a vectorized ``MCMC``.

    The chains are a batch axis of one state (not a ``vmap``), so each block of the
    systematic scan is one GEMM over every chain and model; that scan keeps the whole
    run in spin-major layout ``[n, *batch, C]``, in which the noise is also drawn (no
    transposes per sweep).

    Args:
        shape: ``(*batch, n)``, the spin shape of one chain.
    Returns:
        samples ``[C, D, *batch, n]`` (chains, draws) and the mean flip rate over
        the kept sweeps ``[C, *batch]``.
    """
    D = num_samples // thin
    burn = num_warmup + num_samples % thin  # as fori_collect: keep the LAST sweep of each block
    total = burn + D * thin
    dtype = h.dtype
    C = num_chains
    shape = tuple(shape)
    r = len(shape)  # batch axes of the state [C, *batch, n]: chains and models

    if classes is None:  # spin-major, chains last: [n, *batch, C]
        fwd = lambda x: jnp.moveaxis(x, (0, -1), (-1, 0))  # [C, *batch, n] -> [n, *batch, C]
        bwd = lambda x: jnp.moveaxis(x, (0, -1), (-1, 0))
        h_t, J_t = _spin_major(jnp.asarray(h, dtype), jnp.asarray(J, dtype), r - 1, chains_last=True)
        step = lambda t, s: _systematic_sweep_t(t, s, h_t, J_t)
        # batched keys give [*batch, n, C]: chains already last, so only n moves
        noise_of = lambda keys: jnp.moveaxis(sweep_thresholds(keys, shape, dtype, beta), -2, 0)
    else:
        fwd = bwd = lambda x: x
        step = lambda t, s: sweep_with_thresholds(t, GibbsState(s), h, J, classes)[0].spins
        noise_of = lambda keys: jnp.moveaxis(sweep_thresholds(keys, shape, dtype, beta), -1, 0)  # [C, *shape]

    state, k = jax.vmap(lambda kc: _chain_init(kc, shape, active, dtype))(_chain_keys(key, C))
    s = fwd(state.spins)
    draws = jnp.zeros((D,) + s.shape, dtype)
    flips = jnp.zeros(s.shape, dtype)  # |s' - s| summed over the kept sweeps; reduced once at the end

    # Sweep t writes draw (t - burn) // thin, clipped: warmup writes land on draw 0
    # and are overwritten later, as are the first thin-1 sweeps of every block.
    def sweep(t, carry, thresholds):
        s, draws, flips = carry
        new = step(thresholds, s)
        draws = lax.dynamic_update_index_in_dim(draws, new, jnp.clip((t - burn) // thin, 0, D - 1), 0)
        flips = flips + jnp.where(t >= burn, jnp.abs(new - s), 0)
        return new, draws, flips

    # The noise of NOISE_CHUNK sweeps is drawn at once (bigger fused Threefry calls),
    # from the keys _chain_step splits. One loop over chunks, an inner one over the
    # sweeps of a chunk (the last chunk may be partial: a dynamic trip count).
    L = min(NOISE_CHUNK, total)

    def chunk(c, carry):
        s, k, draws, flips = carry
        # raw key data [C, 2]; prng.split is jax.random.split bit for bit, fused
        k, keys = lax.scan(lambda k, _: prng.split(k), k, None, length=L)  # keys [L, C, 2]
        noise = jax.vmap(noise_of)(keys)  # [L, *state layout]
        inner = lambda j, cr: sweep(c * L + j, cr, noise[j])
        s, draws, flips = lax.fori_loop(0, jnp.minimum(L, total - c * L), inner, (s, draws, flips))
        return s, k, draws, flips

    _, _, draws, flips = lax.fori_loop(0, -(-total // L), chunk, (s, jax.random.key_data(k), draws, flips))
    draws = jnp.moveaxis(jax.vmap(bwd)(draws), 0, 1)  # [C, D, *batch, n]
    active_count = jnp.maximum(jnp.abs(state.spins).sum(-1), 1)
    return draws, 0.5 * bwd(flips).sum(-1) / active_count / (D * thin)


# ---------------------------------------------------------------------------------
# NumPyro kernel
# ---------------------------------------------------------------------------------


class IsingMCMCState(NamedTuple):
    """State of :class:`IsingGibbsKernel` (one chain, or ``[C, ...]`` when vectorized).

    z: spins ``[*batch, n]`` (the ``sample_field``); energy: ``E(z)`` ``[*batch]``;
    flip_rate: of the last sweep ``[*batch]``; rng_key: the chain's key.
    ``energy`` and ``flip_rate`` can be collected with ``MCMC.run(..., extra_fields=("energy", "flip_rate"))``.
    """

    z: jax.Array
    energy: jax.Array
    flip_rate: jax.Array
    rng_key: jax.Array


class IsingGibbsKernel(MCMCKernel):
    """The heat-bath Gibbs sweep as a ``numpyro.infer.mcmc.MCMCKernel``.

    ::

        kernel = IsingGibbsKernel(model, schedule="colored")
        mcmc = MCMC(kernel, num_warmup=200, num_samples=500, num_chains=4, chain_method="vectorized")
        mcmc.run(jax.random.key(0))
        mcmc.get_samples()["s"]     # [chains * draws, *batch, n]
        mcmc.print_summary(); az.from_numpyro(mcmc)

    One MCMC step is one full sweep. Samples are reported as the site ``site``
    (default ``"s"``). Works with every ``chain_method``; with ``"vectorized"``
    the chains are vmapped over their own keys, exactly as the :class:`Gibbs`
    engine runs them (same key => same samples). ``init_params`` (optional) are
    initial spins ``[*batch, n]`` (``[C, *batch, n]`` for several chains).
    """

    model = None  # not a NumPyro model: az.from_numpyro reads sampler.model and must find None
    sample_field = "z"

    def __init__(self, ising_model: IsingModel, schedule: str = "systematic", colors=None, site: str = "s"):
        if not isinstance(ising_model, IsingModel):
            raise IsingInputError(f"IsingGibbsKernel needs an IsingModel; got {type(ising_model).__name__}.")
        self.ising_model = ising_model
        self.schedule = schedule
        self.site = site
        self._classes = schedule_classes(schedule, ising_model.J, colors)

    @property
    def default_fields(self):
        return ("z",)

    def _shape(self):
        return tuple(self.ising_model.batch_shape) + (self.ising_model.n,)

    def _init_one(self, key, init):
        m = self.ising_model
        key = prng.check_key(key, owner="IsingGibbsKernel")  # any key impl; threefry keys unchanged
        state, k = _chain_init(key, self._shape(), m.active(), m.dtype)
        if init is not None:
            s = jnp.broadcast_to(jnp.asarray(init, m.dtype), self._shape())
            s = jnp.where(s >= 0, 1.0, -1.0).astype(m.dtype)  # any sign pattern; 0 counts as +1
            act = m.active()
            state = GibbsState(s if act is None else jnp.where(act, s, 0.0))
        return IsingMCMCState(state.spins, energy(m.h, m.J, state.spins), jnp.zeros(self._shape()[:-1], m.dtype), k)

    def _sample_one(self, state: IsingMCMCState) -> IsingMCMCState:
        m = self.ising_model
        new, k, info = _chain_step(GibbsState(state.z), state.rng_key, m.h, m.J, m.beta, self._classes)
        return IsingMCMCState(new.spins, energy(m.h, m.J, new.spins), info.flip_rate, k)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        if is_prng_key(rng_key):
            return self._init_one(rng_key, init_params)
        # chain_method="vectorized": a batch of keys, one per chain
        return jax.vmap(self._init_one, in_axes=(0, None if init_params is None else 0))(rng_key, init_params)

    def sample(self, state, model_args, model_kwargs):
        if is_prng_key(state.rng_key):
            return self._sample_one(state)
        return jax.vmap(self._sample_one)(state)

    def postprocess_fn(self, model_args, model_kwargs):
        site = self.site
        return lambda z: {site: z}

    def get_diagnostics_str(self, state):
        return f"flip rate {float(jnp.mean(state.flip_rate)):.3f}"


# ---------------------------------------------------------------------------------
# Engine
# ---------------------------------------------------------------------------------


def _as_classes(colors):
    """Static config must be hashable: nested lists/arrays of indices -> tuple of tuples."""
    if colors is None:
        return None
    return _index_classes(colors)


@register("gibbs")
class Gibbs(Engine):
    """Heat-bath Gibbs sampling, vectorized over chains and the whole model batch.

    Config (static): ``num_warmup`` discarded sweeps; ``num_samples`` sweeps after
    warmup, of which every ``thin``-th is kept (``num_samples // thin`` draws per
    chain, as in ``numpyro.infer.MCMC``); ``num_chains``; ``schedule``
    (``"systematic"`` or ``"colored"``); ``colors`` (optional fixed colouring,
    needed for colored updates under jit, see :func:`schedule_classes`);
    ``diagnostics`` (R-hat/ESS in ``info``: an FFT over every draw of every spin,
    turn it off in training loops where it is not read); ``rhat_threshold``;
    ``rao_blackwell`` (report the mean of ``tanh(β(h + J s))`` over the draws instead of
    the mean of ``s``: lower variance and never exactly ±1, see
    :mod:`isingattn.fluctuation`; recommended for training attention).

    ``marginals(model, *, key)`` returns :func:`sample_marginals` of the draws
    (``samples [*batch, chains * draws, n]``, chain-major), so the mean is
    differentiable through the fluctuation–dissipation VJP. ``info``:

    * ``flip_rate [*batch, chains]``: fraction of active spins flipped per sweep
      (heat bath always accepts; this is the acceptance-rate analogue).
    * ``r_hat``, ``ess``, ``mcse`` ``[*batch, n]`` (with ``diagnostics``): split
      R-hat and ESS (numpyro's estimators, computed in JAX so they work under
      jit), and the Monte Carlo standard error ``std / sqrt(ess)`` of each mean.
      Inactive spins, and spins pinned by a field that outweighs all their couplings
      (:func:`_known_spins`), report ``r_hat = 1``, ``ess = chains·draws``, ``mcse = 0``.
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
    colors: Optional[tuple] = eqx.field(static=True, default=None, converter=_as_classes)
    diagnostics: bool = eqx.field(static=True, default=True, converter=V.plain)
    rhat_threshold: float = eqx.field(static=True, default=1.05, converter=V.plain)
    rao_blackwell: bool = eqx.field(static=True, default=False, converter=V.plain)

    def __check_init__(self):
        o = "Gibbs"
        V.nonneg_int("num_warmup", self.num_warmup, owner=o)
        for name in ("num_samples", "num_chains", "thin"):
            V.positive_int(name, getattr(self, name), owner=o)
        V.choice("schedule", self.schedule, SCHEDULES, owner=o)
        for name in ("diagnostics", "rao_blackwell"):
            V.boolean(name, getattr(self, name), owner=o)
        # R-hat is ≥ 1 up to noise: a threshold ≤ 1 could never be met
        V.float_in("rhat_threshold", self.rhat_threshold, 1.0, owner=o, lo_open=True)
        draws = self.num_samples // self.thin
        need = 4 if self.diagnostics else 1
        if draws < need:
            raise IsingInputError(
                f"Gibbs keeps num_samples // thin = {self.num_samples} // {self.thin} = {draws} draws per chain; "
                f"need at least {need}{' for split R-hat' if self.diagnostics else ''}. Raise num_samples or lower thin."
            )

    def marginals(self, model: IsingModel, *, key: Optional[jax.Array] = None) -> Marginals:
        if key is None:
            raise IsingInputError("Gibbs is a sampling engine and needs a PRNG key: marginals(model, key=jax.random.key(0)).")
        if not isinstance(model, IsingModel):
            raise IsingInputError(f"Gibbs.marginals expects an IsingModel; got {type(model).__name__}.")
        key = prng.check_key(key, owner="Gibbs.marginals")
        classes = schedule_classes(self.schedule, model.J, self.colors)
        # Only what shapes the computation is static: a dense 'colored' run shares the
        # compiled program of the systematic one.
        config = lambda cl: (self.num_warmup, self.num_samples, self.num_chains, self.thin, self.diagnostics,
                             float(self.rhat_threshold), cl, bool(self.rao_blackwell))
        if model.causal:  # inactive spins decouple: sample each prefix bucket on its own spins
            def solve(sub, k):  # the colouring restricted to the bucket's spins stays proper
                cl = None if classes is None else tuple(c for c in (tuple(i for i in c if i < sub.n) for c in classes) if c)
                return _gibbs_marginals(sub, k, config(cl))

            out = by_prefix(solve, model, key, spin_info=("r_hat", "ess", "mcse", "frozen"))
        else:
            out = _gibbs_marginals(model, key, config(classes))
        conv = out.info.get("converged")
        if conv is not None and not isinstance(conv, jax.core.Tracer):
            bad = ~np.asarray(conv)
            if bad.any():
                r = np.asarray(out.info["r_hat"])
                r = r[~np.isnan(r)]
                worst = float(r.max()) if r.size else float("nan")
                frozen = int(np.asarray(out.info["frozen"]).sum())
                stuck = (f" {frozen} active spin(s) never changed in any chain (frozen: no R-hat, NaN); their "
                         "marginals are not estimates." if frozen else "")
                warnings.warn(
                    f"Gibbs: {int(bad.sum())} of {bad.size} models have a spin with split R-hat ≥ {self.rhat_threshold} "
                    f"or undefined (worst defined {worst:.3g}): the chains have not mixed.{stuck} Raise "
                    "num_warmup/num_samples, use more chains, or (strong couplings) another engine; see "
                    "info['converged'], info['r_hat'], info['frozen'], info['flip_rate'].",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return out


def _known_spins(model: IsingModel, h, J, beta, draws, num_draws: int):
    """``[*batch, n]``: spins whose constant draws are the right answer without any
    mixing: inactive spins (held at 0), and spins pinned by their own field, where
    ``|h_i| > Σ_k |J_ik|`` so strongly that ``P(s_i ≠ sign h_i) ≤ (1 - tanh(β(|h_i| -
    Σ_k |J_ik|))) / 2 ≤ 1 / (2·num_draws)`` in every state of the rest, and every draw
    has ``s_i = sign h_i``. Any other spin that never changed is frozen: its chains
    did not move, so they are no evidence of convergence."""
    batch_n = draws.shape[2:]
    act = model.active()
    inactive = jnp.zeros(batch_n, bool) if act is None else ~jnp.broadcast_to(act, batch_n)
    coupling = (jnp.sum(jnp.abs(J), axis=-1) if act is None  # inactive spins (0) exert no field
                else jnp.einsum("...ik,...k->...i", jnp.abs(J), act.astype(J.dtype)))
    margin = jnp.abs(h) - coupling
    pinned = (margin > 0) & (1 - jnp.tanh(beta * margin) <= 1.0 / num_draws)
    right_sign = draws[0, 0] * jnp.sign(h) > 0
    return inactive | (jnp.broadcast_to(pinned, batch_n) & right_sign)


@eqx.filter_jit
def _gibbs_marginals(model: IsingModel, key, config) -> Marginals:
    num_warmup, num_samples, num_chains, thin, diagnostics, rhat_threshold, classes, rao_blackwell = config
    n, dtype = model.n, model.dtype
    batch = tuple(model.batch_shape)
    # The sampler needs no derivatives: gradients come from the fluctuation–dissipation VJP.
    h, J, beta = (lax.stop_gradient(x) for x in (model.h, model.J, model.beta))
    draws, rates = run_chains(
        key, h, J, beta, model.active(), batch + (n,), num_warmup=num_warmup,
        num_samples=num_samples, num_chains=num_chains, thin=thin, classes=classes,
    )  # draws [C, D, *batch, n], rates [C, *batch]
    C, D = draws.shape[:2]
    info = {"flip_rate": jnp.moveaxis(rates, 0, -1)}
    if diagnostics:
        known = _known_spins(model, h, J, beta, draws, C * D)  # [*batch, n]
        rhat = split_gelman_rubin(draws, known)  # [*batch, n]; NaN for a frozen spin
        ess = effective_sample_size(draws, known)
        var = draws.reshape((C * D,) + draws.shape[2:]).var(0)
        info.update(
            r_hat=rhat.astype(dtype),
            ess=ess.astype(dtype),
            mcse=jnp.sqrt(var / ess).astype(dtype),
            frozen=_is_constant(draws) & ~known,
            converged=jnp.all(rhat < rhat_threshold, axis=-1),  # NaN (frozen) counts as not converged
        )
    samples = jnp.moveaxis(draws, (0, 1), (-3, -2)).reshape(batch + (C * D, n))  # chain-major
    return sample_marginals(model, samples, info, rao_blackwell=rao_blackwell)


# ---------------------------------------------------------------------------------
# ArviZ export
# ---------------------------------------------------------------------------------


def to_inference_data(result, *, num_chains: Optional[int] = None, site: str = "s", batch_dims=None):
    """An ``arviz.InferenceData`` of Gibbs samples, so ``az.summary`` gives R-hat and ESS.

    ``result`` is either a ``numpyro.infer.MCMC`` run with :class:`IsingGibbsKernel`
    (converted with ``az.from_numpyro``; collected extra fields become
    ``sample_stats``) or the ``Marginals`` of the :class:`Gibbs` engine (its
    ``samples [*batch, chains*draws, n]`` are regrouped by chain; ``num_chains``
    defaults to ``info["flip_rate"].shape[-1]``). The posterior variable ``site``
    has dims ``(chain, draw, *batch_dims, "spin")``; ``batch_dims`` defaults to
    ``batch_0, batch_1, ...``.
    """
    import arviz as az
    from numpyro.infer import MCMC

    if isinstance(result, MCMC):
        if not isinstance(result.sampler, IsingGibbsKernel):
            raise IsingInputError(
                f"to_inference_data expects an MCMC run with IsingGibbsKernel; got sampler {type(result.sampler).__name__}. "
                "For other kernels call az.from_numpyro directly."
            )
        r = len(result.sampler.ising_model.batch_shape)
        dims = list(batch_dims) if batch_dims is not None else [f"batch_{i}" for i in range(r)]
        return az.from_numpyro(result, dims={result.sampler.site: dims + ["spin"]})
    if isinstance(result, Marginals):
        if result.samples is None:
            raise IsingInputError("to_inference_data needs Marginals with samples (from a sampling engine such as Gibbs).")
        if num_chains is None:
            if "flip_rate" not in result.info:
                raise IsingInputError("to_inference_data: pass num_chains= (these Marginals do not come from Gibbs).")
            num_chains = result.info["flip_rate"].shape[-1]
        s = np.asarray(result.samples)
        *batch, S, n = s.shape
        if S % num_chains:
            raise IsingInputError(f"{S} samples do not split into num_chains = {num_chains} equal chains.")
        s = s.reshape(tuple(batch) + (num_chains, S // num_chains, n))
        s = np.moveaxis(s, (-3, -2), (0, 1))  # [C, D, *batch, n]
        dims = list(batch_dims) if batch_dims is not None else [f"batch_{i}" for i in range(len(batch))]
        return az.from_dict(posterior={site: s}, dims={site: dims + ["spin"]})
    raise IsingInputError(
        f"to_inference_data expects a numpyro MCMC (with IsingGibbsKernel) or Gibbs Marginals; got {type(result).__name__}."
    )
