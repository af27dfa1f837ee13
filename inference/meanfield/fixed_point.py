"""Damped fixed-point iteration with implicit differentiation, per model of a batch:
the solver of every mean-field method (:mod:`isingattn.inference.meanfield.engine`).

``x ← x + d·(F(x) - x)`` until ``max |F(x) - x| ≤ tol`` per model; gradients by
``lax.custom_root``, whose tangent and adjoint systems ``(I - ∂F/∂x) z = b`` are solved
by the same damped iteration, so no iteration is stored.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


class DampedFixedPoint:
    """Damped iteration ``x ← x + d·(F(x) - x)`` (step ``d = 1 - damping``) per model of a
    batch, with gradients by ``lax.custom_root``. The leading ``nb`` axes of the state index models; a model stops
    moving once its residual ``max |F(x) - x|`` is ``≤ tol``, so each model's result and
    iteration count do not depend on the rest of the batch."""

    def __init__(self, step: float, tol: float, max_iter: int, nb: int):
        self.d, self.tol, self.max_iter, self.nb = step, tol, max_iter, nb

    def _per_model_max(self, x):
        return jnp.max(jnp.abs(x), axis=tuple(range(self.nb, x.ndim)))

    def _expand(self, flag, x):
        return flag.reshape(flag.shape + (1,) * (x.ndim - flag.ndim))

    def fixed_point(self, F, x0):
        """Returns ``(x*, (iterations, residual))``; ``x*`` is differentiable in whatever
        ``F`` closes over."""
        f = lambda x: F(x) - x
        x, (iters, res) = lax.custom_root(f, x0, self._solve, self._tangent_solve, has_aux=True)
        return x, lax.stop_gradient((iters.astype(jnp.int32), res))

    def _residual(self, step, x):
        """``max |F(x) - x| / max(1, max |x|)`` per model: absolute for magnetizations
        (|m| ≤ 1), relative for BP messages, which scale with the couplings (a float32
        message of size 50 cannot change by less than ~4e-6)."""
        return self._per_model_max(step) / jnp.maximum(1.0, self._per_model_max(x))

    def _solve(self, f, x0):
        d, tol = self.d, self.tol

        def cond(c):
            it, _, res, _ = c
            return (it < self.max_iter) & jnp.any(res > tol)

        def body(c):
            it, x, _, iters = c
            step = f(x)
            res = self._residual(step, x)
            move = res > tol
            x = jnp.where(self._expand(move, x), x + d * step, x)
            return it + 1, x, res, iters + move.astype(jnp.int32)

        batch = x0.shape[: self.nb]
        init = (jnp.int32(0), x0, jnp.full(batch, jnp.inf, x0.dtype), jnp.zeros(batch, jnp.int32))
        _, x, res, iters = lax.while_loop(cond, body, init)
        # A model that met the stop test has not moved since: the loop's residual is its state's, while a
        # recomputation outside the loop can differ by rounding (float32: ~1%) and cross tol. A model still
        # moving at max_iter gets the residual of the state it moved to.
        res = jnp.where(res <= tol, res, self._residual(f(x), x))
        # custom_root's JVP rule mishandles integer aux outputs (jax 0.10: int tangent
        # instead of float0), so the count travels as a float and is cast back outside.
        return x, (iters.astype(x.dtype), res)

    def _tangent_solve(self, g, y):
        """Solve ``g(z) = y`` with ``g = ∂F/∂x - I`` (linear), by the damped iteration
        ``z ← z + d·(g(z) - y)``: its error contracts by ``(1-d)I + d·∂F/∂x``, the same
        Jacobian as the forward iteration near its fixed point, so it converges when the
        forward pass did. ``custom_linear_solve`` makes it transposable (reverse mode)."""
        return lax.custom_linear_solve(g, y, solve=self._linear_solve, transpose_solve=self._linear_solve)

    def _linear_solve(self, matvec, b):
        d = self.d
        scale = self._per_model_max(b)
        tol = self.tol * scale  # relative to the right-hand side: the linear system scales with it

        def cond(c):
            it, _, res = c
            return (it < self.max_iter) & jnp.any(res > tol)

        def body(c):
            it, z, _ = c
            r = matvec(z) - b
            res = self._per_model_max(r)
            move = res > tol
            z = jnp.where(self._expand(move, z), z + d * r, z)
            return it + 1, z, res

        batch = b.shape[: self.nb]
        _, z, _ = lax.while_loop(cond, body, (jnp.int32(0), jnp.zeros_like(b), jnp.full(batch, jnp.inf, b.dtype)))
        # Keep only models whose linear system converged (see MeanField's docstring).
        res = self._per_model_max(matvec(z) - b)
        ok = (res <= 10 * tol) & jnp.all(jnp.isfinite(z), axis=tuple(range(self.nb, z.ndim)))
        return jnp.where(self._expand(ok, z), z, 0.0)
