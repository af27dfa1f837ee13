"""JAX's persistent compilation cache for the library's programs.

An engine's first call in a process is mostly XLA compilation. With the cache on, a later
process loads the compiled program from disk instead. One call turns it on::

    import isingattn
    isingattn.enable_compilation_cache()          # ~/.cache/isingattn/jax, or $ISINGATTN_JAX_CACHE

Setting the environment variable ``ISINGATTN_JAX_CACHE`` to a folder turns it on when
``isingattn`` is imported (``0``, ``off`` or ``none`` leave it off); the ``isingattn`` command
line turns it on by default, in the same folder.
"""

from __future__ import annotations

import os
from typing import Optional, Union

from isingattn.errors import IsingInputError, IsingTypeError

__all__ = ["ENV", "cache_dir_from_env", "default_cache_dir", "enable_compilation_cache"]

ENV = "ISINGATTN_JAX_CACHE"
_OFF = ("0", "off", "none", "false")


def default_cache_dir() -> str:
    """``~/.cache/isingattn/jax`` (under ``$XDG_CACHE_HOME`` when set)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "isingattn", "jax")


def cache_dir_from_env(default: Optional[str] = None) -> Optional[str]:
    """The folder ``$ISINGATTN_JAX_CACHE`` names; ``default`` when it is unset or empty; None
    when it says off (``0``, ``off``, ``none``, ``false``)."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return default
    return None if value.lower() in _OFF else value


def enable_compilation_cache(path: Union[str, os.PathLike, None] = None, *,
                             min_compile_time_secs: float = 0.0) -> str:
    """Turn on JAX's persistent compilation cache for this process, and return its folder.

    Args:
        path: the folder (created if missing). None: ``$ISINGATTN_JAX_CACHE`` when it names a
            folder, else ``~/.cache/isingattn/jax``.
        min_compile_time_secs: programs that compiled faster than this are not stored
            (0 stores every program: an engine's first call is many small programs).

    The cache is keyed by the program, the JAX version and the device, so a stale entry is
    never used for another program. Takes effect for programs compiled after the call.
    Raises :class:`IsingInputError` when the folder cannot be created or written.
    """
    if path is None:
        path = cache_dir_from_env(default_cache_dir()) or default_cache_dir()
    if not isinstance(path, (str, os.PathLike)):
        raise IsingTypeError(f"enable_compilation_cache: path must be a folder path (str or os.PathLike) or None; "
                             f"got {type(path).__name__}.")
    if isinstance(min_compile_time_secs, bool) or not isinstance(min_compile_time_secs, (int, float)) \
            or not min_compile_time_secs >= 0:
        raise IsingInputError(f"enable_compilation_cache: min_compile_time_secs must be a number ≥ 0; "
                              f"got {min_compile_time_secs!r}.")
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise IsingInputError(f"enable_compilation_cache: cannot create the cache folder {path!r} ({e}).") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise IsingInputError(f"enable_compilation_cache: the cache folder {path!r} is not writable.")
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_secs))
    compilation_cache.reset_cache()  # a cache already opened in this process moves to the new folder
    return path
