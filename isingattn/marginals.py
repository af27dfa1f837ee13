"""``Marginals``: the result every inference engine returns, and the linear-response
rule by which deterministic engines fill in its ``corr``."""

from __future__ import annotations

from typing import Any, Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp


class Marginals(eqx.Module):
    """Spin statistics of a (batched) Ising model.

    Attributes:
        mean: ``⟨s_j⟩``, ``[..., n]``; 0 for inactive spins.
        corr: ``⟨s_j s_k⟩``, ``[..., n, n]``, when requested; rows and columns of
            inactive spins are 0.
        log_z: ``log Z`` over the active spins, ``[...]`` (exact engines only).
        samples: spin samples, engine-specific leading axes, when the engine samples.
        info: diagnostics (a dict of arrays).
    """

    mean: jax.Array
    corr: Optional[jax.Array] = None
    log_z: Optional[jax.Array] = None
    samples: Optional[jax.Array] = None
    info: dict[str, Any] = eqx.field(default_factory=dict)


def linear_response_corr(mean_fn: Callable, h, mean, beta):
    """Pair correlations ``⟨s_j s_k⟩ = (1/β) ∂m_j/∂h_k + m_j m_k`` of the means
    ``m = mean_fn(h)`` (fluctuation–dissipation; exact where ``mean_fn`` is).

    mean_fn: ``h [..., n] -> m [..., n]`` with the models of the batch independent, so one
    ``jvp`` per spin ``k`` (perturbing ``h_k`` of every model at once) gives every
    covariance. h: ``[..., n]`` (the batch shape of ``mean``); mean: ``mean_fn(h)``;
    beta: scalar. Returns ``[..., n(j), n(k)]``.
    """
    eye = jnp.eye(h.shape[-1], dtype=h.dtype)
    dm = jax.vmap(lambda e: jax.jvp(mean_fn, (h,), (jnp.broadcast_to(e, h.shape),))[1])(eye)  # [n(k), ..., n(j)]
    return jnp.moveaxis(dm, 0, -1) / beta + mean[..., :, None] * mean[..., None, :]
