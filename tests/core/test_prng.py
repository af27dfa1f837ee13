"""isingattn.prng: the unrolled Threefry-2x32 is jax's hash bit for bit, and the
uniform / logistic numbers have the right range, moments and key semantics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry2x32_p

from isingattn import prng


def test_threefry_equals_jax_primitive():
    kd = jax.random.key_data(jax.random.PRNGKey(1234))
    x0 = jnp.arange(257, dtype=jnp.uint32) * np.uint32(2654435761)
    x1 = jnp.arange(257, dtype=jnp.uint32) ^ np.uint32(0xDEADBEEF)
    ref = threefry2x32_p.bind(kd[0], kd[1], x0, x1)
    ours = jax.jit(prng.threefry2x32)(kd[0], kd[1], x0, x1)
    for r, o in zip(ref, ours):
        np.testing.assert_array_equal(np.asarray(r), np.asarray(o))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_and_logistic(dtype):
    key = jax.random.key(0)  # typed keys and raw uint32[2] keys both work
    u = np.asarray(prng.uniform(key, (200, 500), dtype))
    assert u.dtype == dtype and u.shape == (200, 500)
    assert u.min() >= 0 and u.max() < 1
    n = u.size  # mean and variance within 5 standard errors of 1/2 and 1/12
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt(1 / 180 / n)
    # float64 keeps 52 random bits: far more distinct values than float32's 2^23 grid
    if dtype == np.float64:
        assert np.any(u * 2**23 != np.floor(u * 2**23))
    L = np.asarray(prng.logistic(jax.random.PRNGKey(1), (100_000,), dtype))
    assert abs(L.mean()) < 5 * np.sqrt(np.pi**2 / 3 / L.size)
    assert abs(L.var() / (np.pi**2 / 3) - 1) < 0.03


def test_same_key_same_numbers_and_batched_keys_differ():
    k = jax.random.PRNGKey(7)
    a, b = prng.uniform(k, (33,)), prng.uniform(k, (33,))
    np.testing.assert_array_equal(a, b)
    many = jax.vmap(lambda kk: prng.uniform(kk, (33,)))(jax.random.split(k, 4))
    assert len({tuple(np.asarray(r)) for r in many}) == 4
    assert len(set(np.asarray(a))) == 33  # odd sizes use both words of the last block but one


def test_split_equals_jax_and_batched_keys_are_a_trailing_axis():
    keys = jax.random.split(jax.random.PRNGKey(5), 7)  # raw uint32 [7, 2]
    a, b = prng.split(keys)
    ref = jax.vmap(jax.random.split)(keys)
    np.testing.assert_array_equal(a, ref[:, 0])
    np.testing.assert_array_equal(b, ref[:, 1])
    for dtype in (np.float32, np.float64):
        batched = prng.logistic(keys, (3, 5), dtype)  # [3, 5, 7]: key axis last
        one_by_one = jax.vmap(lambda k: prng.logistic(k, (3, 5), dtype))(keys)
        np.testing.assert_array_equal(np.moveaxis(np.asarray(batched), -1, 0), one_by_one)
