"""The engine protocol and the registry of engines by name (DESIGN.md §3)."""

from __future__ import annotations

import abc
import dataclasses
import json
from typing import Callable, ClassVar, Optional

import equinox as eqx
import jax

from isingattn.marginals import Marginals
from isingattn.model import IsingModel


class Engine(eqx.Module):
    """An inference engine: a configured, immutable object with
    ``marginals(model, *, key=None) -> Marginals``.

    Configuration lives in static fields, so engines are hashable and can sit in a
    model config. Engines use ``IsingModel``'s energy; none re-implements it.
    ``exact`` (class attribute) marks engines whose marginals are exact, so symmetry
    results (e.g. ``⟨s⟩ = 0`` at ``h = 0``) may be used instead of running them.
    """

    exact: ClassVar[bool] = False

    @abc.abstractmethod
    def marginals(self, model: IsingModel, *, key: Optional[jax.Array] = None) -> Marginals:
        ...


_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make an engine reachable as ``get(name, **config)``."""

    def deco(cls):
        _REGISTRY[name] = cls
        return cls

    return deco


def available() -> list[str]:
    """Names of the registered engines."""
    return sorted(_REGISTRY)


def get(name: str, **config) -> Engine:
    """Build a registered engine by name, e.g. ``get("exact", max_n=20)``."""
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; available: {', '.join(available())}.") from None
    return cls(**config)


def to_spec(engine: Engine) -> dict:
    """A JSON description ``{"name": ..., "config": {...}}`` that :func:`from_spec` rebuilds.

    Raises ``ValueError`` for an unregistered engine or a configuration that is not
    plain JSON (e.g. a ``DimodEngine`` wrapping a sampler object)."""
    names = [n for n, cls in _REGISTRY.items() if cls is type(engine)]
    if not names:
        raise ValueError(f"{type(engine).__name__} is not a registered engine; register it to save it in a config.")
    config = {f.name: getattr(engine, f.name) for f in dataclasses.fields(engine)}
    try:
        json.dumps(config)
    except TypeError as e:
        raise ValueError(f"engine {engine!r} has a configuration that is not plain JSON ({e}).") from None
    return {"name": min(names, key=len), "config": config}


def from_spec(spec: dict) -> Engine:
    """The engine described by :func:`to_spec`."""
    return get(spec["name"], **spec.get("config", {}))
