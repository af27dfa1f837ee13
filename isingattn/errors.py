"""Exceptions raised for bad input. Each message says what was expected, what was
given, and how to fix it."""


class IsingInputError(ValueError):
    """A model, spin configuration or engine input is malformed."""


class IsingTypeError(TypeError):
    """An input has the wrong type (for example complex or non-array data)."""


class TooManySpinsError(IsingInputError):
    """An exact engine was asked for more spins than it can enumerate."""


class RunFolderError(IsingInputError):
    """A run folder cannot be used as asked: another process holds it, or it holds a run
    with a different configuration than the one requested."""


class TrainingDivergedError(IsingInputError):
    """Training produced a non-finite loss; the message names the step and the last finite loss."""
