"""The Ising model as a NumPyro distribution over ``{-1, +1}^n``, and a
pseudo-likelihood factor for models too large for an exact ``log Z``.

``IsingDistribution(h, J, beta, mask, engine)`` has ``log_prob(s) = -β E(s) - log Z`` with the
energy of :mod:`isingattn.energy` (DESIGN.md §1) and ``log Z`` from an engine, so it goes
into ``numpyro.sample`` like any distribution: priors on ``h`` and ``J``, ``numpyro.plate``
over observations, NUTS (gradients flow through ``log Z``: Exact's fluctuation JVP, Banded's
VJP), ``numpyro.infer.log_likelihood`` and ``az.from_numpyro`` (a ``log_likelihood`` group
for ``az.loo``, ``az.waic``, ``az.compare``)::

    def model(s):                      # s [S, n] observed spins
        h = numpyro.sample("h", dist.Normal(0, 1).expand([n]).to_event(1))
        w = numpyro.sample("w", dist.Normal(0, 0.5).expand([E]).to_event(1))
        J = SparseCouplings(graph, w)  # or a dense [n, n] built from w
        with numpyro.plate("data", s.shape[0]):
            numpyro.sample("s", IsingDistribution(h, J), obs=s)

This module imports numpyro; ``import isingattn`` does not (``isingattn.IsingDistribution``
loads it on first use).
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from typing import Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.distributions import Distribution, constraints

from isingattn import prng
from isingattn.energy import cross_energy, energy, spin_table, spins_from_index
from isingattn.engine import Engine
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.inference.exact.engine import EXACT_MAX_N  # exact draws by enumeration up to here: memory O(batch · 2^n)
from isingattn.model import IsingModel, is_traced
from isingattn.sparse import SparseCouplings

__all__ = ["IsingDistribution", "ising_spins", "ising_pseudo_log_likelihood"]

# log Z by Exact up to here whatever the band: below 2^12 states enumeration costs less than Banded's
# fixed costs (measured, NUTS on a 3x3 lattice: 5.1 s with Exact, 6.9 s with Banded, plus a longer compile)
SMALL_N = 12


class _IsingSpins(constraints.ParameterFreeConstraint):
    """The support ``{-1, +1}^n``: a discrete constraint on the last axis (``event_dim = 1``)."""

    is_discrete = True
    event_dim = 1

    def __call__(self, x):
        xp = jnp if isinstance(x, jax.Array) else np
        return xp.all(xp.equal(x, 1) | xp.equal(x, -1), axis=-1)

    def feasible_like(self, prototype):
        return jnp.ones_like(prototype)


ising_spins = _IsingSpins()


def _known_bandwidth(J) -> Optional[int]:
    """The band of ``J``'s pattern in the spin order where the host can read it (a sparse
    graph, a concrete dense ``J``); None for a traced dense ``J``."""
    from isingattn.inference.banded import band_violation

    if isinstance(J, SparseCouplings) or not is_traced(J):
        return max(int(band_violation(J)), 1)
    return None


def _no_exact_message(n: int, w: Optional[int]) -> str:
    band = ("J is traced (inside jit, grad or NUTS), so its band is unknown" if w is None
            else f"its couplings reach distance {w} in the given spin order")
    return (f"IsingDistribution: no exact log Z for this model: n = {n} spins is too many to enumerate, and {band}. "
            "Options: pass engine=Banded(bandwidth=w) (from isingattn.inference.banded) if J is zero beyond distance w, "
            "or give J as SparseCouplings on a graph (its bandwidth is static); number the spins so that coupled ones "
            "are close; pass an approximate engine explicitly (engine='meanfield-bp': log_prob is then approximate); "
            "or use ising_pseudo_log_likelihood(h, J, s, beta) in numpyro.factor (a pseudo-posterior).")


class IsingDistribution(Distribution):
    """``p(s) = exp(-β E(s)) / Z`` over ``s ∈ {-1, +1}^n``, with
    ``E(s) = -Σ_j h_j s_j - Σ_{j<k} J_jk s_j s_k`` (DESIGN.md §1), as a
    ``numpyro.distributions.Distribution``.

    Args:
        h: fields ``[..., n]``.
        J: couplings ``[..., n, n]`` (symmetric, zero diagonal) or
            :class:`~isingattn.sparse.SparseCouplings` (weights ``[..., E]`` on a graph).
        beta: inverse temperature, a positive scalar (a pytree leaf: it may have a prior).
        mask: optional boolean ``[..., n]``; an inactive spin is not part of the
            distribution: ``log_prob`` ignores its value, ``log Z`` is over the active spins,
            and draws report it as ``+1``.
        engine: where ``log Z`` comes from:

            * None: an exact engine: Exact for ``n ≤ 12``, else the cheaper of Exact (``2^n``, up to
              n = 24) and Banded (``n 2^w``) (:func:`isingattn.learn.exact_ml.exact_engine`) when the couplings are
              banded in the given spin order with a readable pattern (a concrete dense ``J``
              or sparse couplings; a traced dense ``J`` under NUTS has no readable zeros, so
              only Exact applies there, or pass ``Banded(bandwidth=w)``). Where neither
              applies, construction raises :class:`~isingattn.errors.IsingInputError`.
            * a name (``inference.get(name)``) or an engine instance: used as given. An engine
              that is not exact (``engine.exact`` False, e.g. ``"meanfield-bp"``) makes
              ``log_prob`` an **approximation** (``log_z_kind`` says which); it must not need a
              key (``log_prob`` has none).
            * a sampling engine (one that needs a key, e.g. ``"gibbs"``): taken as ``sampler``.
        sampler: keyword only; a sampling engine for :meth:`sample` where no exact sampler
            applies (the draws are then approximate, and a ``UserWarning`` says so).
        validate_args: numpyro's flag. Values given to :meth:`log_prob` are always checked
            when concrete (shape ``[..., n]``, values ±1; ``IsingInputError`` otherwise). Traced
            values (under ``jax.jit``, ``vmap``, ``grad``) cannot be read, so, as in numpyro,
            ``validate_args=True`` turns the log-probability of a value outside ``{-1, +1}^n``
            into ``-inf``; without it a traced value is not checked, and a non-spin value gives
            the energy formula's number, which is not a log-probability.

    Shapes: ``event_shape = (n,)``; ``batch_shape`` is the broadcast of the batch axes of
    ``h``, ``J`` and ``mask``. ``log_prob(s)``: ``s [..., n]`` -> ``[...]``.

    Sampling (:meth:`sample`) is exact where it can be: enumeration (meet in the middle, a
    categorical over the ``2^n`` states) for ``n ≤ EXACT_MAX_N`` (24); forward-filtering backward-sampling
    (:func:`isingattn.inference.banded.ffbs.sample_banded`) for couplings of bandwidth
    ``w ≤ 16`` in the spin order; elsewhere the given ``sampler`` with a warning.
    """

    arg_constraints = {"h": constraints.real_vector, "J": constraints.dependent(is_discrete=False, event_dim=2),
                       "beta": constraints.positive}
    support = ising_spins
    has_enumerate_support = True
    pytree_data_fields = ("model",)
    pytree_aux_fields = ("engine", "sampler", "bandwidth")

    def __init__(self, h, J, beta=1.0, mask=None, engine: Union[None, str, Engine] = None, *,
                 sampler: Union[None, str, Engine] = None, validate_args: Optional[bool] = None):
        model = IsingModel(h, J, beta, mask)
        n = model.n
        w = _known_bandwidth(model.J)
        engine, sampler = _as_engine(engine, "engine", model.J, w), _as_engine(sampler, "sampler", model.J, w)
        if sampler is not None and not sampler.needs_key:
            raise IsingInputError(f"IsingDistribution: sampler must be a sampling engine (e.g. 'gibbs'); got "
                                  f"{type(sampler).__name__}, which does not sample. Give it as engine= for log Z.")
        if engine is not None and engine.needs_key:
            if sampler is not None:
                raise IsingInputError(f"IsingDistribution: engine={type(engine).__name__} samples (it needs a key), and "
                                      "a sampler is given too. Give an engine with a log Z (Exact, Banded, MeanField) "
                                      "as engine= and the sampler as sampler=.")
            engine, sampler = None, engine
        if engine is None:
            from isingattn.learn.exact_ml import exact_engine

            # up to SMALL_N spins enumeration is cheaper than Banded's fixed costs whatever the band
            engine = exact_engine(n, J=model.J if w is not None else None, name="exact" if n <= SMALL_N else None)
            if engine is None and sampler is None:
                raise IsingInputError(_no_exact_message(n, w))
        if w is None and engine is not None and getattr(engine, "bandwidth", None) is not None:
            w = int(engine.bandwidth)  # an explicit Banded(bandwidth=w): the band is enforced at run time
        self.model, self.engine, self.sampler, self.bandwidth = model, engine, sampler, w
        super().__init__(batch_shape=tuple(model.batch_shape), event_shape=(n,), validate_args=validate_args)

    # ---- parameters -------------------------------------------------------------------------
    @property
    def h(self):
        return self.model.h

    @property
    def J(self):
        return self.model.J

    @property
    def beta(self):
        return self.model.beta

    @property
    def mask(self):
        return self.model.mask

    @property
    def log_z_kind(self) -> Optional[str]:
        """``"exact"`` when ``log Z`` comes from an exact engine, ``"approximate"`` from another
        one, None without a ``log Z`` engine (then :meth:`log_prob` raises)."""
        if self.engine is None:
            return None
        return "exact" if self.engine.exact else "approximate"

    # ---- log Z and log_prob -----------------------------------------------------------------
    def _marginals(self, what: str):
        if self.engine is None:
            raise IsingInputError(_no_exact_message(self.model.n, self.bandwidth).replace(
                "IsingDistribution:", f"IsingDistribution.{what}:", 1))
        out = self.engine.marginals(self.model)
        if out.log_z is None:
            raise IsingInputError(f"IsingDistribution.{what}: engine {type(self.engine).__name__} gives no log Z. Use "
                                  "Exact, Banded or MeanField.")
        return out

    @property
    def log_z(self) -> jax.Array:
        """``log Z = log Σ_s exp(-β E(s))`` over the active spins, ``[*batch_shape]``."""
        return self._marginals("log_z").log_z

    @property
    def mean(self) -> jax.Array:
        """``⟨s⟩`` ``[*batch_shape, n]`` from the ``log Z`` engine (0 for inactive spins)."""
        return self._marginals("mean").mean

    @property
    def variance(self) -> jax.Array:
        """``1 - ⟨s⟩²`` ``[*batch_shape, n]`` (0 for inactive spins)."""
        m = self.mean
        act = self.model.active()
        var = 1 - m**2
        return var if act is None else jnp.where(act, var, 0.0)

    def log_prob(self, value) -> jax.Array:
        """``-β E(s) - log Z`` for spins ``value [..., n]`` (broadcast against the batch) -> ``[...]``.

        Raises IsingInputError for a last axis that is not ``n``, a batch that does not
        broadcast, or (concrete) values other than ±1; IsingTypeError for non-numeric values."""
        m = self.model
        s = _checked_spins(value, m.n, self.batch_shape, m.dtype, "IsingDistribution.log_prob")
        log_z = self._marginals("log_prob").log_z
        act = m.active()
        on_support = None
        if self._validate_args and is_traced(s):  # numpyro's validate_sample: off the support, -inf
            spin = (s == 1) | (s == -1)
            on_support = jnp.all(spin if act is None else spin | ~act, axis=-1)
        if act is not None:  # inactive spins do not contribute, whatever their value
            s = jnp.where(act, s, 0.0)
        lp = -m.beta * energy(m.h, m.J, s) - log_z
        return lp if on_support is None else jnp.where(on_support, lp, -jnp.inf)

    # ---- sampling -----------------------------------------------------------------------------
    def sample(self, key, sample_shape=()) -> jax.Array:
        """Draws ``[*sample_shape, *batch_shape, n]`` (the model's dtype, ±1; inactive spins +1).

        Exact by enumeration for ``n ≤ EXACT_MAX_N`` (24), by FFBS for a known band ``w ≤ 16``; else from
        ``sampler`` (approximate, with a ``UserWarning``: its chains' draws, thinned evenly to
        the number asked), else ``IsingInputError``."""
        from isingattn.inference.banded.ffbs import MAX_SAMPLE_BANDWIDTH, sample_banded

        sample_shape = _sample_shape(sample_shape)
        S = math.prod(sample_shape)
        m, n = self.model, self.model.n
        shape = sample_shape + self.batch_shape + (n,)
        if S == 0:
            return jnp.zeros(shape, m.dtype)
        key = prng.check_key(key, owner="IsingDistribution.sample")
        if n <= EXACT_MAX_N:
            draws = _enumerated_draws(m, key, S)
        elif self.bandwidth is not None and self.bandwidth <= MAX_SAMPLE_BANDWIDTH:
            draws = sample_banded(m, key=key, num_samples=S, bandwidth=self.bandwidth)
        elif self.sampler is not None:
            draws = self._sampler_draws(key, S)
        else:
            band = "unknown (a traced dense J)" if self.bandwidth is None else str(self.bandwidth)
            raise IsingInputError(
                f"IsingDistribution.sample: no exact sampler applies (n = {n} > {EXACT_MAX_N} spins to enumerate, and "
                f"the couplings' bandwidth in the spin order is {band}, above {MAX_SAMPLE_BANDWIDTH} for forward-filtering "
                "backward-sampling). Pass sampler='gibbs' (or another sampling engine) for approximate draws.")
        return draws.reshape(shape)

    def _sampler_draws(self, key, S: int) -> jax.Array:
        m, name = self.model, type(self.sampler).__name__
        warnings.warn(
            f"IsingDistribution.sample: no exact sampler applies to this model (n = {m.n}, couplings not banded within "
            f"the FFBS limit), so the draws come from {name}: they are approximate (Markov-chain draws, correlated and "
            "only as good as the chains' mixing; see the engine's info['r_hat']).", UserWarning, stacklevel=3)
        out = self.sampler.marginals(m, key=key)
        x = out.samples
        if x is None or x.ndim < 2 or x.shape[-1] != m.n:
            raise IsingInputError(f"IsingDistribution.sample: {name} returned no samples [..., draws, n]; use a sampler "
                                  "that keeps them (e.g. Gibbs(keep_samples=True)).")
        D = x.shape[-2]
        if D < S:
            raise IsingInputError(f"IsingDistribution.sample: {name} gives {D} draws per model and {S} were asked. Raise "
                                  "its num_samples or num_chains, or ask for fewer draws.")
        idx = np.round(np.linspace(0, D - 1, S)).astype(int)
        x = jnp.moveaxis(x[..., idx, :], -2, 0)
        x = jnp.broadcast_to(x, (S,) + tuple(self.batch_shape) + (m.n,)).astype(m.dtype)
        act = m.active()
        return x if act is None else jnp.where(act, x, 1.0)

    def enumerate_support(self, expand: bool = True) -> jax.Array:
        """Every configuration, ``[2^n, *batch_shape, n]`` (``[2^n, 1, …, 1, n]`` unexpanded), in
        the order of :func:`isingattn.energy.spin_table`. For ``n ≤ EXACT_MAX_N`` (24) and models without a
        mask (a masked spin is not part of the event, so its values are not a support)."""
        n = self.model.n
        if n > EXACT_MAX_N:
            raise IsingInputError(f"IsingDistribution.enumerate_support: 2^{n} configurations are too many "
                                  f"(at most n = {EXACT_MAX_N}).")
        if self.model.mask is not None:
            raise IsingInputError("IsingDistribution.enumerate_support: not defined with a mask (inactive spins are not "
                                  "part of the event); build the distribution on the active spins only.")
        table = spin_table(n, self.model.dtype).reshape((2**n,) + (1,) * len(self.batch_shape) + (n,))
        return jnp.broadcast_to(table, (2**n,) + tuple(self.batch_shape) + (n,)) if expand else table


def _sample_shape(shape) -> tuple:
    """numpyro's ``sample_shape``: a tuple (or list) of non-negative integers, checked."""
    ok = isinstance(shape, (tuple, list)) and all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                                  for d in shape)
    if ok and any(d < 0 for d in shape):
        raise IsingInputError(f"IsingDistribution.sample: sample_shape must hold non-negative sizes; got {shape!r}.")
    if not ok:
        raise IsingTypeError(f"IsingDistribution.sample: sample_shape must be a tuple of non-negative integers, e.g. "
                             f"(3,) for three draws (numpyro's convention); got {shape!r}.")
    return tuple(int(d) for d in shape)


def _as_engine(engine, what: str, J, w: Optional[int]) -> Optional[Engine]:
    if engine is None or isinstance(engine, Engine):
        return engine
    if isinstance(engine, str):
        from isingattn import inference

        if engine == "banded" and w is not None:
            return inference.get("banded", bandwidth=w)
        return inference.get(engine)
    raise IsingTypeError(f"IsingDistribution: {what} must be None, an engine name (e.g. 'exact', 'banded', "
                         f"'meanfield-bp') or an isingattn Engine; got {type(engine).__name__}.")


def _checked_spins(value, n: int, batch: tuple, dtype, where: str) -> jax.Array:
    """``value`` as spins ``[..., n]`` of ``dtype``: the shape and (when concrete) the values
    checked, with messages that name ``where``."""
    try:  # numpy first: under a trace (NUTS) data are concrete, and jnp would stage the checks
        s = value if is_traced(value) else np.asarray(value)
    except (TypeError, ValueError) as e:
        raise IsingTypeError(f"{where}: value must be an array of ±1 spins [..., {n}]; got {type(value).__name__} "
                             f"({e}).") from None
    if s.dtype == bool or not (jnp.issubdtype(s.dtype, jnp.integer) or jnp.issubdtype(s.dtype, jnp.floating)):
        raise IsingTypeError(f"{where}: value must hold real numbers -1 and +1; got dtype {s.dtype}. "
                             "For booleans or 0/1 data use s = 2 * x - 1.")
    if s.ndim < 1 or s.shape[-1] != n:
        raise IsingInputError(f"{where}: value must have shape [..., n] with n = {n} (the event shape); got "
                              f"{s.shape}. One row of {n} spins per observation.")
    try:
        jnp.broadcast_shapes(s.shape[:-1], tuple(batch))
    except ValueError:
        raise IsingInputError(f"{where}: the leading axes {s.shape[:-1]} of value do not broadcast against the batch "
                              f"shape {tuple(batch)}.") from None
    if not is_traced(s):
        bad = ~((s == 1) | (s == -1))
        if bad.any():
            raise IsingInputError(f"{where}: value must be spins -1 or +1; got {np.unique(s[bad])[:6]} among its "
                                  "values. For 0/1 data use s = 2 * x - 1.")
    return jnp.asarray(s, dtype)


# ---- exact draws by enumeration (meet in the middle) ------------------------------------------


def _enumerated_draws(model: IsingModel, key, S: int) -> jax.Array:
    """``S`` exact draws ``[S, *batch, n]`` of a model with ``n ≤ EXACT_MAX_N`` (inactive spins +1)."""
    model = model.densified(owner="IsingDistribution.sample")
    h, J = model.masked_parameters()
    return _enumerate(h, J, model.beta, model.active(), key, S=S, batch=tuple(model.batch_shape))


def _search(cdf, rows, cols, target, bits: int):
    """Smallest ``k`` with ``cdf[rows, cols, k] > target`` (``cdf`` nondecreasing along its last
    axis of length ``2^bits``): a binary search of ``bits`` gathers, ``O(S)`` memory."""
    k = jnp.zeros(target.shape, jnp.int32)
    for b in reversed(range(bits)):
        cand = k + (1 << b)
        k = jnp.where(cdf[rows, cols, cand - 1] <= target, cand, k)
    return k


@partial(jax.jit, static_argnames=("S", "batch"))
def _enumerate(h, J, beta, act, key, *, S: int, batch: tuple):
    """Split the spins into halves ``A`` (``n//2``) and ``B``; with ``u(a) = exp(-β E_A(a))``,
    ``v(b) = exp(-β E_B(b))`` and ``K(a, b) = exp(-β E_AB(a, b))`` (as in Exact, DESIGN.md §3),
    ``p(a) ∝ u(a) Σ_b K(a, b) v(b)`` and ``p(b | a) ∝ K(a, b) v(b)``: draw ``a``, then ``b``
    given ``a``, each by inverse CDF (a binary search). Memory ``O(batch · 2^n)`` for the
    conditional tables, ``O(S · batch)`` for the draws."""
    h, J, beta = (lax.stop_gradient(x) for x in (h, J, beta))
    n, dt = h.shape[-1], h.dtype
    nA = n // 2
    nB = n - nA
    SA, SB = spin_table(nA, dt), spin_table(nB, dt)
    Bsz = math.prod(batch)
    log_u = -beta * energy(h[..., None, :nA], J[..., None, :nA, :nA], SA)  # [..., 2^nA]
    log_v = -beta * energy(h[..., None, nA:], J[..., None, nA:, nA:], SB)  # [..., 2^nB]
    log_K = -beta * cross_energy(J[..., :nA, nA:], SA, SB)  # [..J, 2^nA, 2^nB]
    log_u = jnp.broadcast_to(log_u, batch + (2**nA,)).reshape(Bsz, 2**nA)
    log_v = jnp.broadcast_to(log_v, batch + (2**nB,)).reshape(Bsz, 1, 2**nB)
    joint = jnp.broadcast_to(log_K, batch + (2**nA, 2**nB)).reshape(Bsz, 2**nA, 2**nB) + log_v
    log_pa = log_u + jax.nn.logsumexp(joint, axis=-1)  # [B, 2^nA]
    cdf_a = jnp.cumsum(jax.nn.softmax(log_pa, axis=-1), axis=-1)[:, None, :]  # [B, 1, 2^nA]
    cdf_b = jnp.cumsum(jax.nn.softmax(joint, axis=-1), axis=-1)  # [B, 2^nA, 2^nB]
    ka, kb = jax.random.split(key)
    rows = jnp.arange(Bsz)[None, :]
    ua = jax.random.uniform(ka, (S, Bsz), dt) * cdf_a[rows, 0, -1]
    a = _search(cdf_a, rows, jnp.zeros_like(rows), ua, nA)  # [S, B]
    ub = jax.random.uniform(kb, (S, Bsz), dt) * cdf_b[rows, a, -1]
    b = _search(cdf_b, rows, a, ub, nB)
    spins = jnp.concatenate([spins_from_index(a, nA, dt), spins_from_index(b, nB, dt)], axis=-1)
    spins = spins.reshape((S,) + batch + (n,))
    return spins if act is None else jnp.where(act, spins, 1.0)


# ---- the pseudo-likelihood factor -----------------------------------------------------------------


def ising_pseudo_log_likelihood(h, J, s, beta=1.0, mask=None) -> jax.Array:
    """``Σ_i log p(s_i | s_-i)`` with ``p(s_i | s_-i) = σ(2β s_i (h_i + Σ_j J_ij s_j))``
    (plmDCA's conditionals), per observation: for ``numpyro.factor`` where no exact ``log Z`` exists::

        numpyro.factor("plm", ising_pseudo_log_likelihood(h, J, s, beta).sum())

    The result is a **pseudo-posterior**, ``prior × Π_s Π_i p(s_i | s_-i)``, not a posterior:
    its mode is the (penalized) maximum-pseudo-likelihood estimate, consistent as the data
    grow, but its spread is not calibrated (intervals are typically too narrow where spins
    are strongly coupled, since the conditionals reuse each observation ``n`` times), and
    its values are not log-likelihoods (no ``az.loo``/``az.compare`` against exact models).

    Args:
        h: ``[..., n]``; J: ``[..., n, n]`` or :class:`~isingattn.sparse.SparseCouplings`;
            beta: positive scalar; mask: optional boolean ``[..., n]`` (inactive spins and their
            couplings drop out).
        s: spins ``[..., n]`` (±1; broadcast against the batch).

    Returns ``[...]``: the sum over active spins, one value per observation. Cost ``O(n²)``
    per observation for dense ``J``, ``O(E)`` for sparse couplings. The conditionals are
    :func:`isingattn.learn.score.conditional_log_probs`, the objective of ``fit(method="plm")``.
    """
    from isingattn.learn.score import conditional_log_probs

    model = IsingModel(h, J, beta, mask)
    x = _checked_spins(s, model.n, tuple(model.batch_shape), model.dtype, "ising_pseudo_log_likelihood")
    hm, Jm = model.masked_parameters()
    c = conditional_log_probs(hm, Jm, model.beta, x)
    act = model.active()
    return (c if act is None else jnp.where(act, c, 0.0)).sum(-1)
