"""What Gibbs, SQA and the samplers built on them share as engines: the order of a sweep.

:class:`ColouredSweep` resolves ``schedule``/``colors`` from the concrete couplings once
(:meth:`_prepare`, host side), and cuts the colour classes to the spins of the model being
solved (:meth:`_sweep_classes`), so that a causal bucket, whose model holds spins
``0..n-1`` only, sweeps exactly its own spins: the classes of a proper colouring restricted
to a prefix stay a proper colouring.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

from isingattn.engine import Engine
from isingattn.inference.mcmc.coloring import schedule_classes
from isingattn.model import IsingModel


@functools.lru_cache(maxsize=32)
def _with_classes(engine: Engine, classes: tuple) -> Engine:
    """``engine`` set to sweep by ``classes``, once per engine and classes."""
    return dataclasses.replace(engine, schedule="colored", colors=classes)


class ColouredSweep(Engine):
    """Base of the samplers that sweep spins class by class. A subclass declares the fields
    ``schedule`` (``"systematic"`` or ``"colored"``) and ``colors`` (a tuple of classes or
    None) and passes :meth:`_sweep_classes` to its kernel."""

    def _prepare(self, model: IsingModel) -> Engine:
        """The update classes, from the concrete ``J`` (:func:`schedule_classes`). A dense
        'colored' run becomes the systematic one and shares its compiled program; sparse
        couplings always sweep by classes."""
        classes = schedule_classes(self.schedule, model.J, self.colors)
        if classes is None:
            return dataclasses.replace(self, schedule="systematic", colors=None)
        try:  # a lattice's classes are thousands of indices, which equinox walks on every replace (ms)
            return _with_classes(self, classes)
        except TypeError:  # an engine with array fields (an initial state) is not hashable
            return dataclasses.replace(self, schedule="colored", colors=classes)

    def _sweep_classes(self, model: IsingModel) -> Optional[tuple]:
        """The classes of this run cut to ``model``'s spins ``0..n-1`` (None: systematic)."""
        if self.schedule != "colored" or self.colors is None:
            return None
        return tuple(c for c in (tuple(i for i in c if i < model.n) for c in self.colors) if c)
