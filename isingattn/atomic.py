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

A set of files that belong together (a fitted model's ``model.npz``, ``model.bqm`` and
``fit.json``) is written with :func:`writing_folder`: every file goes into a temporary folder
beside the destination, which then takes the destination's place in one step
(:func:`replace_folder`), so a reader or a kill sees the old set or the new one, whole.
:func:`sweep_folder_orphans` removes what a killed writer left beside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import json
import os
import shutil
import sys
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


def check_writable(path: str, what: str = "path", *, is_file: bool = False) -> None:
    """Refuse, before any work, an output ``path`` that cannot be written: probe its folder (for
    ``is_file``, the folder it goes in), or the nearest existing ancestor that the folder would be
    created in, with a temporary file. Raises :class:`~isingattn.IsingInputError` whose message
    starts with ``what`` (e.g. a command-line option) and the path, and says how to fix it."""
    from isingattn.errors import IsingInputError

    folder = os.path.dirname(os.path.abspath(path)) if is_file else os.path.abspath(path)
    if is_file and os.path.isdir(path):
        raise IsingInputError(f"{what} {path!r} is a folder; give a file path.")
    probe = folder
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise IsingInputError(f"{what} {path!r} cannot be created: {probe!r} is a file, not a folder. "
                              f"Choose another {what}.")
    try:
        with tempfile.TemporaryFile(dir=probe, prefix=".isingattn-probe-"):
            pass
    except OSError as e:
        raise IsingInputError(f"{what} {path!r} is not writable ({e.strerror} in {probe!r}); choose another {what} "
                              "or fix the folder's permissions.") from None


# ---- a folder of files replaced as one ------------------------------------------------------------

_RENAME_EXCHANGE = 2  # renameat2's flag (Linux ≥ 3.15): swap two paths atomically
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap the paths ``a`` and ``b`` atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False
    where the system or the filesystem does not offer it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), b)


def _aside(dst: str, kind: str) -> str:
    """A hidden name beside ``dst`` for a temporary folder of ``kind`` (``new`` or ``old``)."""
    parent, name = os.path.split(os.path.abspath(dst))
    return tempfile.mkdtemp(dir=parent, prefix=f"{TMP_PREFIX}{name}.{kind}.", suffix=TMP_SUFFIX)


def replace_folder(src: str, dst: str) -> None:
    """Put the folder ``src`` at ``dst`` (on the same filesystem) in one step: a reader, or a
    process killed at any moment, finds the old ``dst`` whole or the new one whole. ``src`` is
    consumed; the old ``dst`` is removed.

    A missing ``dst`` is a plain rename. An existing one is swapped with ``src`` atomically where
    Linux offers ``renameat2(RENAME_EXCHANGE)``; elsewhere the old folder is first renamed aside
    (a hidden ``.old`` folder that :func:`sweep_folder_orphans` moves back if a kill leaves no
    ``dst``), then ``src`` renamed into place."""
    src, dst = os.path.abspath(src), os.path.abspath(dst)
    if not os.path.lexists(dst):
        os.rename(src, dst)
        _fsync_dir(os.path.dirname(dst))
        return
    if _exchange(src, dst):  # src now holds the old folder
        _fsync_dir(os.path.dirname(dst))
        shutil.rmtree(src, ignore_errors=True)
        return
    old = _aside(dst, "old")
    os.rmdir(old)  # its name only: rename needs the target absent (or an empty folder)
    os.rename(dst, old)
    os.rename(src, dst)
    _fsync_dir(os.path.dirname(dst))
    shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(folder: str) -> None:
    with contextlib.suppress(OSError, AttributeError):  # not every system can open a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def writing_folder(dst: str) -> Iterator[str]:
    """``with writing_folder(dst) as tmp: ...`` (write files into ``tmp``) replaces the folder
    ``dst`` with ``tmp`` on success (:func:`replace_folder`); on an exception ``dst`` is
    untouched and ``tmp`` removed. Orphans of killed writers beside ``dst`` are swept first:
    hold the folder (one writer at a time) while using it."""
    sweep_folder_orphans(dst)
    tmp = _aside(dst, "new")
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        for name in os.listdir(tmp):  # every file on disk before the folder is published
            p = os.path.join(tmp, name)
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
        _fsync_dir(tmp)
        replace_folder(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def sweep_folder_orphans(dst: str) -> list[str]:
    """Remove the temporary folders that killed :func:`writing_folder` calls left beside ``dst``
    (a half-written ``.new`` one; an ``.old`` one after the swap), and the temporary files a
    killed :func:`writing` left inside ``dst``; returns their paths. An ``.old`` folder with no
    ``dst`` (killed between the two renames of the fallback) is moved back to ``dst`` instead."""
    parent, name = os.path.split(os.path.abspath(dst))
    found = []
    pattern = os.path.join(glob.escape(parent), f"{TMP_PREFIX}{glob.escape(name)}.*{TMP_SUFFIX}")
    for p in sorted(glob.glob(pattern)):
        kind = os.path.basename(p)[len(TMP_PREFIX) + len(name) + 1:].split(".", 1)[0]
        if kind not in ("new", "old") or not os.path.isdir(p):
            continue
        if kind == "old" and not os.path.lexists(dst):
            os.rename(p, dst)
            continue
        shutil.rmtree(p, ignore_errors=True)
        found.append(p)
    if os.path.isdir(dst):
        found += sweep_orphans(dst)
    return found
