"""Loopy belief propagation (the Bethe approximation) as a fixed-point map on
cavity-field messages, for :class:`~isingattn.inference.meanfield.engine.MeanField`
(``method="bp"``), which iterates it with :mod:`isingattn.inference.meanfield.fixed_point`.

Messages ``u_{k→i} = (1/β) atanh(tanh(βJ_ki) tanh(β c_{k\\i}))`` with cavity fields
``c_{k\\i} = h_k + Σ_{l≠i} u_{l→k}``; marginals ``m_i = tanh(β(h_i + Σ_k u_{k→i}))``.
Exact on trees. Messages are kept for every pair (see the MeanField docstring).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from isingattn.sparse import SparseCouplings


def bp_map(h, J, beta):
    """Loopy BP map on cavity-field messages ``u [..., n(k), n(i)]`` (``u_{k→i}``).

    h: ``[..., n]``, J: ``[..., n, n]`` (symmetric, zero diagonal), beta: scalar. Returns
    ``(F, readout)``: the message update ``u -> F(u)`` and ``u -> m [..., n]``."""

    def cavity(u):  # c[k, i] = h_k + Σ_{l≠i} u_{l→k} = H_k - u_{i→k}
        H = h + jnp.sum(u, axis=-2)  # total field on each spin, [..., n]
        return H[..., :, None] - jnp.swapaxes(u, -1, -2)

    def F(u):
        return atanh_tanh_prod(beta * J, beta * cavity(u)) / beta

    def readout(u):
        return jnp.tanh(beta * (h + jnp.sum(u, axis=-2)))

    return F, readout


def bp_map_sparse(h, J: SparseCouplings, beta):
    """The same map on a sparse graph: messages only on edges, ``u [..., n, d]`` with
    ``u[i, k] = u_{nbr(i,k)→i}`` (the neighbour table of ``J.graph``; padding slots carry
    weight 0, so their message is 0). O(E) per iteration and memory. Returns
    ``(F, readout)`` as :func:`bp_map`."""
    g = J.graph
    W = J.neighbour_weights()  # [..., n, d]
    nbr, rev = g.nbr, g.rev.reshape(-1)
    total = lambda u: h + jnp.sum(u, axis=-1)  # H_i = h_i + Σ_k u_{k→i}, [..., n]

    def F(u):
        # c_{j\i} = H_j - u_{i→j}: u_{i→j} sits in j's row at flat slot rev(i, k)
        back = u.reshape(u.shape[:-2] + (-1,))[..., rev].reshape(u.shape)
        cav = total(u)[..., nbr] - back  # [..., n, d]: the cavity field of each neighbour j
        return atanh_tanh_prod(beta * W, beta * cav) / beta

    return F, lambda u: jnp.tanh(beta * total(u))


def bethe_corr(u, h, J, beta):
    """``⟨s_k s_i⟩`` of the Bethe pair marginal ``∝ exp(βJ s_k s_i + βc_{k\\i} s_k + βc_{i\\k} s_i)``,
    which is ``tanh(βJ_ki + atanh(tanh βc_{k\\i} tanh βc_{i\\k}))`` (finite for every input)."""
    H = h + jnp.sum(u, axis=-2)
    c = H[..., :, None] - jnp.swapaxes(u, -1, -2)  # c[k, i] = c_{k\i}
    return jnp.tanh(beta * J + atanh_tanh_prod(beta * c, beta * jnp.swapaxes(c, -1, -2)))


@jax.custom_jvp
def atanh_tanh_prod(a, b):
    """``atanh(tanh a · tanh b)``, finite and accurate for every finite ``a, b``.

    ``= ½ [log cosh(a+b) - log cosh(a-b)] = sgn(a) sgn(b) min(|a|,|b|)
        + ½ [log1p(e^{-2|a+b|}) - log1p(e^{-2|a-b|})]``: the leading term is exact, so
    nothing cancels when fields are large (the naive form gives atanh(±1) = ±inf once
    both tanh round to ±1). The derivative is given in closed form below because the
    ``min`` and ``|·|`` kinks would make autodiff wrong at ``|a| = |b|``.
    """
    lead = jnp.where(jnp.abs(a) < jnp.abs(b), a * jnp.sign(b), b * jnp.sign(a))
    # one log of a ratio in [1/2, 2] instead of two log1p: same value, faster on CPU
    # (this map is most of a BP iteration); an e^{-2|.|} below 1e-7 is lost to 1 + e,
    # an absolute error < 1e-7 next to the exact leading term.
    return lead + 0.5 * jnp.log((1 + jnp.exp(-2 * jnp.abs(a + b))) / (1 + jnp.exp(-2 * jnp.abs(a - b))))


@atanh_tanh_prod.defjvp
def atanh_tanh_prod_jvp(primals, tangents):
    a, b = primals
    da, db = tangents
    tp, tm = jnp.tanh(a + b), jnp.tanh(a - b)
    return atanh_tanh_prod(a, b), 0.5 * (tp - tm) * da + 0.5 * (tp + tm) * db
