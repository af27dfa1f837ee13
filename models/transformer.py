"""A decoder-only Transformer with Boltzmann attention, in the nanoGPT spirit: ``n_layers``
pre-LN blocks (attention, then an optional FFN), one layer by default."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from isingattn.attention import VARIANTS, attention_fields, boltzmann_attention
from isingattn.errors import IsingInputError
from isingattn.inference.exact import Exact

J_PARAMS = ("full", "toeplitz", "banded")


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that defines the architecture. Hashable, so it can be static under jit."""

    vocab_size: int
    seq_len: int  # T_max: the longest context (positions and J are sized by it)
    n_out: int  # output classes per position (vocab for LM, positions for bracket matching)
    d_model: int = 64
    n_heads: int = 1
    n_layers: int = 1  # blocks of (attention, FFN); each layer has its own J
    ffn: bool = True
    ffn_mult: int = 4
    variant: str = "hJ"
    engine: Any = Exact()
    J_param: str = "full"  # "full", "toeplitz" (J_jk = w[|j-k|]) or "banded" (zero beyond J_band)
    J_band: Optional[int] = None  # bandwidth: required by "banded", optional truncation of "toeplitz"
    field_bias: bool = True  # learnable scalar field per head (h and hJ variants)
    rel_bias: bool = False  # learnable field per head and query-key distance i-j (T5-style), every variant but J
    pair_bias: bool = False  # learnable field per head and position pair (i, j): T_max² per head, every variant but J
    dropout: float = 0.0  # residual dropout (embeddings, attention and FFN outputs), training only
    beta: float = 1.0

    def __post_init__(self):
        for name in ("vocab_size", "seq_len", "n_out", "d_model", "n_heads", "n_layers", "ffn_mult"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1):
                raise IsingInputError(f"{name} must be a positive integer; got {v!r}.")
        for name in ("ffn", "field_bias", "rel_bias", "pair_bias"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise IsingInputError(f"{name} must be True or False; got {getattr(self, name)!r}.")
        if not (isinstance(self.beta, (int, float, np.floating, np.integer)) and not isinstance(self.beta, bool)
                and math.isfinite(self.beta) and self.beta > 0):
            raise IsingInputError(f"beta must be a finite positive number (the inverse temperature); got {self.beta!r}.")
        if not (isinstance(self.dropout, (int, float, np.floating, np.integer)) and not isinstance(self.dropout, bool)
                and 0.0 <= self.dropout < 1.0):
            raise IsingInputError(f"dropout must be a probability in [0, 1); got {self.dropout!r}.")
        if self.variant not in VARIANTS:
            raise IsingInputError(f"variant must be one of {', '.join(VARIANTS)}; got {self.variant!r}.")
        if self.J_param not in J_PARAMS:
            raise IsingInputError(f"J_param must be one of {', '.join(J_PARAMS)}; got {self.J_param!r}.")
        if self.J_band is not None and not (isinstance(self.J_band, (int, np.integer)) and not isinstance(self.J_band, bool)
                                            and self.J_band >= 1):
            raise IsingInputError(f"J_band must be a positive integer (a bandwidth) or None; got {self.J_band!r}.")
        if self.J_param == "banded" and self.J_band is None:
            raise IsingInputError('J_param="banded" needs J_band, the largest coupled distance, e.g. J_band=8 '
                                  "(--J-band 8 on the command line).")
        if self.J_param == "full" and self.J_band is not None:
            raise IsingInputError('J_band applies to J_param="banded" or "toeplitz"; a "full" J has no band.')
        width = self.seq_len - 1 if self.J_band is None else min(self.J_band, self.seq_len - 1)
        engine_band = getattr(self.engine, "bandwidth", None)
        if self.variant in ("hJ", "J") and engine_band is not None and width > engine_band:
            raise IsingInputError(
                f"the engine handles couplings up to distance {engine_band}, but this J reaches distance {width}. "
                f'Use J_param="banded" or "toeplitz" with J_band ≤ {engine_band}, or a wider engine.'
            )
        if self.d_model % self.n_heads:
            raise IsingInputError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}); "
                                  f"pick n_heads among the divisors of {self.d_model}.")


def dropout(x, rate: float, key):
    """Inverted dropout: each entry kept with probability ``1 - rate`` and scaled by ``1 / (1 - rate)``;
    ``x`` itself when ``key`` is None or ``rate`` is 0 (evaluation)."""
    if key is None or not rate:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def _dense(key, d_in, d_out):
    return jax.random.normal(key, (d_in, d_out)) / math.sqrt(d_in)


class LayerNorm(eqx.Module):
    gamma: jax.Array  # (d,) gain
    bias: jax.Array  # (d,) shift (not "beta": that name is the inverse temperature here)

    def __init__(self, d):
        self.gamma, self.bias = jnp.ones(d), jnp.zeros(d)

    def __call__(self, x):  # (..., d)
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * self.gamma + self.bias


class Attention(eqx.Module):
    w_qkv: jax.Array  # (d, 3d)
    w_out: jax.Array  # (d, d)
    # J's free parameters, all starting at 0 (J ≡ 0):
    #   full:     (H, T_max, T_max), J = sym(J_raw) with zero diagonal
    #   toeplitz: (H, L), J_jk = J_raw[|j-k|] for 1 ≤ |j-k| < L  (L = J_band + 1, or T_max)
    #   banded:   (H, J_band, T_max), J_{t, t-d} = J_raw[d-1, t] for 1 ≤ d ≤ J_band
    J_raw: jax.Array
    field_bias: jax.Array  # (H,)
    rel_bias: Optional[jax.Array]  # (H, T_max): field of key j for query i, by distance i - j (None: off)
    pair_bias: Optional[jax.Array]  # (H, T_max, T_max): field of key j for query i, one per pair (None: off)
    config: Config = eqx.field(static=True)

    def __init__(self, config: Config, key):
        k1, k2 = jax.random.split(key)
        d, H, T = config.d_model, config.n_heads, config.seq_len
        self.w_qkv = _dense(k1, d, 3 * d)
        self.w_out = _dense(k2, d, d)
        band = max(1, T - 1 if config.J_band is None else min(config.J_band, T - 1))
        self.J_raw = jnp.zeros({"full": (H, T, T), "toeplitz": (H, band + 1), "banded": (H, band, T)}[config.J_param])
        self.field_bias = jnp.zeros(H)
        self.rel_bias = jnp.zeros((H, T)) if config.rel_bias else None
        self.pair_bias = jnp.zeros((H, T, T)) if config.pair_bias else None
        self.config = config

    def couplings(self, T=None):
        """The symmetric, zero-diagonal coupling matrices ``(H, T, T)``."""
        T = T or self.config.seq_len
        if self.config.J_param == "full":
            A = self.J_raw[:, :T, :T]
            return (A + jnp.swapaxes(A, -1, -2)) / 2 * (1 - jnp.eye(T, dtype=A.dtype))
        j, k = np.arange(T)[:, None], np.arange(T)[None, :]
        if self.config.J_param == "toeplitz":
            dist = np.abs(j - k)  # (T, T)
            inside = (dist > 0) & (dist < self.J_raw.shape[-1])
            return jnp.where(inside, self.J_raw[:, np.minimum(dist, self.J_raw.shape[-1] - 1)], 0.0)
        band = self.J_raw.shape[1]  # banded: the lower triangle J_{j, j-d} is read from row j, then mirrored
        dist = j - k
        inside = (dist >= 1) & (dist <= band)
        lower = jnp.where(inside, self.J_raw[:, np.clip(dist - 1, 0, band - 1), np.broadcast_to(j, (T, T))], 0.0)
        return lower + jnp.swapaxes(lower, -1, -2)

    def _qkv(self, x):  # (B, T, d) -> 3 x (B, H, T, dh)
        B, T, d = x.shape
        H = self.config.n_heads
        return [t.reshape(B, T, H, d // H).transpose(0, 2, 1, 3) for t in jnp.split(x @ self.w_qkv, 3, axis=-1)]

    def position_fields(self, T):
        """The position fields ``(H, T, T)``: ``rel_bias[:, i - j]`` for ``j <= i``, plus ``pair_bias[:, i, j]``
        (None when both are off)."""
        pos = None
        if self.rel_bias is not None:
            dist = np.maximum(np.arange(T)[:, None] - np.arange(T)[None, :], 0)  # (T, T); j > i is masked anyway
            pos = self.rel_bias[:, dist]
        if self.pair_bias is not None:
            pos = self.pair_bias[:, :T, :T] if pos is None else pos + self.pair_bias[:, :T, :T]
        return pos

    def fields(self, x):
        """The Ising fields of every query, ``(B, H, T, T)`` (before the causal mask)."""
        q, k, _ = self._qkv(x)
        h = attention_fields(q, k, self.field_bias if self.config.field_bias else None)
        pos = self.position_fields(x.shape[1])
        return h if pos is None or self.config.variant == "J" else h + pos

    def __call__(self, x, key=None):
        cfg = self.config
        B, T, d = x.shape
        q, k, v = self._qkv(x)  # (B, H, T, dh)
        out, weights = boltzmann_attention(
            q, k, v, self.couplings(T), variant=cfg.variant, engine=cfg.engine, causal=True,
            bias=self.field_bias if cfg.field_bias else None, pos_bias=self.position_fields(T), beta=cfg.beta, key=key,
        )  # (B, H, T, dh), (B, H, T, T)
        out = out.transpose(0, 2, 1, 3).reshape(B, T, d)  # (B, T, d)
        return out @ self.w_out, weights


class MLP(eqx.Module):
    w1: jax.Array
    w2: jax.Array

    def __init__(self, d, mult, key):
        k1, k2 = jax.random.split(key)
        self.w1, self.w2 = _dense(k1, d, mult * d), _dense(k2, mult * d, d)

    def __call__(self, x):  # (B, T, d)
        return jax.nn.gelu(x @ self.w1) @ self.w2


class Block(eqx.Module):
    """One pre-LN layer: ``x + attn(ln1(x))``, then ``+ mlp(ln2(x))`` when the FFN is on."""

    ln1: LayerNorm
    attn: Attention
    ln2: LayerNorm | None
    mlp: MLP | None

    def __init__(self, config: Config, attn_key, mlp_key):
        d = config.d_model
        self.ln1 = LayerNorm(d)
        self.attn = Attention(config, attn_key)
        self.ln2 = LayerNorm(d) if config.ffn else None
        self.mlp = MLP(d, config.ffn_mult, mlp_key) if config.ffn else None

    def __call__(self, x, key=None, dropout_key=None):  # (B, T, d) -> (B, T, d), attention weights (B, H, T, T)
        a, weights = self.attn(self.ln1(x), key=key)
        rate, k = self.attn.config.dropout, (None, None) if dropout_key is None else jax.random.split(dropout_key)
        x = x + dropout(a, rate, k[0])
        if self.mlp is not None:
            x = x + dropout(self.mlp(self.ln2(x)), rate, k[1])
        return x, weights


class Transformer(eqx.Module):
    """tokens (B, T) -> logits (B, T, n_out). ``config.n_layers`` pre-LN blocks; the FFN is optional.

    The first layer's modules are also reachable as ``model.attn``, ``model.ln1``,
    ``model.ln2`` and ``model.mlp`` (the one-layer model's names; ``eqx.tree_at`` works
    through them)."""

    tok_emb: jax.Array  # (V, d)
    pos_emb: jax.Array  # (T_max, d)
    blocks: tuple[Block, ...]  # n_layers of them
    ln_f: LayerNorm
    head: jax.Array  # (d, n_out)
    config: Config = eqx.field(static=True)

    def __init__(self, config: Config, *, key):
        # Layer 0 takes the keys the one-layer model always used (ks[2], ks[3]), so that a seed
        # initializes it as before and one-layer checkpoints keep their meaning; layer l >= 1
        # draws from fold_in(key, l), independent of split(key, 5).
        ks = jax.random.split(key, 5)
        d = config.d_model
        layer_keys = [(ks[2], ks[3])] + [tuple(jax.random.split(jax.random.fold_in(key, l)))
                                         for l in range(1, config.n_layers)]
        self.tok_emb = jax.random.normal(ks[0], (config.vocab_size, d)) * 0.02
        self.pos_emb = jax.random.normal(ks[1], (config.seq_len, d)) * 0.02
        self.blocks = tuple(Block(config, ka, km) for ka, km in layer_keys)
        self.ln_f = LayerNorm(d)
        self.head = _dense(ks[4], d, config.n_out)
        self.config = config

    # the first layer under the one-layer model's names
    attn = property(lambda self: self.blocks[0].attn, doc="The first layer's attention.")
    ln1 = property(lambda self: self.blocks[0].ln1, doc="The first layer's pre-attention LayerNorm.")
    ln2 = property(lambda self: self.blocks[0].ln2, doc="The first layer's pre-FFN LayerNorm (None without FFN).")
    mlp = property(lambda self: self.blocks[0].mlp, doc="The first layer's FFN (None without FFN).")

    def _check_layer(self, layer):
        L = self.config.n_layers
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < L:
            raise IsingInputError(f"layer must be an integer in 0..{L - 1} (the model has {L} layer(s)); "
                                  f"got {layer!r}.")

    def embed(self, tokens):  # (B, T) -> (B, T, d)
        T = tokens.shape[-1]
        if T > self.config.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len {self.config.seq_len}.")
        return self.tok_emb[tokens] + self.pos_emb[:T]

    def _layer_keys(self, key):
        """Layer 0 gets ``key`` itself (as the one-layer model did), layer l ``fold_in(key, l)``."""
        if key is None:
            return [None] * self.config.n_layers
        return [key] + [jax.random.fold_in(key, l) for l in range(1, self.config.n_layers)]

    def attention_fields(self, tokens, layer: int = 0, *, key=None):
        """The Ising fields the queries of ``layer``'s heads see, ``(B, H, T, T)``: the forward
        pass up to that layer's attention (``key`` feeds the sampling engines of the layers below)."""
        self._check_layer(layer)
        x, keys = self.embed(tokens), self._layer_keys(key)  # (B, T, d)
        for l in range(layer):
            x, _ = self.blocks[l](x, key=keys[l])
        block = self.blocks[layer]
        return block.attn.fields(block.ln1(x))

    def __call__(self, tokens, *, key=None, return_weights=False, dropout_key=None):
        """Logits ``(B, T, n_out)``; with ``return_weights`` also every layer's attention weights,
        ``(B, n_layers * H, T, T)``: the heads of layer l are ``[:, l*H : (l+1)*H]`` (one layer:
        ``(B, H, T, T)``, as before), ``.reshape(B, n_layers, H, T, T)`` separates them.
        ``dropout_key`` (training only) drops ``config.dropout`` of the embeddings and of every
        attention and FFN output; without it (evaluation) nothing is dropped."""
        x = self.embed(tokens)  # (B, T, d)
        L = self.config.n_layers
        dks = [None] * (L + 1) if dropout_key is None else list(jax.random.split(dropout_key, L + 1))
        x = dropout(x, self.config.dropout, dks[L])
        weights = []
        for block, k, dk in zip(self.blocks, self._layer_keys(key), dks):
            x, w = block(x, key=k, dropout_key=dk)  # (B, T, d), (B, H, T, T)
            weights.append(w)
        logits = self.ln_f(x) @ self.head  # (B, T, n_out)
        return (logits, jnp.concatenate(weights, axis=1)) if return_weights else logits
