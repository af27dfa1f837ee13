"""``Marginals``: the result every inference engine returns, the ``Label`` strings of
its ``info``, and the linear-response rule by which deterministic engines fill in its
``corr``."""

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
        log_z: ``log Z = log Σ_s exp(-βE(s))`` over the active spins, ``[...]``, from the
            engines that compute one; ``info["log_z_kind"]`` says what it is: ``"exact"``
            (``Exact``, ``Banded``), ``"lower_bound"`` (``MeanField`` naive: the
            Gibbs–Bogoliubov bound) or ``"approximation"`` (``MeanField`` TAP and BP/Bethe).
            None from the others.
        samples: spin samples, engine-specific leading axes, when the engine samples.
        info: diagnostics: a dict of arrays, and of :class:`Label` strings such as
            ``log_z_kind``.
    """

    mean: jax.Array
    corr: Optional[jax.Array] = None
    log_z: Optional[jax.Array] = None
    samples: Optional[jax.Array] = None
    info: dict[str, Any] = eqx.field(default_factory=dict)


class Label(str):
    """A string entry of ``Marginals.info`` (e.g. ``info["log_z_kind"] == "exact"``). It is
    a ``str`` in every respect but one: as a pytree it is a node with no leaves (the string
    is static data), so a ``Marginals`` that carries it passes through ``jax.jit``,
    ``vmap`` and tree maps, where a plain string is not a valid JAX output."""

    __slots__ = ()


jax.tree_util.register_pytree_node(Label, lambda s: ((), str(s)), lambda aux, _: Label(aux))


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
