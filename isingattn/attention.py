"""Boltzmann attention (DESIGN.md §2): attention weights from Ising spin marginals."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from isingattn.errors import IsingInputError
from isingattn.model import IsingModel, causal_mask

VARIANTS = ("softmax", "hJ", "h", "J")


def attention_fields(q, k, bias=None):
    """The fields ``h_ij = q_i·k_j / sqrt(d_k) (+ bias)``: q ``[..., Tq, d]``, k ``[..., Tk, d]`` -> ``[..., Tq, Tk]``.

    ``bias`` (one scalar per leading index, e.g. per head) broadcasts against the leading dims."""
    h = jnp.einsum("...id,...jd->...ij", q, k) / jnp.sqrt(jnp.asarray(q.shape[-1], q.dtype))
    return h if bias is None else h + jnp.asarray(bias, h.dtype)[..., None, None]


def boltzmann_attention(q, k, v, J=None, *, variant: str = "hJ", engine=None, causal: bool = True,
                        bias=None, pos_bias=None, beta: float = 1.0, key: Optional[jax.Array] = None):
    """Attention whose weights are spin marginals of an Ising model per query.

    For query ``i`` the keys ``j`` it may see carry spins with fields
    ``h_ij = q_i·k_j / sqrt(d_k) (+ bias)`` and couplings ``J``. With
    ``m_ij = ⟨s_j⟩_i`` the weights are ``α_ij = (1 + m_ij)/2`` normalized over ``j``.

    Variants (the paper's ablation): ``"softmax"`` (standard attention), ``"hJ"``
    (fields and couplings, needs ``engine``), ``"h"`` (``J ≡ 0``: closed form
    ``α ∝ sigmoid(2βh)``), ``"J"`` (``h ≡ 0``, couplings only; uniform by spin-flip
    symmetry; exact engines use that, sampling engines are run all the same).

    Args:
        q, k: ``[..., T, d_k]`` (queries and keys; ``T_q == T_k`` when causal).
        v: ``[..., T, d_v]``.
        J: ``[..., T, T]`` couplings broadcast against the leading dims
            (e.g. ``q [B, H, T, d]`` with ``J [H, T, T]``); needed for ``hJ`` and ``J``.
        variant: one of ``softmax``, ``hJ``, ``h``, ``J``.
        engine: an inference engine (``isingattn.inference``) for ``hJ`` and ``J``.
        causal: query ``i`` sees keys ``j ≤ i``.
        bias: optional scalar field bias broadcast against the leading dims (one per
            head), added to ``h`` for ``hJ`` and ``h``.
        pos_bias: optional fields ``[..., Tq, Tk]`` broadcast against ``h`` (e.g. a learned
            relative-position bias per head, ``[H, T, T]``), added for ``softmax``, ``hJ`` and ``h``
            (``J`` keeps ``h ≡ 0``).
        beta: inverse temperature of the spin model.
        key: PRNG key for sampling engines.

    Returns:
        ``out [..., T, d_v]`` and ``weights [..., T_q, T_k]`` (rows sum to 1).
    """
    if variant not in VARIANTS:
        raise IsingInputError(f"variant must be one of {VARIANTS}; got {variant!r}.")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise IsingInputError(
            f"expected q [..., Tq, d], k [..., Tk, d], v [..., Tk, d_v]; got q {q.shape}, k {k.shape}, v {v.shape}."
        )
    Tq, Tk = q.shape[-2], k.shape[-2]
    if causal and Tq != Tk:
        raise IsingInputError(f"causal attention needs as many queries as keys; got Tq={Tq}, Tk={Tk}.")
    h = attention_fields(q, k, bias if variant in ("hJ", "h") else None)  # (..., Tq, Tk)
    if pos_bias is not None and variant != "J":
        h = h + jnp.asarray(pos_bias, h.dtype)
    visible = causal_mask(Tq, Tk) if causal else jnp.ones((Tq, Tk), bool)

    if variant == "softmax":
        weights = jax.nn.softmax(jnp.where(visible, h, -jnp.inf), axis=-1)
        return weights @ v, weights

    if variant == "h":
        alpha = jax.nn.sigmoid(2 * beta * h)  # (1 + tanh(βh))/2 without cancellation
    else:
        if J is None or engine is None:
            raise IsingInputError(f"variant {variant!r} needs couplings J [..., {Tk}, {Tk}] and an inference engine.")
        if J.shape[-2:] != (Tk, Tk):
            raise IsingInputError(f"J must be [..., {Tk}, {Tk}] for {Tk} keys; got {J.shape}. Slice it: J[..., :T, :T].")
        if variant == "J" and getattr(engine, "exact", False):
            alpha = jnp.full_like(h, 0.5)  # ⟨s⟩ = 0 exactly by spin-flip symmetry at h = 0
        else:
            if variant == "J":
                h = jnp.zeros_like(h)
            model = IsingModel(h, J[..., None, :, :], beta=beta, causal=causal)
            alpha = (1 + engine.marginals(model, key=key).mean) / 2
    alpha = jnp.where(visible, alpha, 0.0)
    total = alpha.sum(-1, keepdims=True)
    # A row with no key "on" (every sampled spin -1, or tanh saturated at -1 in float32)
    # has no defined normalization: attend uniformly to its visible keys rather than
    # divide by zero (which would poison the gradients).
    empty = total <= 0
    alpha = jnp.where(empty, visible.astype(alpha.dtype), alpha)
    weights = alpha / jnp.where(empty, visible.sum(-1, keepdims=True).astype(alpha.dtype), total)
    return weights @ v, weights
