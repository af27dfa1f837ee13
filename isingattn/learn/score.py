"""Scores of a model on data: the log-likelihood (exact where log Z is, else an estimate with
its standard error) and the pseudo-log-likelihood.

``log p(s) = -β E(s) - log Z``. ``log Z`` comes from an exact engine where one is
affordable (Exact for small ``n``, Banded for couplings banded in the spin order:
:func:`~isingattn.learn.exact_ml.exact_engine`), otherwise from AIS (``inference.get("ais")``,
which needs a ``key``) or the engine given. An estimated ``log Z`` shifts every sample's
score by the same amount, so its standard error (``log_z_se``) is reported apart from the
spread of the scores over the samples (``sample_se``).

The pseudo-log-likelihood is ``Σ_i log p(s_i | s_-i)`` with
``p(s_i | s_-i) = σ(2β s_i (h_i + Σ_j J_ij s_j))`` (:func:`conditional_log_probs`, also the
objective of ``method="plm"``): no ``log Z`` needed, O(n²) or O(E) per sample.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.energy import energy, local_field
from isingattn.engine import Engine
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.model import IsingModel
from isingattn.sparse import SparseCouplings
from isingattn.learn.data import check_weights, chunk_rows, padded_chunks, spins_from_data
from isingattn.learn.exact_ml import exact_engine

__all__ = ["LogLikelihood", "conditional_log_probs", "spin_log_conditionals", "log_likelihood", "pseudo_log_likelihood"]


class LogLikelihood(NamedTuple):
    """The result of :func:`log_likelihood`.

    * value: the (weighted) mean of ``log p(s)`` over the samples, ``[]``, or ``[S]`` per sample.
    * log_z: the ``log Z`` used, ``[]``.
    * log_z_se: its standard error (0 when exact).
    * kind: ``info["log_z_kind"]`` of the engine: ``"exact"``, ``"estimate"``, ...
    * sample_se: the standard error of the mean over the samples (their spread / ``sqrt(S)``;
      with weights, ``sqrt(Σ p² (x - mean)²)``), ``[]``.
    * engine: the engine's class name.
    """

    value: jax.Array
    log_z: jax.Array
    log_z_se: jax.Array
    kind: str
    sample_se: jax.Array
    engine: str


def spin_log_conditionals(s, field, beta):
    """``log p(s_i | s_-i) = log σ(2β s_i f_i) = -softplus(-2β s_i f_i)`` from the local
    fields ``f = h + J s``; any layout (``s`` and ``field`` of one shape, or broadcast)."""
    return -jax.nn.softplus(-2 * beta * s * field)


def conditional_log_probs(h, J, beta, s):
    """``log p(s_i | s_-i) = -softplus(-2β s_i (h_i + Σ_j J_ij s_j))``.

    h: ``[..., n]``; J: ``[..., n, n]`` or :class:`~isingattn.sparse.SparseCouplings`;
    s: ``[..., n]`` spins (broadcast) -> ``[..., n]``."""
    return spin_log_conditionals(s, local_field(h, J, s), beta)


def _check_model(model, what: str) -> IsingModel:
    if not isinstance(model, IsingModel):
        raise IsingTypeError(f"{what}: model must be an IsingModel; got {type(model).__name__}.")
    if model.batch_shape != () or model.mask is not None or model.causal:
        raise IsingInputError(f"{what} scores one model: got batch shape {model.batch_shape}"
                              f"{', a mask' if model.mask is not None else ''}{', causal' if model.causal else ''}. "
                              "Score the members one at a time (e.g. IsingModel(model.h[k], model.J[k], model.beta)).")
    return model


def _data(model: IsingModel, samples, weights, what: str):
    s = spins_from_data(samples, min_samples=1)
    if s.shape[1] != model.n:
        raise IsingInputError(f"{what}: samples have {s.shape[1]} columns but the model has n = {model.n} spins.")
    S = s.shape[0]
    p = np.ones(S) if weights is None else check_weights(weights, S, min_positive=1)
    return jnp.asarray(s), jnp.asarray(p / p.sum(), model.dtype)


def _per_sample(fn_id, h, J, beta, xs):
    """Per-sample scores ``[K, B]`` of int8 chunks ``xs [K, B, n]``."""
    def one(x):
        s = x.astype(h.dtype)
        if fn_id == "pll":
            return conditional_log_probs(h, J, beta, s).sum(-1)
        return -beta * energy(h, J, s)

    return jax.lax.map(one, xs)


_per_sample = jax.jit(_per_sample, static_argnums=0)


def _scores(kind: str, model: IsingModel, s):
    S, n = s.shape
    d = model.J.graph.max_degree if isinstance(model.J, SparseCouplings) else 1
    B = chunk_rows(S, 2 * n * d)
    out = _per_sample(kind, model.h, model.J, model.beta, padded_chunks(s, B, 1))
    return out.reshape(-1)[:S]


def _reduce(x, p, per_sample: bool):
    mean = p @ x
    se = jnp.sqrt(jnp.sum(p * p * (x - mean) ** 2))
    return (x if per_sample else mean), se


def pseudo_log_likelihood(model: IsingModel, samples, *, weights=None, per_sample: bool = False):
    """``Σ_i log p(s_i | s_-i)`` of each sample under ``model`` (module docstring).

    Args:
        model: one :class:`~isingattn.IsingModel` (dense or sparse couplings).
        samples: ``[S, n]`` spins (±1, or 0/1 converted with a warning).
        weights: optional ``[S]`` non-negative weights (counts).
        per_sample: return ``[S]`` instead of the weighted mean.
    Returns:
        ``[]`` (the weighted mean) or ``[S]``.
    """
    model = _check_model(model, "pseudo_log_likelihood")
    s, p = _data(model, samples, weights, "pseudo_log_likelihood")
    x = _scores("pll", model, s)
    return x if per_sample else p @ x


def _engine(model: IsingModel, engine, key) -> Engine:
    from isingattn import inference

    if engine is None:
        eng = exact_engine(model.n, J=model.J)
        if eng is not None:
            return eng
        if key is None:
            raise IsingInputError(
                f"log_likelihood: no exact log Z is affordable for this model (n = {model.n}, couplings not banded "
                "narrowly enough in the spin order), so it is estimated by AIS, which needs a key: pass "
                "key=jax.random.key(0), or engine=... with a log Z of your choice.")
        return inference.get("ais")
    if isinstance(engine, str):
        return inference.get(engine)
    if isinstance(engine, Engine):
        return engine
    raise IsingTypeError(f"log_likelihood: engine must be None, an engine name or an Engine; got {type(engine).__name__}.")


def log_likelihood(model: IsingModel, samples, *, weights=None, per_sample: bool = False,
                   engine: Union[None, str, Engine] = None, key: Optional[jax.Array] = None) -> LogLikelihood:
    """``log p(s) = -β E(s) - log Z`` of the samples under ``model``.

    Args:
        model: one :class:`~isingattn.IsingModel`.
        samples: ``[S, n]`` spins (±1, or 0/1 converted with a warning).
        weights: optional ``[S]`` non-negative weights (counts): a weighted mean.
        per_sample: ``value`` per sample ``[S]`` instead of the mean.
        engine: where ``log Z`` comes from: None (exact where affordable, else AIS), a name
            for ``inference.get`` or an engine; it must return ``log_z``.
        key: for a sampling engine (AIS).
    Returns:
        :class:`LogLikelihood`; ``kind`` says whether ``log Z`` is exact or an estimate
        (with ``log_z_se``).
    """
    model = _check_model(model, "log_likelihood")
    s, p = _data(model, samples, weights, "log_likelihood")
    eng = _engine(model, engine, key)
    if getattr(eng, "needs_key", False) and key is None:
        raise IsingInputError(f"log_likelihood: {type(eng).__name__} samples, so it needs key=jax.random.key(...).")
    m = eng.marginals(model, key=key if getattr(eng, "needs_key", False) else None)
    if m.log_z is None:
        raise IsingInputError(f"log_likelihood: {type(eng).__name__} gives no log Z; use an engine that does (Exact, "
                              "Banded, AIS, PT, MeanField).")
    kind = str(m.info.get("log_z_kind", "exact" if getattr(eng, "exact", False) else "estimate"))
    se = jnp.asarray(m.info.get("log_z_se", 0.0), model.dtype)
    x = _scores("energy", model, s) - m.log_z
    value, sample_se = _reduce(x, p, per_sample)
    return LogLikelihood(value, m.log_z, se, kind, sample_se, type(eng).__name__)
