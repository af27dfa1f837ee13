"""``atomic.writing_folder``: a folder of files replaced as one, by renameat2's exchange where Linux
offers it and by the rename-aside fallback elsewhere; a kill between the fallback's two renames
is repaired by the next sweep."""

import os

import pytest

from isingattn import atomic


def _fill(folder, text):
    os.makedirs(folder, exist_ok=True)
    for name in ("a", "b"):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)


def _read(folder):
    return {n: open(os.path.join(folder, n)).read() for n in sorted(os.listdir(folder))}


@pytest.mark.parametrize("exchange", [True, False])
def test_writing_folder_replaces_the_set_or_leaves_it(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    with atomic.writing_folder(str(out)) as tmp:
        _fill(tmp, "old")
    assert _read(out) == {"a": "old", "b": "old"}
    with pytest.raises(RuntimeError):
        with atomic.writing_folder(str(out)) as tmp:
            _fill(tmp, "new")
            raise RuntimeError("killed mid-write")
    assert _read(out) == {"a": "old", "b": "old"}
    with atomic.writing_folder(str(out)) as tmp:
        _fill(tmp, "new")
    assert _read(out) == {"a": "new", "b": "new"}
    assert [p for p in os.listdir(tmp_path) if p != "out"] == []


def test_a_kill_between_the_fallbacks_renames_is_repaired(tmp_path):
    """The old folder renamed aside and the new one not yet in place: the sweep puts the old back."""
    out = tmp_path / "out"
    _fill(out, "old")
    aside = tmp_path / ".isingattn-out.old.k1ll.tmp"
    os.rename(out, aside)
    atomic.sweep_folder_orphans(str(out))
    assert _read(out) == {"a": "old", "b": "old"} and not aside.exists()
