"""Character-level Tiny Shakespeare, obtained as a user would.

Order of precedence: an explicit ``path``, the ``ISINGATTN_DATA`` environment
variable, a cached copy, then a one-time download of the canonical ``input.txt``
verified by SHA-256. The split is the first 90% for training and the last 10% for
validation; the vocabulary comes from the training text.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from typing import NamedTuple, Optional

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from isingattn import atomic
from isingattn.models.split import Split

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
NUM_CHARS = 1_115_394
ENV = "ISINGATTN_DATA"


class DataError(ValueError):
    """The corpus is missing, unreadable or not the expected file."""


class DataUnavailable(DataError):
    """No corpus was given and none could be downloaded (e.g. offline): the caller may skip
    the work that needs it. A path that was given but is wrong is a plain DataError."""


HOW_TO_ENABLE = (f"get input.txt (1,115,394 characters, SHA-256 {SHA256[:16]}…, from {URL}) and pass "
                 f"--data PATH or set {ENV}=PATH; it is then cached and needed only once")


class CharData(NamedTuple):
    train: np.ndarray  # int32 token ids
    val: np.ndarray
    chars: str  # id -> character


def _cache_path() -> str:
    root = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(root, "isingattn", "tinyshakespeare.txt")


def _verify(data: bytes, where: str) -> str:
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        raise DataError(f"{where} is not the canonical Tiny Shakespeare input.txt (SHA-256 {digest}, expected "
                        f"{SHA256}). Delete it or point {ENV} / --data at the right file.")
    return data.decode("utf-8")


def load_text(path: Optional[str] = None, download: bool = True) -> str:
    """The corpus text; see the module docstring for where it comes from.

    A file given by ``path`` or ``$ISINGATTN_DATA`` is copied into the cache once it has
    passed the SHA-256 check, so later runs need neither. Raises :class:`DataUnavailable`
    when nothing was given, nothing is cached and the download fails or is not allowed."""
    path = path or os.environ.get(ENV)
    cache = _cache_path()
    if path:
        if not os.path.isfile(path):
            raise DataError(f"Tiny Shakespeare file {path!r} does not exist. Pass --data PATH or set {ENV}=PATH "
                            "to a copy of input.txt.")
        with open(path, "rb") as f:
            data = f.read()
        text = _verify(data, path)
        if not os.path.isfile(cache):
            _store(cache, data)
        return text
    if os.path.isfile(cache):
        with open(cache, "rb") as f:
            return _verify(f.read(), cache)
    if not download:
        raise DataUnavailable(f"no Tiny Shakespeare file and downloads are off: {HOW_TO_ENABLE}.")
    try:
        with urllib.request.urlopen(URL, timeout=30) as r:
            data = r.read()
    except OSError as e:
        raise DataUnavailable(f"could not download Tiny Shakespeare ({e}); {HOW_TO_ENABLE}.") from None
    text = _verify(data, URL)
    _store(cache, data)
    return text


def _store(cache: str, data: bytes) -> None:
    """Cache a verified corpus; a cache that cannot be written is not an error (the data is in hand)."""
    try:
        atomic.write_bytes(cache, data)
    except OSError:
        pass


def encode(text: str, split: float = 0.9) -> CharData:
    """First ``split`` of the text for training, the rest for validation; ids from the training vocabulary."""
    n = int(split * len(text))
    train_text, val_text = text[:n], text[n:]
    chars = "".join(sorted(set(train_text)))
    unseen = set(val_text) - set(chars)
    if unseen:
        raise DataError(f"validation text has characters absent from training: {sorted(unseen)[:10]}.")
    lut = {c: i for i, c in enumerate(chars)}
    enc = lambda t: np.fromiter((lut[c] for c in t), dtype=np.int32, count=len(t))
    return CharData(enc(train_text), enc(val_text), chars)


def windows(ids: np.ndarray, T: int):
    """Non-overlapping windows covering the sequence: inputs (N, T) and next-character targets (N, T).

    Every character after the first is predicted exactly once (the final partial
    window is right-aligned, its already-covered targets masked with -1), so the mean
    cross-entropy is over the whole split."""
    n = len(ids) - 1
    starts = list(range(0, n - T + 1, T))
    x = np.stack([ids[s : s + T] for s in starts])
    y = np.stack([ids[s + 1 : s + T + 1] for s in starts])
    covered = starts[-1] + T if starts else 0
    if covered < n:
        s = n - T
        tail_y = ids[s + 1 : s + T + 1].copy()
        tail_y[: covered - s] = -1
        x, y = np.concatenate([x, ids[None, s : s + T]]), np.concatenate([y, tail_y[None]])
    return x, y


def lm_splits(data: CharData, T: int) -> tuple[Split, Split]:
    """Next-character prediction at context ``T``: (train, validation).

    Training windows start at every offset (read-only strided views of the ids, so
    nothing is copied until a batch is gathered); validation windows are those of
    :func:`windows`, so its mean loss is over every validation character once."""
    if T < 1 or len(data.val) <= T or len(data.train) <= T:
        raise ValueError(f"context T={T} must be at least 1 and shorter than both splits "
                         f"({len(data.train)} / {len(data.val)} characters).")
    train = Split(sliding_window_view(data.train[:-1], T), sliding_window_view(data.train[1:], T))
    return train, Split(*windows(data.val, T))
