"""Differentiable sample marginals via the fluctuation–dissipation identities.

For ``p(s) ∝ exp(-β E(s))`` with ``E = -h·s - ½ sᵀJs``:

    ∂⟨s_a⟩/∂h_b  = β Cov(s_a, s_b)
    ∂⟨s_a⟩/∂J_bc = ½ β Cov(s_a, s_b s_c)   (per entry of the full symmetric matrix)
    ∂⟨s_a⟩/∂β    = -Cov(s_a, E(s))

so any sampler's output can be trained through: the forward pass is the sample
mean and the backward pass estimates these covariances from the same samples.
Every sampling engine goes through :func:`sample_marginals`.

Rao–Blackwellization (``rao_blackwell=True``) replaces each sampled ``s_a`` by its
conditional mean ``t_a = tanh(β φ_a(s))``, ``φ = h + J s`` (``E[s_a | s_{-a}]`` under
the Boltzmann distribution). The mean ``⟨t⟩`` is smooth in the parameters and never
exactly ±1, which matters in attention: a key with a strongly negative field is
almost never sampled "on", and its weight ``(1+m)/2`` estimated from ±1 samples is
0 or a multiple of ``1/S``, so the normalized weights, and their gradients through
the normalization, are dominated by noise. The covariances use ``t`` for the output
spin, with the terms where the output spin is also an input corrected exactly
(``Var(s_a) = 1 - ⟨s_a⟩²``, ``Cov(s_a, s_a s_c) = ⟨s_c⟩ - ⟨s_a⟩⟨s_a s_c⟩``).
It is only as good as the samples are Boltzmann: for a sampler off its target β
(e.g. DQA) the plain mean describes the samples, this one the target.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from isingattn.diagnostics import pack_spins, unpack_spins
from isingattn.energy import energy, local_field
from isingattn.marginals import Marginals
from isingattn.model import IsingModel
from isingattn.sparse import SparseCouplings, insert_batch_axis


def _outer_to(a, b, shape):
    """``Σ_s a[..., s, j] b[..., s, k]`` summed over the samples and over the batch axes
    that a broadcast ``J`` of ``shape`` does not carry: ``a, b [..., S, n] -> shape``.

    One contraction, so a ``J`` shared by many queries gets its gradient without a
    per-query ``[Q, n, n]`` intermediate."""
    batch = a.shape[:-2]
    own = (1,) * (len(batch) - (len(shape) - 2)) + tuple(shape[:-2])  # J's batch axes, aligned right
    ax = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(batch)]
    keep = "".join(c for c, d in zip(ax, own) if d != 1)
    out = jnp.einsum(f"{ax}sj,{ax}sk->{keep}jk", a, b)
    return out.reshape(shape)


def _pair_grad(a, b, J, sym: bool = False):
    """The gradient of the couplings for the dense gradient ``G = Σ_s a_j b_k`` (plus its
    transpose when ``sym``), from per-sample factors ``a, b [..., S, n]``. Dense ``J``:
    ``G`` reduced to ``J.shape`` (:func:`_outer_to`), zero diagonal. Sparse ``J``: each
    weight sets ``J_ij`` and ``J_ji``, so its gradient is ``G_ij + G_ji``, reduced to the
    weights' shape: O(S E), no ``[n, n]``."""
    if isinstance(J, SparseCouplings):
        i, j = J.graph.edges[:, 0], J.graph.edges[:, 1]
        per = jnp.einsum("...se,...se->...e", a[..., i], b[..., j]) + jnp.einsum("...se,...se->...e", a[..., j], b[..., i])
        per = 2 * per if sym else per
        wshape = J.weights.shape
        lead = per.ndim - len(wshape)
        per = per.sum(tuple(range(lead))) if lead > 0 else per
        keep = tuple(k for k, d in enumerate(wshape[:-1]) if d == 1 and per.shape[k] != 1)
        per = per.sum(keep, keepdims=True) if keep else per
        return J.with_weights(per.reshape(wshape))
    g = _outer_to(a, b, J.shape)
    g = g + jnp.swapaxes(g, -1, -2) if sym else g
    return g * (1 - jnp.eye(a.shape[-1], dtype=g.dtype))


@jax.custom_vjp
def _mean(h, J, beta, samples):
    return samples.mean(-2)


def _mean_fwd(h, J, beta, samples):
    return _mean(h, J, beta, samples), (h, J, beta, samples)


def _covariance_vjp(h, J, beta, s, p, g):
    """``(∂/∂h, ∂/∂J, ∂/∂β)`` of ``g · m`` for the mean ``m = Σ_s p_s s`` of samples ``s [..., S, n]``
    with normalized weights ``p [..., S]`` (``1/S`` each for plain samples): the covariances
    of the module docstring, as the one rule of every sampler's gradient."""
    m = jnp.einsum("...s,...sn->...n", p, s)
    return _moments_vjp(h, J, beta, s, p * jnp.einsum("...sn,...n->...s", s - m[..., None, :], g))


def _moments_vjp(h, J, beta, s, w):
    """``(β Σ_s w_s s, ½β Σ_s w_s s sᵀ, -Σ_s w_s E(s))``: the derivatives in ``(h, J, β)`` of
    ``Σ_s w_s (-βE(s))`` for per-sample weights ``w [..., S]``, the shape of every rule here."""
    gh = beta * jnp.einsum("...s,...sn->...n", w, s)
    gJ = jax.tree_util.tree_map(lambda x: 0.5 * beta * x, _pair_grad(w[..., None] * s, s, J))
    gbeta = -jnp.sum(w * energy(h[..., None, :], insert_batch_axis(J), s))
    return gh, gJ, gbeta.astype(beta.dtype)


def _mean_bwd(res, g):
    h, J, beta, s = res  # s: [..., S, n]; g: [..., n]; J: [..., n, n], possibly shared over the batch
    p = jnp.full(s.shape[:-1], 1.0 / s.shape[-2], s.dtype)
    return _covariance_vjp(h, J, beta, s, p, g) + (jnp.zeros_like(s),)


_mean.defvjp(_mean_fwd, _mean_bwd)


@jax.custom_vjp
def _given_mean(h, J, beta, samples, mean):
    """:func:`_mean` with its value given (already counted from the same samples)."""
    return mean


def _given_mean_fwd(h, J, beta, samples, mean):
    return mean, (h, J, beta, samples)


def _given_mean_bwd(res, g):
    return _mean_bwd(res, g) + (jnp.zeros_like(g),)


_given_mean.defvjp(_given_mean_fwd, _given_mean_bwd)


def _conditional_means(h, J, beta, s):  # [..., S, n]: E[s_a | s_-a] = tanh(β φ_a); J has a zero diagonal
    return jnp.tanh(beta * local_field(h[..., None, :], insert_batch_axis(J), s))


@jax.custom_vjp
def _rb_mean(h, J, beta, samples):
    return _conditional_means(h, J, beta, samples).mean(-2)


def _rb_mean_fwd(h, J, beta, samples):
    t = _conditional_means(h, J, beta, samples)
    return t.mean(-2), (h, J, beta, samples, t)


def _rb_mean_bwd(res, g):
    h, J, beta, s, t = res  # s, t: [..., S, n]; g: [..., n]
    S = s.shape[-2]
    w = jnp.einsum("...sn,...n->...s", t - t.mean(-2, keepdims=True), g) / S  # output spin a via t_a
    one_minus_t2 = 1 - t * t  # [..., S, n]: the exact-variance corrections where a is also an input
    gh = beta * (jnp.einsum("...s,...sn->...n", w, s) + g * one_minus_t2.mean(-2))
    # Σ g_a E[(1 - t_a²) s_c], added for (a, c) and (c, a): _pair_grad sums both orientations
    gJ = jax.tree_util.tree_map(lambda x, c: 0.5 * beta * (x + c / S), _pair_grad(w[..., None] * s, s, J),
                                _pair_grad(one_minus_t2 * g[..., None, :], s, J, sym=True))
    _, _, gbeta, _ = _mean_bwd((h, J, beta, s), g)  # β's gradient from the plain samples
    return gh, gJ, gbeta, jnp.zeros_like(s)


_rb_mean.defvjp(_rb_mean_fwd, _rb_mean_bwd)


def spin_mean(draws, active=None, words=None):
    """The mean ``⟨s_j⟩ [*batch, n]`` of spin draws ``[C, D, *batch, n]`` (as for
    :func:`spin_second_moment`) from the packed words: ``(2·#(+1) - C·D) / (C·D)``, the
    same number as the float mean of the draws, without reading them again. ``words``
    ``[ceil(D/32), C, F]``: the draws' :func:`~isingattn.diagnostics.pack_spins`, if the
    caller has them; then ``draws`` need only have their shape and dtype (e.g. a
    ``jax.ShapeDtypeStruct``)."""
    C, D = draws.shape[:2]
    W = pack_spins(jnp.moveaxis(draws.reshape(C, D, -1), 1, 0)) if words is None else words  # [Nw, C, F]
    ones = lax.population_count(W).astype(jnp.int32).sum((0, 1), dtype=jnp.int32)
    dt = draws.dtype if jnp.issubdtype(draws.dtype, jnp.floating) else jnp.result_type(float)
    mean = ((2 * ones - C * D).astype(dt) / (C * D)).reshape(draws.shape[2:])
    return mean if active is None else jnp.where(active, mean, 0.0)


def spin_second_moment(draws, active=None, words=None):
    """The second moment ``⟨s_j s_k⟩ [*batch, n, n]`` of spin draws ``[C, D, *batch, n]``
    (every spin ±1 in every draw, or 0 throughout where ``active [*batch, n]`` is False),
    from the draws packed 32 to a word (:func:`isingattn.diagnostics.pack_spins`): ``C·D
    - 2·#(draws where s_j ≠ s_k)``, popcounts of XORs. The same numbers as the sample
    second moment of :func:`sample_marginals` (whose float sums of ±1 are exact integers
    up to 2^24 draws; these counts are exact to 2^31), at about a quarter of its GEMM's
    time on CPU. Rows and columns of inactive spins are 0. ``words``, ``draws``: as for :func:`spin_mean`."""
    C, D = draws.shape[:2]
    shape = draws.shape[2:]
    n = shape[-1]
    W = pack_spins(jnp.moveaxis(draws.reshape(C, D, -1), 1, 0)) if words is None else words
    W = jnp.moveaxis(W, 0, 1)  # [C, Nw, F]
    g = math.gcd(C, 4)  # chains per step (4: fastest on CPU)
    W = W.reshape((C // g, g * W.shape[1], -1, n))  # [C / g, g·Nw, batch, n]

    def chains(c, differ):  # g chains' words, every pair of spins
        w = W[c]
        return differ + lax.population_count(w[..., :, None] ^ w[..., None, :]).astype(jnp.int32).sum(0, dtype=jnp.int32)

    differ = lax.fori_loop(0, C // g, chains, jnp.zeros(W.shape[2:] + (n,), jnp.int32))  # [batch, n, n]
    dt = draws.dtype if jnp.issubdtype(draws.dtype, jnp.floating) else jnp.result_type(float)
    corr = ((C * D - 2 * differ).astype(dt) / (C * D)).reshape(shape + (n,))
    if active is not None:
        act = jnp.broadcast_to(active, shape)
        corr = jnp.where(act[..., :, None] & act[..., None, :], corr, 0.0)
    return corr


def _inputs(model: IsingModel, samples):
    """``(h, J, samples)`` as every sample-marginal rule takes them: the masked parameters, ``h``
    broadcast to the batch (``J`` stays as given: its gradient is summed in the VJP), the samples
    zeroed on inactive spins, in the model's dtype, without a gradient of their own."""
    act = model.active()
    h, J = model.masked_parameters()
    if act is not None:
        samples = jnp.where(act[..., None, :], samples, 0.0)
    samples = jax.lax.stop_gradient(samples.astype(model.dtype))
    return jnp.broadcast_to(h, model.batch_shape + h.shape[-1:]), J, samples


def sample_marginals(model: IsingModel, samples: jax.Array, info=None, rao_blackwell: bool = False,
                     corr=None, mean=None) -> Marginals:
    """``Marginals`` from spin samples ``[..., S, n]`` (batch of the model, then samples).

    The mean is differentiable in ``h``, ``J`` and ``beta`` through the
    fluctuation–dissipation identities; inactive spins are zeroed. ``corr`` is the
    sample second moment, computed here unless the caller gives it (``[..., n, n]``, e.g.
    :func:`spin_second_moment` of the same draws); likewise the plain mean ``[..., n]``
    (:func:`spin_mean`; its gradient still comes from the samples; unused with
    ``rao_blackwell``). ``rao_blackwell``: the mean of ``tanh(β(h + J s))`` instead of
    ``s`` (see the module docstring).
    """
    act = model.active()
    h, J, samples = _inputs(model, samples)
    if rao_blackwell:
        mean = _rb_mean(h, J, model.beta, samples)
    elif mean is not None:
        mean = _given_mean(h, J, model.beta, samples, jax.lax.stop_gradient(jnp.asarray(mean, model.dtype)))
    else:
        mean = _mean(h, J, model.beta, samples)
    if rao_blackwell and act is not None:
        mean = jnp.where(act, mean, 0.0)
    if corr is None and not isinstance(J, SparseCouplings):  # a sparse graph stores no [n, n] moment
        corr = jnp.einsum("...sj,...sk->...jk", samples, samples) / samples.shape[-2]
    return Marginals(mean=mean, corr=corr, samples=samples, info={} if info is None else info)


@jax.custom_vjp
def _weighted_mean(h, J, beta, samples, p):
    return jnp.einsum("...s,...sn->...n", p, samples)


def _weighted_mean_fwd(h, J, beta, samples, p):
    return _weighted_mean(h, J, beta, samples, p), (h, J, beta, samples, p)


def _weighted_mean_bwd(res, g):
    h, J, beta, s, p = res
    return _covariance_vjp(h, J, beta, s, p, g) + (jnp.zeros_like(s), jnp.zeros_like(p))


_weighted_mean.defvjp(_weighted_mean_fwd, _weighted_mean_bwd)


@jax.custom_vjp
def _weighted_log_z(h, J, beta, samples, p, log_z):
    """An estimate ``log_z [...]`` whose derivatives are the weighted sample moments:
    ``∂/∂h = β⟨s⟩``, ``∂/∂J_jk = ½β⟨s_j s_k⟩`` (full symmetric ``J``), ``∂/∂β = -⟨E⟩``."""
    return log_z


def _weighted_log_z_fwd(h, J, beta, samples, p, log_z):
    return log_z, (h, J, beta, samples, p)


def _weighted_log_z_bwd(res, g):
    h, J, beta, s, p = res
    return _moments_vjp(h, J, beta, s, p * g[..., None]) + (jnp.zeros_like(s), jnp.zeros_like(p), jnp.zeros_like(g))


_weighted_log_z.defvjp(_weighted_log_z_fwd, _weighted_log_z_bwd)


def weighted_sample_marginals(model: IsingModel, samples: jax.Array, log_weights: jax.Array, info=None,
                              log_z=None) -> Marginals:
    """``Marginals`` of importance-weighted samples ``[..., S, n]`` with ``log_weights [..., S]``
    (unnormalized): the weighted mean and second moment, differentiable as
    :func:`sample_marginals` is, with the weighted covariances. ``log_z [...]``, when given, is
    returned with the derivatives of a log partition function (``∂ log Z/∂h = β⟨s⟩``, ...)."""
    h, J, samples = _inputs(model, samples)
    p = jax.nn.softmax(jax.lax.stop_gradient(log_weights.astype(model.dtype)), axis=-1)
    mean = _weighted_mean(h, J, model.beta, samples, p)
    corr = None
    if not isinstance(J, SparseCouplings):
        corr = jnp.einsum("...s,...sj,...sk->...jk", p, samples, samples)
    if log_z is not None:
        log_z = _weighted_log_z(h, J, model.beta, samples, p, jax.lax.stop_gradient(log_z.astype(model.dtype)))
    return Marginals(mean=mean, corr=corr, log_z=log_z, samples=samples, info={} if info is None else info)


def unpack_samples(words, num_draws: int, shape, dtype):
    """Chain-major samples ``[*batch, C·D, n]`` from packed draws ``words [ceil(D/32), C, F]``
    (:func:`~isingattn.diagnostics.pack_spins` of ``D = num_draws`` draws ``[D, C, *batch,
    n]``, ``shape = (*batch, n)``, ``F`` its size). Masked spins come back as -1."""
    C, D = words.shape[1], num_draws
    x = unpack_spins(words, D, dtype).reshape((D, C) + tuple(shape))
    return jnp.moveaxis(x, (0, 1), (-2, -3)).reshape(tuple(shape[:-1]) + (C * D, shape[-1]))


@partial(jax.custom_vjp, nondiff_argnums=(6,))
def _packed_mean(h, J, beta, words, active, mean, num_draws):
    """:func:`_given_mean` whose samples stay packed: the residual is 1/32 of the samples
    (the reason to keep no float samples), unpacked in the backward pass only."""
    return mean


def _packed_mean_fwd(h, J, beta, words, active, mean, num_draws):
    return mean, (h, J, beta, words, active)


def _packed_mean_bwd(num_draws, res, g):
    h, J, beta, words, active = res
    s = unpack_samples(words, num_draws, g.shape, g.dtype)
    if active is not None:
        s = jnp.where(active[..., None, :], s, 0.0)
    return _mean_bwd((h, J, beta, s), g)[:3] + (None, None, jnp.zeros_like(g))


_packed_mean.defvjp(_packed_mean_fwd, _packed_mean_bwd)


def packed_sample_marginals(model: IsingModel, words, num_draws: int, info=None, *, keep_samples: bool = True,
                            rao_blackwell: bool = False) -> Marginals:
    """:func:`sample_marginals` of draws packed 32 to a word: ``words [ceil(D/32), C, F]``
    (see :func:`unpack_samples`). The mean (and, for dense ``J``, the second moment) are
    counted on the words; float samples are made only for ``keep_samples`` (then in
    ``Marginals.samples``, ``[*batch, C·D, n]``) or ``rao_blackwell``. Without them the
    mean is still differentiable: its VJP unpacks the words (a million-spin lattice's
    float samples would not fit in memory; its words do)."""
    shape = tuple(model.batch_shape) + (model.n,)
    act = model.active()
    draws = jax.ShapeDtypeStruct((words.shape[1], num_draws) + shape, model.dtype)  # shapes only: counts use words
    mean = spin_mean(draws, act, words=words)
    corr = None if model.is_sparse else spin_second_moment(draws, act, words=words)
    if keep_samples or rao_blackwell:
        samples = unpack_samples(words, num_draws, shape, model.dtype)
        m = sample_marginals(model, samples, info, rao_blackwell=rao_blackwell, corr=corr, mean=mean)
        return m if keep_samples else Marginals(mean=m.mean, corr=m.corr, info=m.info)
    h, J = model.masked_parameters()
    h = jnp.broadcast_to(h, shape)
    act = None if act is None else jnp.broadcast_to(act, shape)
    mean = _packed_mean(h, J, model.beta, lax.stop_gradient(words), act, lax.stop_gradient(mean), num_draws)
    return Marginals(mean=mean, corr=corr, info={} if info is None else info)
