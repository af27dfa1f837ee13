"""A one-layer, decoder-only Transformer with Boltzmann attention, in the nanoGPT spirit."""

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
from isingattn.inference import Exact

J_PARAMS = ("full", "toeplitz", "banded")


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything that defines the architecture. Hashable, so it can be static under jit."""

    vocab_size: int
    seq_len: int  # T_max: the longest context (positions and J are sized by it)
    n_out: int  # output classes per position (vocab for LM, positions for bracket matching)
    d_model: int = 64
    n_heads: int = 1
    ffn: bool = True
    ffn_mult: int = 4
    variant: str = "hJ"
    engine: Any = Exact()
    J_param: str = "full"  # "full", "toeplitz" (J_jk = w[|j-k|]) or "banded" (zero beyond J_band)
    J_band: Optional[int] = None  # bandwidth: required by "banded", optional truncation of "toeplitz"
    field_bias: bool = True  # learnable scalar field per head (h and hJ variants)
    beta: float = 1.0

    def __post_init__(self):
        for name in ("vocab_size", "seq_len", "n_out", "d_model", "n_heads", "ffn_mult"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1):
                raise IsingInputError(f"{name} must be a positive integer; got {v!r}.")
        for name in ("ffn", "field_bias"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise IsingInputError(f"{name} must be True or False; got {getattr(self, name)!r}.")
        if not (isinstance(self.beta, (int, float, np.floating, np.integer)) and not isinstance(self.beta, bool)
                and math.isfinite(self.beta) and self.beta > 0):
            raise IsingInputError(f"beta must be a finite positive number (the inverse temperature); got {self.beta!r}.")
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
    config: Config = eqx.field(static=True)

    def __init__(self, config: Config, key):
        k1, k2 = jax.random.split(key)
        d, H, T = config.d_model, config.n_heads, config.seq_len
        self.w_qkv = _dense(k1, d, 3 * d)
        self.w_out = _dense(k2, d, d)
        band = max(1, T - 1 if config.J_band is None else min(config.J_band, T - 1))
        self.J_raw = jnp.zeros({"full": (H, T, T), "toeplitz": (H, band + 1), "banded": (H, band, T)}[config.J_param])
        self.field_bias = jnp.zeros(H)
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

    def fields(self, x):
        """The Ising fields of every query, ``(B, H, T, T)`` (before the causal mask)."""
        q, k, _ = self._qkv(x)
        return attention_fields(q, k, self.field_bias if self.config.field_bias else None)

    def __call__(self, x, key=None):
        cfg = self.config
        B, T, d = x.shape
        q, k, v = self._qkv(x)  # (B, H, T, dh)
        out, weights = boltzmann_attention(
            q, k, v, self.couplings(T), variant=cfg.variant, engine=cfg.engine,
            causal=True, bias=self.field_bias if cfg.field_bias else None, beta=cfg.beta, key=key,
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


class Transformer(eqx.Module):
    """tokens (B, T) -> logits (B, T, n_out). One pre-LN block; the FFN is optional."""

    tok_emb: jax.Array  # (V, d)
    pos_emb: jax.Array  # (T_max, d)
    ln1: LayerNorm
    attn: Attention
    ln2: LayerNorm | None
    mlp: MLP | None
    ln_f: LayerNorm
    head: jax.Array  # (d, n_out)
    config: Config = eqx.field(static=True)

    def __init__(self, config: Config, *, key):
        ks = jax.random.split(key, 5)
        d = config.d_model
        self.tok_emb = jax.random.normal(ks[0], (config.vocab_size, d)) * 0.02
        self.pos_emb = jax.random.normal(ks[1], (config.seq_len, d)) * 0.02
        self.ln1 = LayerNorm(d)
        self.attn = Attention(config, ks[2])
        self.ln2 = LayerNorm(d) if config.ffn else None
        self.mlp = MLP(d, config.ffn_mult, ks[3]) if config.ffn else None
        self.ln_f = LayerNorm(d)
        self.head = _dense(ks[4], d, config.n_out)
        self.config = config

    def embed(self, tokens):  # (B, T) -> (B, T, d)
        T = tokens.shape[-1]
        if T > self.config.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len {self.config.seq_len}.")
        return self.tok_emb[tokens] + self.pos_emb[:T]

    def attention_fields(self, tokens):
        """The Ising fields every head's queries see, ``(B, H, T, T)``: the forward pass up to attention."""
        return self.attn.fields(self.ln1(self.embed(tokens)))

    def __call__(self, tokens, *, key=None, return_weights=False):
        x = self.embed(tokens)  # (B, T, d)
        a, weights = self.attn(self.ln1(x), key=key)
        x = x + a
        if self.mlp is not None:
            x = x + self.mlp(self.ln2(x))
        logits = self.ln_f(x) @ self.head  # (B, T, n_out)
        return (logits, weights) if return_weights else logits
