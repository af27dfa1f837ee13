"""The engine protocol and the registry of engines by name (DESIGN.md §3)."""

from __future__ import annotations

import abc
import dataclasses
import inspect
import json
from typing import Callable, ClassVar, Optional

import warnings

import equinox as eqx
import jax
import numpy as np

from isingattn.causal import by_prefix
from isingattn.errors import IsingInputError, IsingTypeError
from isingattn.marginals import Marginals
from isingattn.model import IsingModel, is_traced
from isingattn.prng import check_key


class ConvergenceWarning(RuntimeWarning):
    """An engine's diagnostics flag part of its result as untrustworthy (an ``info`` flag is
    False for some models: a fixed point or chain that did not converge, a calibration that
    missed its target). Engine-specific categories subclass it."""


class Engine(eqx.Module):
    """An inference engine: a configured, immutable object with
    ``marginals(model, *, key=None) -> Marginals``.

    A template (DESIGN.md §3): :meth:`marginals` is implemented here, once, and an engine
    supplies only ``_marginals(model, key) -> Marginals`` (its algorithm, for a model that
    is not causal unless the engine declares ``native_causal``) and class flags. The
    protocol around it: the model type is checked (``IsingTypeError``), a key is required
    exactly when ``needs_key`` (``IsingInputError`` when missing, then
    :func:`isingattn.prng.check_key`), causal models go through
    :class:`isingattn.engine.CausalBuckets` unless ``native_causal``, a model with sparse
    couplings (:mod:`isingattn.sparse`) is given densified unless ``sparse_native``
    (:meth:`~isingattn.IsingModel.densified`: refused above 1 GiB), ``_marginals`` runs
    under ``eqx.filter_jit`` (unless ``jit`` is False: an engine that calls the host), and
    each ``(flag, category)`` of ``warn_flags`` that is False for some model warns, with
    ``_warning``'s message, when the flags are concrete.

    Configuration lives in static fields, so engines are hashable and can sit in a
    model config. Engines use ``IsingModel``'s energy; none re-implements it.
    ``exact`` (class attribute) marks engines whose marginals are exact, so symmetry
    results (e.g. ``⟨s⟩ = 0`` at ``h = 0``) may be used instead of running them.
    """

    exact: ClassVar[bool] = False
    needs_key: ClassVar[bool] = False  # a sampler: marginals needs a PRNG key
    native_causal: ClassVar[bool] = False  # _marginals solves causal models itself (else: CausalBuckets)
    sparse_native: ClassVar[bool] = False  # _marginals works on SparseCouplings itself (else: the dense form)
    jit: ClassVar[bool] = True  # _marginals is traced under eqx.filter_jit (False: it calls the host)
    warn_flags: ClassVar[tuple] = (("converged", ConvergenceWarning),)  # info flags that warn when False
    spin_info: ClassVar[tuple] = ()  # info entries with a trailing spin axis (NaN-padded across causal buckets)

    def marginals(self, model: IsingModel, *, key: Optional[jax.Array] = None) -> Marginals:
        """Spin statistics of ``model`` (batch ``[...]``, ``n`` spins): ``mean [..., n]`` (0 on
        inactive spins) and what the engine adds (``corr``, ``log_z``, ``samples``, ``info``).
        ``key`` (a JAX PRNG key) is required by sampling engines and ignored by the others."""
        model, key = self._checked(model, key)
        if model.is_sparse and (model.causal or not self.sparse_native):
            # one place for every engine without a sparse path (and for causal buckets,
            # which slice prefixes of a dense J): the dense form, refused when too big
            model = model.densified(owner=type(self).__name__)
        engine = self._prepare(model)
        run = engine
        if model.causal and not engine.native_causal:
            run = CausalBuckets(engine)
        out = jit_call(run, "_marginals", model, key) if run.jit else run._marginals(model, key)
        engine._warn(out.info)
        return out

    def prepared(self, model: IsingModel) -> "Engine":
        """This engine with what it reads from a concrete ``model`` resolved (Banded's
        bandwidth, Gibbs' colour classes), for running it under ``jax.jit`` on models of the
        same structure, where those values are traced. Outside jit ``marginals`` does this
        itself."""
        if not isinstance(model, IsingModel):
            raise IsingTypeError(f"{type(self).__name__}.prepared: model must be an isingattn.IsingModel; got "
                                 f"{type(model).__name__}.")
        if model.is_sparse and (model.causal or not self.sparse_native):
            model = model.densified(owner=type(self).__name__)
        return self._prepare(model)

    def _checked(self, model, key, method: str = "marginals"):
        """The protocol's input checks: ``(model, key)``, the key as one threefry key (None
        for an engine that does not sample). ``method`` names the caller in messages."""
        name = type(self).__name__
        if not isinstance(model, IsingModel):
            raise IsingTypeError(f"{name}.{method}: model must be an isingattn.IsingModel; got {type(model).__name__}. "
                                 "Build one with IsingModel(h, J, beta).")
        if not self.needs_key:
            return model, None
        if key is None:
            raise IsingInputError(f"{name}.{method}: {name} samples, so it needs a PRNG key; got key=None. "
                                  "Pass key=jax.random.key(0) (the same key gives the same result).")
        return model, check_key(key, owner=name)

    def _prepare(self, model: IsingModel) -> "Engine":
        """Host-side work on the model before tracing (eager checks of concrete values, a
        colouring of ``J``): the engine to run. Default: ``self``."""
        return self

    @abc.abstractmethod
    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        """The algorithm: checked ``model`` (not causal unless ``native_causal``), ``key`` a
        threefry key or None."""

    def _warning(self, flag: str, info: dict, bad: int, total: int) -> str:
        """The message of a warning for ``info[flag]`` False in ``bad`` of ``total`` models."""
        return (f"{type(self).__name__}: info[{flag!r}] is False for {bad} of {total} model(s); "
                "their results are not trustworthy.")

    def failed_checks(self, info: dict) -> list:
        """``[(category, message)]``, one per flag of ``warn_flags`` that is False for some model of
        ``info`` (concrete flags only: under ``jit`` they are traced, and checked after the call)."""
        out = []
        for flag, category in self.warn_flags:
            ok = info.get(flag) if isinstance(info, dict) else None
            if ok is None or is_traced(ok):
                continue
            ok = np.asarray(ok)
            if not ok.all():
                out.append((category, self._warning(flag, info, int((~ok).sum()), ok.size)))
        return out

    def _warn(self, info: dict) -> None:
        """One warning per flag of ``warn_flags`` that is False for some model, when concrete."""
        for category, message in self.failed_checks(info):
            warnings.warn(message, category, stacklevel=5)  # the caller of marginals (each method call adds equinox's wrapper frame)


def check_draw_call(model, num_samples, key, owner: str):
    """The checks of an exact sampler's call (``sample_banded``, ``sample_junction_tree``): an
    :class:`IsingModel` that is not causal, a positive count, one PRNG key. Returns ``(S, key)``."""
    from isingattn import validate as V

    if not isinstance(model, IsingModel):
        raise IsingTypeError(f"{owner}: model must be an isingattn.IsingModel; got {type(model).__name__}.")
    if model.causal:
        raise IsingInputError(f"{owner}: causal models are not supported; give each query its own model "
                              "(a mask) instead.")
    return V.positive_int("num_samples", num_samples, owner=owner), check_key(key, owner=owner)


class CausalBuckets(Engine):
    """``CausalBuckets(child)``: a causal model solved by ``child`` bucket by bucket
    (:func:`by_prefix`; bucket ``b`` gets ``fold_in(key, b)``), each bucket a non-causal
    model on its own spins. A model that is not causal goes to ``child`` unchanged.

    Applied by ``Engine.marginals`` to every engine without a native causal path; it can
    also be used directly: ``CausalBuckets(Gibbs()).marginals(model, key=key)``. The
    protocol flags (key, jit, warnings) are the child's."""

    child: Engine
    native_causal: ClassVar[bool] = True

    @property
    def needs_key(self) -> bool:
        return self.child.needs_key

    @property
    def jit(self) -> bool:
        return self.child.jit

    @property
    def exact(self) -> bool:
        return self.child.exact

    def _prepare(self, model: IsingModel) -> Engine:
        return CausalBuckets(self.child._prepare(model))

    def _marginals(self, model: IsingModel, key: Optional[jax.Array]) -> Marginals:
        child = self.child
        if not model.causal:
            return child._marginals(model, key)
        return by_prefix(child._marginals, model, key, spin_info=child.spin_info)

    @property
    def warn_flags(self) -> tuple:
        return self.child.warn_flags

    def _warning(self, flag: str, info: dict, bad: int, total: int) -> str:
        return self.child._warning(flag, info, bad, total)


@eqx.filter_jit
def jit_call(engine: Engine, method: str, model: IsingModel, key):
    """``engine.<method>(model, key)`` compiled: the one jit arrangement of the engines
    (once per engine configuration, method, model structure, i.e. shapes, dtypes, mask
    and causal, and key kind)."""
    return getattr(engine, method)(model, key)


# The built-in engines by name, as "module:attribute": a module is imported when its engine
# is first asked for, so `import isingattn` and `get("exact")` load no sampler library.
_BUILTIN = {
    "exact": "isingattn.inference.exact.engine:Exact",
    "banded": "isingattn.inference.banded.engine:Banded",
    "junction-tree": "isingattn.inference.junction_tree.engine:JunctionTree",
    "planar": "isingattn.inference.planar.engine:Planar",
    "meanfield": "isingattn.inference.meanfield.engine:MeanField",
    "meanfield-naive": "isingattn.inference.meanfield.engine:meanfield_naive",
    "meanfield-tap": "isingattn.inference.meanfield.engine:meanfield_tap",
    "meanfield-bp": "isingattn.inference.meanfield.engine:meanfield_bp",
    "gibbs": "isingattn.inference.mcmc.gibbs:Gibbs",
    "sqa": "isingattn.inference.mcmc.sqa:SQA",
    "ais": "isingattn.inference.mcmc.ais:AIS",
    "pa": "isingattn.inference.mcmc.pa:PopulationAnnealing",
    "swendsen-wang": "isingattn.inference.mcmc.swendsen_wang:SwendsenWang",
    "pt": "isingattn.inference.mcmc.pt:ParallelTempering",
    "dqa": "isingattn.inference.dqa.engine:DQA",
    "dimod": "isingattn.inference.dimod.engine:DimodEngine",
}
_REGISTRY: dict[str, object] = dict(_BUILTIN)  # name -> "module:attribute", or the factory itself


def register(name: str) -> Callable[[type], type]:
    """Class decorator: make an engine (or a factory returning one) reachable as
    ``get(name, **config)``."""

    def deco(cls):
        _REGISTRY[name] = cls
        return cls

    return deco


def _resolve(entry):
    """The factory a registry entry names (importing its module on first use)."""
    if not isinstance(entry, str):
        return entry
    import importlib

    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


def available() -> list[str]:
    """Names of the registered engines (no engine module is imported)."""
    return sorted(_REGISTRY)


def _lookup(name) -> Callable[..., Engine]:
    try:
        entry = _REGISTRY[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name (e.g. a list from JSON)
        raise IsingInputError(f"unknown engine {name!r}; available: {', '.join(available())}.") from None
    return _resolve(entry)


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


def parse_settings(text: str, what: str = "settings") -> dict:
    """Engine settings written as text: ``"num_samples=200,schedule=colored"`` ->
    ``{"num_samples": 200, "schedule": "colored"}``. Comma-separated ``key=value`` pairs; a value
    is read as JSON where it parses (numbers, ``true``, ``null``, lists), else as a string; an
    empty text is ``{}``. A malformed pair raises :class:`IsingInputError` whose message starts
    with ``what`` (e.g. a command-line option)."""
    out = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise IsingInputError(f"{what} expects key=value pairs separated by commas, e.g. "
                                  f"num_samples=200,num_chains=4; got {item!r}.")
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v.strip()
    return out


def from_text(name: str, text: str = "", what: str = "settings") -> tuple[Engine, dict]:
    """The engine ``name`` built with the settings ``text`` (:func:`parse_settings`; ``what`` names
    the text in its message), and those settings as a dict: ``from_text("gibbs", "num_chains=8")``.

    Every setting is checked before the engine is returned, so a bad one surfaces now rather
    than mid-run: a dimod sampler's own parameters (``sample_kwargs``, which only the sampler
    can check) by one read of a one-spin model. Raises :class:`IsingInputError` for a malformed
    text, an unknown name or setting, or settings the engine or its sampler refuses (an engine
    may raise :class:`IsingTypeError` for a setting of the wrong type)."""
    settings_ = parse_settings(text, what)
    engine = get(name, **settings_)
    sample_kwargs = dict(getattr(engine, "sample_kwargs", ()))
    if sample_kwargs:
        import dimod

        try:
            engine.sampler.sample(dimod.BinaryQuadraticModel({0: 0.0}, {}, 0.0, "SPIN"), num_reads=1,
                                  **sample_kwargs)
        except Exception as e:  # any sampler's refusal, which would otherwise surface mid-run
            raise IsingInputError(f"{type(engine.sampler).__name__} refused these settings "
                                  f"({type(e).__name__}: {e}).") from None
    return engine, settings_


def to_spec(engine: Engine) -> dict:
    """A JSON description ``{"name": ..., "config": {...}}`` that :func:`from_spec` rebuilds.

    Raises ``ValueError`` for an unregistered engine or a configuration that is not
    plain JSON (e.g. a ``DimodEngine`` wrapping a sampler object)."""
    cls = type(engine)
    here = f"{cls.__module__}:{cls.__qualname__}"
    names = [n for n, entry in _REGISTRY.items() if entry is cls or entry == here]
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
