"""What the ``isingattn`` command and the scripts in ``examples/`` do with bad input: one line on
stderr (``<prog>: error: <message>``) and exit status 2, not a traceback.

Only the errors that bad input raises are caught: the library's :class:`~isingattn.IsingInputError`
and :class:`~isingattn.IsingTypeError`, a checkpoint that is missing or does not fit
(``CheckpointError``), a corpus that is missing or wrong (``DataError``, which an offline machine
without the Tiny Shakespeare corpus raises) and a refusal of the file system (``OSError``). A bug
still shows its traceback.

    from isingattn.models.app.cli_errors import one_line_errors

    with one_line_errors("train_shakespeare.py"):
        ...  # any expected error ends the script with one line and exit status 2
"""

from __future__ import annotations

import contextlib
import sys


def expected_errors() -> tuple:
    """The exception types that bad input raises (each reported in one line)."""
    from isingattn.errors import IsingInputError, IsingTypeError
    from isingattn.models.checkpoint import CheckpointError
    from isingattn.models.shakespeare import DataError

    return IsingInputError, IsingTypeError, CheckpointError, DataError, OSError


def message(error: BaseException) -> str:
    """The one line for ``error``: whitespace collapsed; an ``OSError`` as its reason and file name."""
    if isinstance(error, OSError):  # the file system refused (permissions, a full disk, a vanished file)
        text = f"{error.strerror or error}" + (f": {error.filename!r}" if error.filename else "")
    else:
        text = str(error)
    return " ".join(text.split())


def report(prog: str, error: BaseException) -> int:
    """Print ``<prog>: error: <message>`` on stderr; returns the exit status, 2."""
    print(f"{prog}: error: {message(error)}", file=sys.stderr, flush=True)
    return 2


@contextlib.contextmanager
def one_line_errors(prog: str):
    """Inside the block, an expected error (:func:`expected_errors`) ends the program with one line on
    stderr and exit status 2 (``SystemExit(2)``); any other exception passes through unchanged."""
    try:
        yield
    except expected_errors() as e:
        raise SystemExit(report(prog, e)) from None
