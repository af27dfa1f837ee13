"""What a new user meets first (issue 31): ``isingattn --version``, help texts that point at committed
files, progress bars only on a terminal, the wall time a resumed cell prints, and the smoke-test note
of a quick report. Each is checked against a reference outside the code under test: pyproject.toml,
``git ls-files``, a real pipe and a real pseudo-terminal, and the report's own table."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from isingattn.cli import build_parser, main
from isingattn.models.app.experiments import Cell

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "isingattn.cli"]


def _console_script() -> list[str]:
    """The installed ``isingattn`` command (the venv's), else the module behind it."""
    exe = pathlib.Path(sys.executable).with_name("isingattn")
    return [str(exe)] if exe.exists() else CLI


def test_version_is_the_package_metadata_and_pyproject_version():
    import isingattn

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    out = subprocess.run([*_console_script(), "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout == f"isingattn {declared}\n"
    assert isingattn.__version__ == declared


def test_help_texts_name_committed_checkpoints():
    """Every ``results/….npz`` path the help of analyze, evaluate and export-bqm names is a committed file,
    and the checkpoint the help of analyze and export-bqm points to is one the verb reads."""
    tracked = set(subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    sub = next(a for a in build_parser()._actions if a.dest == "cmd").choices
    named = {}
    for verb in ("analyze", "evaluate", "export-bqm"):
        text = " ".join(sub[verb].format_help().split())
        paths = re.findall(r"results/\S+?\.npz", text)
        assert paths, f"{verb}'s help names no committed checkpoint"
        named[verb] = paths
        for p in paths:
            assert p in tracked, f"{verb}'s help names {p}, which is not committed"
    assert all("ckpt-" not in p for ps in named.values() for p in ps)  # checkpoints are not committed (.gitignore)


def _no_terminal_codes(text: str) -> None:
    assert "\r" not in text and "\x1b[" not in text, repr(text[-300:])


def test_progress_bars_stay_out_of_a_pipe(tmp_path):
    """``isingattn train`` (nested bars: the runs, each run's steps) with stderr a pipe, as in a log:
    no carriage returns and no cursor escape codes."""
    out = subprocess.run([*CLI, "train", "brackets", "--seq-len", "4", "--types", "2", "--d-model", "8", "--seeds",
                          "1", "--variants", "softmax,h", "--n-train", "40", "--n-test", "20", "--steps", "4",
                          "--eval-every", "2", "--out", str(tmp_path / "run")], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    _no_terminal_codes(out.stderr)
    _no_terminal_codes(out.stdout)


SCAN = ("import numpy as np; from isingattn import IsingModel, thermo; "
        "thermo.scan(IsingModel(np.zeros(3), np.ones((3, 3)) - np.eye(3)), 'exact', [0.5, 1.0], progress={})")


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_progress_bars_on_a_terminal_only():
    """The same call draws its bar when stderr is a pseudo-terminal, and nothing into a pipe."""
    import fcntl
    import pty
    import struct
    import termios

    piped = subprocess.run([sys.executable, "-c", SCAN.format(True)], capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert "thermo.scan" not in piped.stderr
    _no_terminal_codes(piped.stderr)

    def on_terminal(progress):
        leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 x 0
        try:
            p = subprocess.run([sys.executable, "-c", SCAN.format(progress)], stdout=subprocess.DEVNULL,
                               stderr=follower, timeout=300)
            os.close(follower)
            follower = None
            chunks = []
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # EIO: the child's end is closed and drained
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            return p.returncode, b"".join(chunks).decode(errors="replace")
        finally:
            os.close(leader)
            if follower is not None:
                os.close(follower)

    rc, text = on_terminal(True)
    assert rc == 0 and "thermo.scan Exact" in text and "2/2" in text
    rc, text = on_terminal(False)
    assert rc == 0 and "thermo.scan" not in text  # progress=False: off on a terminal too


TINY = dict(seeds=1, steps=4, eval_every=2, d_model=8, batch_size=16, types=2, n_train=40, n_test=20)


def _report_wall(readme: str, cell: str) -> str:
    row = next(line for line in readme.splitlines() if line.startswith(f"| {cell} |"))
    return row.rstrip(" |").rsplit("|", 1)[-1].strip()


def test_a_resumed_cell_prints_the_wall_time_its_report_shows(tmp_path, monkeypatch, capsys):
    """``reproduce`` on a finished cell trains nothing; it prints the cell's recorded time (as its report's
    ``wall (s)`` column does), not this process's 0 s, and says how much of it this run spent."""
    from isingattn.models.app import experiments

    cells = [Cell("brackets", "brackets", 4, variants=("softmax",), **TINY)]
    monkeypatch.setattr(experiments, "grid", lambda quick=False: cells)
    root = tmp_path / "quick"
    assert main(["reproduce", "--quick", "--out", str(root), "--no-progress"]) == 0
    first = capsys.readouterr().out
    wall = json.load(open(root / "brackets/T4/wall_time.json"))["seconds"]
    (root / "brackets/T4/wall_time.json").write_text(json.dumps({"seconds": wall + 600}))  # as if trained longer
    assert main(["reproduce", "--quick", "--out", str(root), "--no-progress"]) == 0
    second = capsys.readouterr().out
    shown = re.search(r"1 seeds \((\d+) s\)", second).group(1)
    assert int(shown) >= 600 and shown == _report_wall((root / "README.md").read_text(), "T4")
    assert re.search(r"\((\d+) s of it in this run", second)
    assert "of it in this run" not in first  # a fresh cell: all of it in this run
    assert re.search(r"1 seeds \((\d+) s\)", first).group(1) == _report_wall(first, "T4")


def test_quick_reports_say_smoke_test_and_full_reports_do_not(tmp_path):
    """The note is on a quick report (``--quick``, or one seed in every cell) and not on the study's."""
    from isingattn_study.grid_report import write_report

    committed = ROOT / "results" / "reproduce" / "brackets" / "T8-noffn"
    root = tmp_path / "r"
    shutil.copytree(committed, root / "brackets" / "T8-noffn",
                    ignore=shutil.ignore_patterns("ckpt-*.npz", ".lock", "*.png"))
    assert "Smoke test, n = 1" not in write_report(str(root))  # five seeds
    assert "Smoke test, n = 1" in write_report(str(root), quick=True)
    res = root / "brackets" / "T8-noffn" / "results.json"
    res.write_text(json.dumps({v: {"0": r["0"]} for v, r in json.loads(res.read_text()).items()}))
    assert "Smoke test, n = 1" in write_report(str(root))  # one seed everywhere
    assert "Smoke test" not in (ROOT / "results" / "reproduce" / "README.md").read_text()
