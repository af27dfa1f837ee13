"""Tiny Shakespeare loading: verification, errors, split and full-coverage windows."""

import numpy as np
import pytest

from isingattn.models import shakespeare as ts

def test_load_verify_and_split(monkeypatch, corpus, tmp_path):
    monkeypatch.delenv(ts.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    text = ts.load_text(corpus)
    assert len(text) == ts.NUM_CHARS
    # a verified --data file is cached, so later runs need neither it nor the network
    assert open(tmp_path / "cache" / "isingattn" / "tinyshakespeare.txt").read() == text
    assert ts.load_text(download=False) == text
    monkeypatch.setenv(ts.ENV, corpus)
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
    with pytest.raises(ts.DataUnavailable, match="--data PATH"):
        ts.load_text(download=False)
    assert not (tmp_path / "cache" / "isingattn").exists()  # a file that failed its check is never cached


def test_offline_without_data_is_unavailable_not_an_error(tmp_path, monkeypatch):
    import urllib.request

    def offline(*a, **k):
        raise OSError("network is unreachable")

    monkeypatch.delenv(ts.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(ts.DataUnavailable, match=f"--data PATH or set {ts.ENV}=PATH"):
        ts.load_text()
    monkeypatch.setenv(ts.ENV, str(tmp_path / "nope.txt"))  # a path that was given but is wrong is an error
    with pytest.raises(ts.DataError, match="does not exist") as e:
        ts.load_text()
    assert not isinstance(e.value, ts.DataUnavailable)


@pytest.mark.parametrize("n,T", [(11, 4), (13, 4), (9, 8), (100, 7)])
def test_windows_predict_every_character_once(n, T):
    ids = np.arange(n, dtype=np.int32)
    x, y = ts.windows(ids, T)
    assert x.shape == y.shape and x.shape[1] == T
    np.testing.assert_array_equal(np.sort(y[y >= 0]), np.arange(1, n))  # each target once
    np.testing.assert_array_equal(y[y >= 0], x[y >= 0] + 1)  # target is the next character
