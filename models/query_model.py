"""The Ising model that one attention query of a trained Transformer solves."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.errors import IsingInputError
from isingattn.model import IsingModel


def encode_text(text: str, chars: str) -> np.ndarray:
    """Token ids ``(T,)`` of ``text`` in the vocabulary ``chars`` (id -> character)."""
    lut = {c: i for i, c in enumerate(chars)}
    bad = sorted(set(text) - set(lut))
    if bad:
        raise IsingInputError(f"characters {bad[:10]} are not in the model's vocabulary {chars!r}.")
    return np.array([lut[c] for c in text], np.int32)


def query_model(model, meta: dict, text: str, query: int, head: int = 0, layer: int = 0) -> IsingModel:
    """The Ising model over keys ``0..query`` that ``head`` of ``layer`` (0: the first) solves
    for position ``query`` of ``text``.

    Fields are ``q_i·k_j/sqrt(d_k)`` (+ the head's bias) of the trained model on
    ``text`` (for ``layer`` > 0, of the output of the layers below, whose sampling
    engines, if any, run with the fixed key ``PRNGKey(0)``); couplings are that head's
    learned ``J`` restricted to the visible keys; β is the model's. Variant ``h`` has ``J = 0`` and variant ``J`` has ``h = 0``, as in
    attention. Labels are the key positions."""
    cfg = model.config
    if cfg.variant == "softmax":
        raise IsingInputError("a softmax model solves no Ising model; export an hJ, h or J model.")
    chars = meta.get("chars")
    if not chars:
        raise IsingInputError("the checkpoint has no vocabulary ('chars' in its metadata); cannot encode --text.")
    tokens = encode_text(text, chars)
    T = len(tokens)
    if not 1 <= T <= cfg.seq_len:
        raise IsingInputError(f"--text has {T} characters; the model takes 1..{cfg.seq_len}.")
    if not 0 <= query < T:
        raise IsingInputError(f"--query must be a position in 0..{T - 1}; got {query}.")
    if not 0 <= head < cfg.n_heads:
        raise IsingInputError(f"--head must be in 0..{cfg.n_heads - 1}; got {head}.")
    if not 0 <= layer < cfg.n_layers:
        raise IsingInputError(f"--layer must be in 0..{cfg.n_layers - 1} (the model has {cfg.n_layers} layer(s)); "
                              f"got {layer}.")
    fields = model.attention_fields(tokens[None], layer, key=jax.random.PRNGKey(0))  # (1, H, T, T)
    h = fields[0, head, query, : query + 1]  # (query+1,)
    J = model.blocks[layer].attn.couplings(T)[head, : query + 1, : query + 1]
    if cfg.variant == "h":
        J = jnp.zeros_like(J)
    if cfg.variant == "J":
        h = jnp.zeros_like(h)
    return IsingModel(np.asarray(h, np.float64), np.asarray(J, np.float64), beta=cfg.beta,
                      labels=tuple(range(query + 1)))
