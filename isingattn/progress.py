"""Progress bars: one rule for every tqdm bar of the library, the Transformer's training and the CLI.

A bar is drawn only when its stream (stderr) is a terminal. Written to a log, a pipe or a
notebook's captured stream, a bar is a line of carriage returns, and nested bars (the training
loop inside the loop over runs) add cursor-movement escape codes; so there they are off, whatever
``progress`` says, and only ``progress=False`` turns them off on a terminal.

    from isingattn.progress import bar

    for step in bar(range(n), progress=progress, desc="train"):
        ...
"""

from __future__ import annotations

import sys
from typing import Optional


def is_terminal(stream=None) -> bool:
    """Whether ``stream`` (default ``sys.stderr``, where tqdm writes) is an interactive terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # None (pythonw), a closed stream, an object without isatty
        return False


def disabled(progress: Optional[bool] = None, stream=None) -> bool:
    """tqdm's ``disable`` for a ``progress`` option: ``False`` never draws; ``True`` and ``None`` draw
    only when ``stream`` (default stderr) is a terminal."""
    return (progress is not None and not progress) or not is_terminal(stream)


def bar(iterable=None, *, progress: Optional[bool] = None, **kwargs):
    """``tqdm(iterable, **kwargs)`` with ``disable`` from :func:`disabled`. The plain bar, not
    ``tqdm.auto``'s: a bar is drawn on a terminal only, and ``tqdm.auto`` warns in a Jupyter
    kernel without ipywidgets (the docs' tutorials) even when the bar is disabled."""
    from tqdm import tqdm

    return tqdm(iterable, disable=disabled(progress, kwargs.get("file")), **kwargs)
