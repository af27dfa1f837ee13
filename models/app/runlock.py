"""One writer per output folder: ``with FolderLock(path): ...``.

Two processes writing the same run folder would silently replace each other's
checkpoints and logs. The lock is an OS advisory lock (``fcntl.flock``) on
``<folder>/.lock``, so it is released by the kernel when its holder dies, however it
dies: a lock file left behind by a killed process is stale by construction and is
taken over. The file records who holds it, for the error message of a refused writer.
Taking the lock also removes temporary files that a killed writer left in the folder
(:func:`isingattn.atomic.sweep_orphans`), which is safe only because no other writer
can be active then.

``fcntl`` locks are per open file, so a second ``FolderLock`` on the same folder is
refused even inside one process. On network filesystems without working ``flock``
the lock degrades to advisory-only; keep run folders on local disk.
"""

from __future__ import annotations

import json
import os
import socket
import time

from isingattn.atomic import sweep_orphans
from isingattn.errors import RunFolderError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; fall back to no locking, said in the docstring
    fcntl = None

LOCK_NAME = ".lock"


class FolderLock:
    """Exclusive ownership of ``folder`` (created if missing) for the ``with`` block.

    Raises :class:`~isingattn.errors.RunFolderError` when another live process holds it."""

    def __init__(self, folder: str):
        self.folder = folder
        self.path = os.path.join(folder, LOCK_NAME)
        self._fd = None
        self.swept: list[str] = []

    def acquire(self) -> "FolderLock":
        if self._fd is not None:
            raise RunFolderError(f"{self.folder} is already locked by this FolderLock.")
        try:
            os.makedirs(self.folder, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RunFolderError(f"cannot write to the output folder {self.folder!r} ({e.strerror}). "
                                 "Choose a writable folder with --out.") from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunFolderError(
                    f"{self.folder} is in use by another process ({holder}). Wait for it to finish, stop it, "
                    "or write to another folder with --out.") from None
            if not _same_file(fd, self.path):  # its holder released (and removed) it meanwhile: take a fresh one
                os.close(fd)
                return self.acquire()
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        self._fd = fd
        self.swept = sweep_orphans(self.folder)
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.remove(self.path)  # while still holding it, so no other writer's lock file is removed
        except FileNotFoundError:
            pass
        os.close(self._fd)  # closing releases the flock
        self._fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _same_file(fd, path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read_holder(fd) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {info['pid']} on {info['host']}, since {info['since']}"
    except (OSError, ValueError, KeyError):
        return "holder unknown"
