"""``isingattn reproduce``: the grid's cells that the options select, trained into their folders
(resumable: finished cells are not retrained), then the report rebuilt from every finished cell.

The command line (:mod:`isingattn.cli`) parses the options and calls :func:`reproduce`; errors
name the options, as the command line's do.
"""

from __future__ import annotations

import dataclasses
import os
import time

from isingattn.errors import IsingInputError
from isingattn.models.app.experiments import select, write_summary
from isingattn.models.shakespeare import HOW_TO_ENABLE, DataUnavailable
from isingattn_study.grid_report import write_report
from isingattn_study.parts import grid, run_cell


def check(quick: bool, **names) -> None:
    """Refuse a selection the grid cannot meet (``only``, ``seq_len``, ``engine``, ``cell``: the values of
    ``--only``, ``--seq-len``, ``--engine`` and ``--cell``, None for all) before any cell runs."""
    cells = grid(quick)
    for option, attr in (("only", "part"), ("seq_len", "seq_len"), ("engine", "engine"), ("cell", "name")):
        valid, value = sorted({getattr(c, attr) for c in cells}), names.get(option)
        if value is not None and value not in valid:
            raise IsingInputError(f"--{option.replace('_', '-')} {value}: the {'quick ' if quick else ''}grid has no "
                                  f"such cell; choose one of {', '.join(map(str, valid))}.")


def reproduce(root: str, *, quick: bool = False, only=None, seq_len=None, ffn=None, engine=None, cell=None,
              seeds=None, data=None, report_only: bool = False, restart: bool = False, progress: bool = True,
              command: str = "") -> str:
    """Train the selected cells of the (``quick``) grid into ``root/<cell name>`` unless ``report_only``,
    printing each cell's summary, then write ``root/README.md``; returns the report's text. ``ffn``: True,
    False or None (both); ``seeds`` overrides each cell's number of seeds; ``command`` is recorded in each
    run folder. A cell that needs the Tiny Shakespeare corpus on a machine without it is skipped, and said so."""
    skipped = []
    if not report_only:
        check(quick, only=only, seq_len=seq_len, engine=engine, cell=cell)
        cells = select(grid(quick), only, seq_len, ffn, engine, cell)
        if seeds is not None:  # validated by Cell
            cells = [dataclasses.replace(c, seeds=seeds) for c in cells]
        print(f"{len(cells)} cell(s) -> {root}: " + ", ".join(c.name for c in cells), flush=True)
        for c in cells:
            out, t0 = os.path.join(root, c.name), time.perf_counter()
            try:
                results = run_cell(c, out, data_path=data, progress=progress, command=command, restart=restart)
            except DataUnavailable:  # offline without the corpus: run what needs no download
                skipped.append(c.name)
                print(f"\nskipped {c.name}: it needs the Tiny Shakespeare corpus", flush=True)
                continue
            print("\n" + write_summary(c, results, out, time.perf_counter() - t0), flush=True)
    text = write_report(root, quick=quick)
    print(text)
    print(f"wrote {root}/README.md")
    if skipped:
        print(f"skipped {len(skipped)} cell(s) that need the Tiny Shakespeare corpus: {', '.join(skipped)}. "
              f"To run them, {HOW_TO_ENABLE}, then rerun this command (finished cells are not retrained).")
    return text
