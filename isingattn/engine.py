"""The engine protocol and the registry of engines by name (DESIGN.md §3)."""

from __future__ import annotations

import abc
import dataclasses
import inspect
import json
from typing import Callable, ClassVar, Optional

import equinox as eqx
import jax

from isingattn.errors import IsingInputError
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


def _lookup(name) -> Callable[..., Engine]:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name (e.g. a list from JSON)
        raise IsingInputError(f"unknown engine {name!r}; available: {', '.join(available())}.") from None


def _keywords(factory) -> Optional[list[str]]:
    """The keyword names ``factory`` accepts, or None when it takes ``**kwargs``."""
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def settings(name: str) -> Optional[list[str]]:
    """The configuration keys of engine ``name`` (``get(name, **config)``), or None when it
    passes arbitrary keywords on (e.g. ``dimod``, whose extra keywords go to the sampler)."""
    factory = _lookup(name)
    keys = _keywords(factory)
    if keys is None and not isinstance(factory, type):
        # a factory such as meanfield-bp(**config) -> MeanField: list what the built class takes
        keys = _keywords(type(factory()))
    return keys


def get(name: str, **config) -> Engine:
    """Build a registered engine by name, e.g. ``get("exact", max_n=20)``.

    Raises :class:`IsingInputError` for an unknown name (listing the registered ones) or
    an unknown configuration key (listing the engine's settings)."""
    factory = _lookup(name)
    keys = _keywords(factory)
    if keys is None and not isinstance(factory, type):
        keys = settings(name)
    unknown = [] if keys is None else sorted(set(config) - set(keys))
    if unknown:
        raise IsingInputError(f"engine {name!r} has no setting {', '.join(map(repr, unknown))}; "
                              f"its settings are: {', '.join(keys)}.")
    return factory(**config)


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
    """The engine described by :func:`to_spec`; a malformed spec raises :class:`IsingInputError`."""
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise IsingInputError(f'an engine spec is {{"name": <registry name>, "config": {{...}}}}; got {spec!r}.')
    config = spec.get("config", {})
    if not isinstance(config, dict):
        raise IsingInputError(f"the config of engine spec {spec['name']!r} must be a dict of settings; got {config!r}.")
    return get(spec["name"], **config)
