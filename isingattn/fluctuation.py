"""Differentiable sample marginals via the fluctuation–dissipation identities.

For ``p(s) ∝ exp(-β E(s))`` with ``E = -h·s - ½ sᵀJs``:

    ∂⟨s_a⟩/∂h_b  = β Cov(s_a, s_b)
    ∂⟨s_a⟩/∂J_bc = ½ β Cov(s_a, s_b s_c)   (per entry of the full symmetric matrix)
    ∂⟨s_a⟩/∂β    = -Cov(s_a, E(s))

so any sampler's output can be trained through: the forward pass is the sample
mean and the backward pass estimates these covariances from the same samples.
Every sampling engine goes through :func:`sample_marginals`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from isingattn.marginals import Marginals
from isingattn.model import IsingModel


@jax.custom_vjp
def _mean(h, J, beta, samples):
    return samples.mean(-2)


def _mean_fwd(h, J, beta, samples):
    return _mean(h, J, beta, samples), (h, J, beta, samples)


def _mean_bwd(res, g):
    h, J, beta, s = res  # s: [..., S, n]; g: [..., n]
    S = s.shape[-2]
    w = jnp.einsum("...sn,...n->...s", s - s.mean(-2, keepdims=True), g) / S  # centred ḡ·s, [..., S]
    gh = beta * jnp.einsum("...s,...sn->...n", w, s)
    gJ = 0.5 * beta * jnp.einsum("...s,...sj,...sk->...jk", w, s, s)
    gJ = gJ * (1 - jnp.eye(s.shape[-1], dtype=gJ.dtype))
    E = -jnp.einsum("...n,...sn->...s", h, s) - 0.5 * jnp.einsum("...sj,...jk,...sk->...s", s, J, s)
    gbeta = -jnp.sum(w * E)
    return gh, gJ, gbeta.astype(beta.dtype), jnp.zeros_like(s)


_mean.defvjp(_mean_fwd, _mean_bwd)


def sample_marginals(model: IsingModel, samples: jax.Array, info=None) -> Marginals:
    """``Marginals`` from spin samples ``[..., S, n]`` (batch of the model, then samples).

    The mean is differentiable in ``h``, ``J`` and ``beta`` through the
    fluctuation–dissipation identities; inactive spins are zeroed. ``corr`` is the
    sample second moment.
    """
    act = model.active()
    h, J = model.masked_parameters()
    batch = model.batch_shape
    if act is not None:
        samples = jnp.where(act[..., None, :], samples, 0.0)
    samples = jax.lax.stop_gradient(samples.astype(model.dtype))
    h = jnp.broadcast_to(h, batch + h.shape[-1:])
    J = jnp.broadcast_to(J, batch + J.shape[-2:])
    mean = _mean(h, J, model.beta, samples)
    corr = jnp.einsum("...sj,...sk->...jk", samples, samples) / samples.shape[-2]
    return Marginals(mean=mean, corr=corr, samples=samples, info={} if info is None else info)
