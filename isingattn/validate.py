"""Checks of configuration values (engine settings), with one message style.

Every check takes the setting's ``name`` (named in the message) and an optional
``owner`` (e.g. ``"Gibbs"``, which prefixes the message), returns the value as a
plain Python ``int`` / ``float`` / ``bool``, and raises

* :class:`ConfigTypeError` for a value of the wrong type (a string, a bool or a float
  where a count belongs, ...): both an ``IsingTypeError`` and an ``IsingInputError``,
  so callers catching either (or ``TypeError`` / ``ValueError``) see it;
* ``IsingInputError`` for a value of the right type out of range (``0`` reads, a
  negative or non-finite tolerance, ...).

Numbers may be Python or NumPy scalars; bools are never numbers here (``True`` is not
a count), and JAX arrays are refused (engine settings are static and hashable).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from isingattn.errors import IsingInputError, IsingTypeError

__all__ = ["ConfigTypeError", "nan_where", "plain", "positive_int", "nonneg_int", "positive_float", "float_in", "choice", "boolean"]


class ConfigTypeError(IsingInputError, IsingTypeError):
    """A setting of the wrong type, e.g. the string ``"10"`` where a count belongs."""


def plain(value):
    """A NumPy number or bool as the Python scalar (``np.int64(3)`` -> ``3``); anything
    else unchanged. A field converter for static settings: they stay hashable, plain
    JSON for ``engine.to_spec``, and free of equinox's "JAX array set as static" warning."""
    return value.item() if isinstance(value, (np.bool_, np.number)) else value


def _prefix(owner: Optional[str]) -> str:
    return f"{owner}: " if owner else ""


def _given(value, number: bool = True) -> str:
    """What was given, with a word on the usual mistakes (``number``: a number was expected)."""
    if isinstance(value, str):
        return f"the string {value!r} (pass the {'number' if number else 'value'} itself, not a string)"
    if number and isinstance(value, (bool, np.bool_)):
        return f"bool {value!r} (True/False is not a number here)"
    return f"{type(value).__name__} {value!r}"


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _integer(name, value, lo: int, hi: Optional[int], owner) -> int:
    want = f"an integer ≥ {lo}" if hi is None else f"an integer in {lo}..{hi}"
    if not _is_int(value):
        extra = " (counts are whole numbers)" if isinstance(value, (float, np.floating)) else ""
        raise ConfigTypeError(f"{_prefix(owner)}{name} must be {want}; got {_given(value)}{extra}.")
    if value < lo or (hi is not None and value > hi):
        raise IsingInputError(f"{_prefix(owner)}{name} must be {want}; got {int(value)}.")
    return int(value)


def positive_int(name: str, value, *, owner: Optional[str] = None, hi: Optional[int] = None) -> int:
    """``value`` as an ``int ≥ 1`` (and ``≤ hi`` if given): counts such as reads, chains, iterations."""
    return _integer(name, value, 1, hi, owner)


def nonneg_int(name: str, value, *, owner: Optional[str] = None, hi: Optional[int] = None) -> int:
    """``value`` as an ``int ≥ 0`` (and ``≤ hi`` if given): counts that may be zero, e.g. warmup sweeps."""
    return _integer(name, value, 0, hi, owner)


def float_in(name: str, value, lo: float = -math.inf, hi: float = math.inf, *, owner: Optional[str] = None,
             lo_open: bool = False, hi_open: bool = False) -> float:
    """``value`` as a finite ``float`` in the interval from ``lo`` to ``hi`` (each end
    closed unless ``lo_open`` / ``hi_open``; an infinite end means unbounded)."""
    parts = []
    if lo > -math.inf:
        parts.append(f"{'>' if lo_open else '≥'} {lo:g}")
    if hi < math.inf:
        parts.append(f"{'<' if hi_open else '≤'} {hi:g}")
    want = "a finite number" + (" " + " and ".join(parts) if parts else "")
    if not _is_real(value):
        raise ConfigTypeError(f"{_prefix(owner)}{name} must be {want}; got {_given(value)}.")
    x = float(value)
    ok = math.isfinite(x) and (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
    if not ok:
        raise IsingInputError(f"{_prefix(owner)}{name} must be {want}; got {value!r}.")
    return x


def positive_float(name: str, value, *, owner: Optional[str] = None) -> float:
    """``value`` as a finite ``float > 0``: tolerances, thresholds, durations, temperatures."""
    return float_in(name, value, 0.0, owner=owner, lo_open=True)


def choice(name: str, value, options: Sequence, *, owner: Optional[str] = None):
    """``value`` if it is one of ``options`` (compared by type and ``==``), else ``IsingInputError``."""
    try:
        ok = any(type(value) is type(o) and value == o for o in options)
    except Exception:  # e.g. an array compared with ==
        ok = False
    if not ok:
        raise IsingInputError(f"{_prefix(owner)}{name} must be one of {tuple(options)}; got {value!r}.")
    return value


def boolean(name: str, value, *, owner: Optional[str] = None) -> bool:
    """``value`` as a ``bool`` (Python or NumPy); ints and strings are refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigTypeError(f"{_prefix(owner)}{name} must be True or False; got {_given(value, number=False)}.")
    return bool(value)


def nan_where(x, bad):
    """The traced form of a value check: ``x`` with every entry NaN where ``bad`` (a traced
    boolean, broadcast against ``x``) holds, else ``x`` unchanged.

    Concrete inputs are checked eagerly and raise ``IsingInputError`` with the check's message.
    Under ``jit`` a raising check needs a host callback, and a program with a host callback is
    never stored by JAX's persistent compilation cache; a failed check instead turns the
    values it guards into NaN, which every result computed from them carries, so it is never
    silent garbage. Run the same call outside ``jit`` to see the message."""
    import jax.numpy as jnp

    return jnp.where(bad, jnp.asarray(jnp.nan, dtype=jnp.result_type(x)), x)
