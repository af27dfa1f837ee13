"""Atomic file writes: a reader, or a process killed at any moment, sees the old file
or the new one, never a partial one, and no temporary file is left behind.

Every file the project writes goes through :func:`writing`: the content goes to a
temporary file in the destination's folder, is flushed and fsynced, then renamed over
the destination (``os.replace`` is atomic on POSIX and Windows). An exception removes
the temporary file. A SIGKILL, which no ``finally`` survives, can leave one hidden
``.isingattn-*.tmp`` file; :func:`sweep_orphans` removes it when the folder is next
opened for writing (run folders do so when their lock is taken). O_TMPFILE-style
unnamed files would avoid even that, but linking them into place is refused on some
filesystems and sandboxes (EXDEV seen here).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
from typing import IO, Iterator

TMP_PREFIX = ".isingattn-"
TMP_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def writing(path: str, mode: str = "w", **open_kw) -> Iterator[IO]:
    """``with writing(path) as f: ...`` writes ``path`` atomically (``mode`` "w" or "wb").

    On an exception the destination is untouched and the temporary file removed."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb'; got {mode!r}.")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=TMP_PREFIX + os.path.basename(path) + ".", suffix=TMP_SUFFIX)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make results unreadable to others
        with os.fdopen(fd, mode, **open_kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def write_text(path: str, text: str) -> None:
    with writing(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_bytes(path: str, data: bytes) -> None:
    with writing(path, "wb") as f:
        f.write(data)


def write_json(path: str, obj, **dump_kw) -> None:
    """Strict JSON (``allow_nan=False``): a NaN or inf raises instead of writing a bare ``NaN``."""
    write_text(path, json.dumps(obj, allow_nan=False, **dump_kw) + "\n")


def savefig(fig, path: str, **kw) -> None:
    """``fig.savefig`` to ``path`` atomically (format from the extension)."""
    fmt = kw.pop("format", os.path.splitext(path)[1].lstrip(".") or "png")
    with writing(path, "wb") as f:
        fig.savefig(f, format=fmt, **kw)


def append_line(path: str, line: str) -> None:
    """Append one line to a log by rewriting it atomically.

    Appending in place can leave a torn last line when the process is killed mid-write;
    logs here are small (one line per evaluation), so a rewrite costs nothing."""
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    if old and not old.endswith("\n"):
        old += "\n"
    write_text(path, old + line.rstrip("\n") + "\n")


def sweep_orphans(folder: str) -> list[str]:
    """Remove temporary files that a killed writer left in ``folder``; returns their paths.

    Call it only while holding the folder (:mod:`isingattn.models.app.runlock`), so that no live
    writer's temporary file is removed."""
    found = glob.glob(os.path.join(glob.escape(folder), TMP_PREFIX + "*" + TMP_SUFFIX))
    for p in found:
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)
    return found
