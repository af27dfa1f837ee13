"""Random numbers for the samplers' inner loops: one Threefry-2x32 block per key and
counter, unrolled so that XLA fuses it with whatever consumes the bits.

Why not ``jax.random.uniform``: with ``jax_threefry_partitionable`` (the default) it
spends one Threefry block (20 rounds) per 32-bit number and throws half the block away,
and on CPU JAX lowers the rounds as a rolled while loop whose intermediates are
materialized. A heat-bath sweep needs one uniform per spin update, so on CPU this was
the largest single cost of a Gibbs sweep. Here every block gives two 32-bit words
(float32: two uniforms per block; float64: one 52-bit uniform per block) and the 20
rounds are plain ``jnp`` integer ops that fuse with the uniform → logistic transform.
Measured inside the Gibbs sweep loop (dense n = 64, 256 chains, 2-core CPU): 10 →
5.8 ns per float32 logistic number, ``jax.random.uniform`` + the same transform
against this module.

The hash is the standard Threefry-2x32 with 20 rounds (Salmon et al., SC'11), bit for
bit the same as ``jax.extend.random.threefry2x32_p`` (a test checks it); only the
counter layout is ours. Keys are any JAX PRNG keys (raw ``uint32[2]`` or typed
threefry keys); the same key gives the same numbers, and batched keys (``vmap``) give
independent streams.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from isingattn.errors import IsingInputError, IsingTypeError

__all__ = ["threefry2x32", "split", "random_bits", "uniform", "logistic", "check_key"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotl(x, d: int):
    return (x << np.uint32(d)) | (x >> np.uint32(32 - d))


def threefry2x32(k0, k1, x0, x1):
    """Threefry-2x32, 20 rounds, on ``uint32`` arrays (broadcast against each other).

    Args:
        k0, k1: the two key words; x0, x1: the two counter words.
    Returns:
        ``(y0, y1)``, two ``uint32`` arrays of the broadcast shape.
    """
    k2 = k0 ^ k1 ^ np.uint32(0x1BD11BDA)
    ks = (k0, k1, k2)
    x0, x1 = x0 + k0, x1 + k1
    for r in range(5):  # 5 x 4 rounds, a key injection after each group of 4
        for d in _ROTATIONS[r % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, d) ^ x0
        x0 = x0 + ks[(r + 1) % 3]
        x1 = x1 + ks[(r + 2) % 3] + np.uint32(r + 1)
    return x0, x1


def _key_words(key):
    kd = jax.random.key_data(key)  # uint32[..., 2] for raw and typed threefry keys
    if kd.shape[-1] != 2 or kd.dtype != jnp.uint32:
        raise IsingTypeError(f"isingattn.prng needs a threefry key (uint32 data [..., 2]); got key data {kd.dtype}{list(kd.shape)}. "
                             "Pass the key through isingattn.prng.check_key first.")
    return kd[..., 0], kd[..., 1]


@functools.lru_cache(maxsize=None)
def _raw_key_shape(impl: str) -> tuple:
    """Shape of the raw key data ``jax.random.PRNGKey`` makes under the default impl."""
    return tuple(jax.eval_shape(lambda: jax.random.PRNGKey(0)).shape)


def check_key(key, *, owner: str = "this sampler", name: str = "key"):
    """One JAX PRNG key, validated, as a typed threefry key (shape ``()``).

    Accepted: a typed key of any implementation (``jax.random.key(seed, impl=...)``:
    ``threefry2x32``, ``rbg``, ``unsafe_rbg``) and raw legacy key data
    (``jax.random.PRNGKey(seed)``, ``uint32[2]`` with the default threefry impl), traced
    or concrete. A threefry key is returned as the same key (raw data wrapped, same
    bits), so results do not change; a key of another implementation is turned into
    the threefry key made of its first 64 random bits (the fused Threefry of this
    module needs threefry keys): deterministic, so the same key gives the same result.

    Raises ``IsingTypeError`` for anything that is not a key (an int, a float array, a
    uint32 array of the wrong shape) and ``IsingInputError`` for a batch of keys; both
    messages name ``owner`` and ``name``.
    """
    how = "Pass one key, e.g. key=jax.random.key(0) or key=jax.random.PRNGKey(0)."
    shape = getattr(key, "shape", None)
    dtype = getattr(key, "dtype", None)
    if shape is None or dtype is None or isinstance(key, (bool, int, float, complex)):
        raise IsingTypeError(f"{owner}: {name} must be a JAX PRNG key; got {type(key).__name__} {repr(key)[:80]}. {how}")
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        if shape != ():
            raise IsingInputError(f"{owner}: {name} must be a single PRNG key; got a batch of keys of shape {tuple(shape)}. "
                                  "Pass one key (e.g. keys[0]); the sampler derives its own per-chain keys from it.")
        if str(jax.random.key_impl(key)) == "threefry2x32":
            return key
        return jax.random.wrap_key_data(jax.random.bits(key, (2,), jnp.uint32), impl="threefry2x32")
    impl = str(jax.config.jax_default_prng_impl)
    want = _raw_key_shape(impl)
    is_array = isinstance(key, (jax.Array, np.ndarray)) and dtype == np.uint32
    if is_array and len(shape) > len(want) and tuple(shape[-len(want):]) == want:
        raise IsingInputError(f"{owner}: {name} must be a single PRNG key; got raw key data of shape {tuple(shape)}, a batch "
                              f"of keys. Pass one key (e.g. keys[0]); the sampler derives its own per-chain keys from it.")
    if not (is_array and tuple(shape) == want):
        raise IsingTypeError(
            f"{owner}: {name} must be a JAX PRNG key (a typed key, or raw key data uint32{list(want)} from "
            f"jax.random.PRNGKey); got an array of dtype {dtype} and shape {tuple(shape)}. {how}")
    return check_key(jax.random.wrap_key_data(jnp.asarray(key), impl=impl), owner=owner, name=name)


def split(key_data):
    """``jax.random.split(key)`` (two keys) on raw key data ``uint32[..., 2]``, bit for
    bit, as one fused elementwise computation (batched keys welcome).

    Returns ``(first, second)``, each ``uint32[..., 2]``: what ``split(key)[0]`` and
    ``split(key)[1]`` hold. Uses jax's partitionable split (counters ``(0, 0)`` and
    ``(0, 1)``); with ``jax_threefry_partitionable`` off it defers to
    ``jax.random.split``, so results always equal jax's."""
    if not jax.config.jax_threefry_partitionable:
        keys = jax.vmap(jax.random.split)(key_data.reshape(-1, 2)).reshape(key_data.shape[:-1] + (2, 2))
        return keys[..., 0, :], keys[..., 1, :]
    k0, k1 = key_data[..., 0], key_data[..., 1]
    zero = jnp.zeros_like(k0)
    a = threefry2x32(k0, k1, zero, zero)
    b = threefry2x32(k0, k1, zero, zero + np.uint32(1))
    return jnp.stack(a, -1), jnp.stack(b, -1)


def random_bits(key, num_blocks: int):
    """``(y0, y1)``: the two ``uint32`` words of blocks ``0..num_blocks-1`` of a key
    (counter ``(j, 0)`` for block ``j``), ``[num_blocks, *key_batch]``: a batch of
    keys (key data ``[*key_batch, 2]``) is a trailing axis, as in :func:`uniform`."""
    k0, k1 = _key_words(key)
    j = lax.iota(jnp.uint32, num_blocks).reshape((num_blocks,) + (1,) * k0.ndim)
    return threefry2x32(k0, k1, j, jnp.zeros_like(j))


def uniform(key, shape, dtype=jnp.float32):
    """Uniform numbers on ``[0, 1)`` of ``shape``: 23 random mantissa bits for float32
    (two numbers per block), 52 for float64 (one number per block); other float dtypes
    are rounded from float32.

    ``key`` may be a batch of keys (raw key data ``[*B, 2]`` or typed keys ``[*B]``);
    the result is then ``[*shape, *B]``, key axes LAST (contiguous: the layout a
    sampler with chains on the trailing axis wants), and ``[..., b]`` equals
    ``uniform(key[b], shape)`` exactly."""
    shape = tuple(int(d) for d in shape)
    m = math.prod(shape)
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float64:
        hi, lo = random_bits(key, m)
        bits = (hi.astype(jnp.uint64) << np.uint64(20)) | (lo >> np.uint32(12)).astype(jnp.uint64)  # 32 + 20 bits
        bits = bits | np.uint64(0x3FF0000000000000)
        u = lax.bitcast_convert_type(bits, jnp.float64) - 1.0
        return u.reshape(shape + u.shape[1:])
    half = -(-m // 2)
    y0, y1 = random_bits(key, half)
    bits = jnp.concatenate([y0, y1])[:m]
    u = lax.bitcast_convert_type((bits >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - 1.0
    return u.reshape(shape + u.shape[1:]).astype(dtype)


def logistic(key, shape, dtype=jnp.float32):
    """Standard logistic noise ``L = log(u / (1 - u))`` (``u`` from :func:`uniform`;
    ``-inf`` when ``u = 0``), same shapes and key batching as :func:`uniform`.
    ``u < sigmoid(x)`` is the same event as ``x > L``, so a heat-bath update becomes a
    comparison, with no transcendental in the sweep."""
    u = uniform(key, shape, dtype)
    return jnp.log(u / (1 - u))
