"""Tiny Shakespeare loading: verification, errors, split and full-coverage windows."""

import os

import numpy as np
import pytest

from isingattn.models import shakespeare as ts

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "tinyshakespeare.txt")


@pytest.mark.skipif(not os.path.exists(SHARED), reason="test copy of the corpus not available")
def test_load_verify_and_split(monkeypatch):
    text = ts.load_text(SHARED)
    assert len(text) == ts.NUM_CHARS
    monkeypatch.setenv(ts.ENV, SHARED)
    assert ts.load_text() == text
    d = ts.encode(text)
    assert len(d.chars) == 65 and len(d.train) == int(0.9 * ts.NUM_CHARS)
    assert "".join(d.chars[i] for i in d.val[:20]) == text[len(d.train) : len(d.train) + 20]


def test_bad_files(tmp_path, monkeypatch):
    with pytest.raises(ts.DataError, match="does not exist"):
        ts.load_text(str(tmp_path / "missing.txt"))
    bad = tmp_path / "input.txt"
    bad.write_text("not shakespeare")
    with pytest.raises(ts.DataError, match="SHA-256"):
        ts.load_text(str(bad))
    monkeypatch.delenv(ts.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(ts.DataError, match="--data PATH"):
        ts.load_text(download=False)


@pytest.mark.parametrize("n,T", [(11, 4), (13, 4), (9, 8), (100, 7)])
def test_windows_predict_every_character_once(n, T):
    ids = np.arange(n, dtype=np.int32)
    x, y = ts.windows(ids, T)
    assert x.shape == y.shape and x.shape[1] == T
    np.testing.assert_array_equal(np.sort(y[y >= 0]), np.arange(1, n))  # each target once
    np.testing.assert_array_equal(y[y >= 0], x[y >= 0] + 1)  # target is the next character
