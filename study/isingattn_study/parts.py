"""The study's controls as parts of the grid, and each part's own README (``results/reproduce/<part>/README.md``).

- ``pairwise``: softmax and h with a learned position-pair field ``B[h, i, j]`` (``Config.pair_bias``;
  T² per head, 0 at the start, not weight-decayed), paired against hJ of the brackets-hard cell of
  the same shape and seeds.
- ``seeds10``: seeds 5-9 of the brackets-hard headline cells (T = 16, 24, FFN on and off); the
  table pools them with the cell's seeds 0-4.
- ``tuning``: a sweep at T = 16 and 64 over learning rate, weight decay and dropout, scored on a
  validation split drawn like the test set (unseen shapes, apart from test and training).
- ``tuned``: the setting each variant won, retrained with fresh seeds (10-14) and scored on
  test, against the untuned setting at the same seeds.
- ``mqar``: multi-query associative recall (``isingattn.models.mqar``), the four-way ablation.
- ``capacity``: the parameter count of every configuration, and the paired gain against it for the configurations
  trained (T = 16: ``CAPACITY`` here, d_model 64 with one layer and head from the brackets-hard cell, with two
  layers of four heads from the depth cell; T = 64: ``CAPACITY64``, the same two from their T = 64 cells).

Their cells keep no checkpoints once finished (``metrics.jsonl`` and ``results.json`` hold
every result, and the study's report, which draws attention maps from checkpoints, stays
that of its own parts); their tables are written here, not in the study's report.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os

import numpy as np

from isingattn import atomic
from isingattn.models.app.cells import load_cells, logged_results, wall_seconds, with_siblings, finished as finished_runs
from isingattn_study import controls
from isingattn_study.capacity import capacity_readme
from isingattn_study.pairing import compare_rows, find, means_row, rerun_hJ, untuned_blocks
from isingattn.models.app.report import fmt, mean_ci

PARTS = ("pairwise", "seeds10", "tuning", "tuned", "mqar", "capacity")
EVERY = dict(eval_every=100)
BAND = dict(engine="banded", engine_kw=(("bandwidth", 8),), J_band=8, J_param="toeplitz")
SWEEP = [(lr, wd, do) for lr in (1e-3, 3e-3, 1e-2) for wd in (0.01, 0.1) for do in (0.0, 0.1)]
DEFAULT = (3e-3, 0.01, 0.0)
# The setting each variant won in the ``tuning`` part (its README recomputes the winners from the files and
# says so if they differ from these): (lr, weight decay, dropout).
WINNERS: dict[str, tuple] = {"softmax": (3e-3, 0.1, 0.0), "h": (1e-3, 0.1, 0.0), "hJ": (3e-3, 0.1, 0.0)}
TUNED_SEED0 = 10
# The capacity grid at T = 16 as (d_model, layers, heads), in the order run: the 1x1 widths first, then the shapes
# by how much they tell; d_model 64 1x1 is the brackets-hard cell, 64 2x4 the depth cell
CAPACITY = ((32, 1, 1), (128, 1, 1), (64, 1, 4), (64, 2, 1), (32, 1, 4), (32, 2, 1), (32, 2, 4), (128, 1, 4),
            (128, 2, 1), (128, 2, 4))
CAPACITY64 = ((32, 1, 1), (128, 1, 1), (64, 2, 1), (64, 1, 4), (32, 1, 4), (32, 2, 1), (32, 2, 4),
              (128, 1, 4), (128, 2, 1), (128, 2, 4))
# Sweep runs that raised TrainingDivergedError (non-finite loss) instead of finishing: (cell, variant) -> the step,
# as the run printed it; the cell was then run without that variant (``--variants``).
DIVERGED = {("tuning/T16-lr0.01-valid", "h"): 163, ("tuning/T16-lr0.01-do0.1-valid", "h"): 173,
            ("capacity/T16-d128", "h"): 325,  # seed 1 (seed 0 finished); seed 2 not run
            ("capacity/T16-2x1-d128", "h"): 451,  # seed 0
            ("capacity/T16-2x4-d128", "h"): 644,  # seed 1 (seed 0 finished); seed 2 not run
            ("mqar/T256-toeplitz8-2x1-n16-v65-d32", "h"): 728}  # seed 2 (seeds 0-1 finished)


def cells() -> list:
    from isingattn.models.app.experiments import Cell, VARIANTS

    hard = dict(task="brackets-hard", **EVERY)
    out = [Cell("pairwise", seq_len=T, variants=("softmax", "h"), seeds=5, pair_bias=True, **hard) for T in (16, 24)]
    # hJ of brackets-hard/T16 rerun under today's code (the committed runs predate a float-level change of the
    # Ising path: seed 0 differs from step 100 on, softmax is bit-identical); T = 24's hJ costs ~30 min a run
    out += [Cell("pairwise", seq_len=T, variants=("hJ",), seeds=5, **hard) for T in (16, 24)]
    out += [Cell("pairwise", seq_len=64, variants=("softmax", "h"), seeds=5, pair_bias=True, **BAND, **hard)]
    out += [Cell("seeds10", seq_len=T, variants=VARIANTS, seeds=5, seed0=5, ffn=f, **hard)
            for T in (16, 24) for f in (True, False)]
    sweep = dict(variants=("softmax", "h", "hJ"), seeds=1, heldout="valid", **hard)
    out += [Cell("tuning", seq_len=16, lr=lr, weight_decay=wd, dropout=do, **sweep) for lr, wd, do in SWEEP]
    # T = 64 (toeplitz J, band 8): the settings without dropout first (dropout won nothing at T = 16)
    out += [Cell("tuning", seq_len=64, lr=lr, weight_decay=wd, dropout=do, **sweep, **BAND)
            for lr, wd, do in sorted(SWEEP, key=lambda s: s[2] > 0)]
    by_setting = {}
    for v, s in WINNERS.items():
        by_setting.setdefault(tuple(s), []).append(v)
    by_setting.setdefault(DEFAULT, [])
    by_setting[DEFAULT] = sorted(set(by_setting[DEFAULT]) | {"softmax", "h", "hJ"})  # the untuned, same seeds
    out += [Cell("tuned", seq_len=16, variants=tuple(vs), seeds=5, seed0=TUNED_SEED0, lr=lr, weight_decay=wd,
                 dropout=do, **hard) for (lr, wd, do), vs in by_setting.items()]
    # T = 64: its sweep picked the same settings; the winners first, then the untuned setting at the same seeds
    out += [Cell("tuned", seq_len=64, variants=tuple(vs), seeds=5, seed0=TUNED_SEED0, lr=lr, weight_decay=wd,
                 dropout=do, **hard, **BAND) for (lr, wd, do), vs in sorted(by_setting.items(), key=lambda kv: kv[0] == DEFAULT)]
    # capacity (part 5) at T = 16, then T = 64's one-head widths (its hJ costs ~1 h a run at two layers of four heads)
    out += [Cell("capacity", seq_len=16, variants=("softmax", "h", "hJ"), seeds=3, d_model=d, layers=L, heads=H,
                 **hard) for d, L, H in CAPACITY]
    out += [Cell("capacity", seq_len=64, variants=("softmax", "h", "hJ"), seeds=3, d_model=d, layers=L, heads=H,
                 **hard, **BAND) for d, L, H in CAPACITY64]
    mq = dict(task="mqar", variants=VARIANTS, seeds=5, layers=2, steps=1500, n_train=20000, **EVERY)
    out += [Cell("mqar", seq_len=64, pairs=8, mqar_vocab=65, d_model=32, **BAND, **mq)]
    out += [Cell("mqar", seq_len=128, pairs=16, mqar_vocab=65, d_model=32, **BAND, **mq)]
    # more pairs (the query region full), then a larger vocabulary, at T = 64
    out += [Cell("mqar", seq_len=64, pairs=n, mqar_vocab=v, d_model=32, **BAND, **mq) for n, v in ((16, 65), (8, 129))]
    # T = 256 with T = 128's 16 pairs and vocabulary: only the length changes
    out += [Cell("mqar", seq_len=256, pairs=16, mqar_vocab=65, d_model=32, **BAND, **mq)]
    # full J through TAP at T = 64, 16 pairs: hJ and J only (softmax and h, which have no J, pair from the toeplitz cell)
    out += [Cell("mqar", seq_len=64, pairs=16, mqar_vocab=65, d_model=32, engine="meanfield",
                 engine_kw=(("method", "tap"),), **{**mq, "variants": ("hJ", "J")})]
    return out


def grid(quick: bool = False) -> list:
    """The ``reproduce`` grid (:func:`~isingattn.models.app.experiments.grid`) with these parts' cells
    after it (the quick grid has none). The parts build on the grid's machinery, not it on them."""
    from isingattn.models.app.experiments import grid as base

    return base(quick) + ([] if quick else cells())


def run_cell(cell, out: str, **kw) -> dict:
    """:func:`~isingattn.models.app.experiments.run_cell`, then :func:`on_cell_done` for a cell of these parts."""
    from isingattn.models.app.experiments import run_cell as run

    results = run(cell, out, **kw)
    on_cell_done(cell, out)
    return results


def on_cell_done(cell, out: str) -> None:
    """After a cell of these parts finished: drop its checkpoints, rewrite its part's README."""
    if cell.part not in PARTS:
        return
    for p in glob.glob(os.path.join(glob.escape(out), "ckpt-*.npz")):
        os.remove(p)
    write_part(os.path.dirname(os.path.dirname(out)), cell.part)


# --- statistics -------------------------------------------------------------------------------------------


# --- the parts' READMEs -----------------------------------------------------------------------------------


def _shape(c) -> str:
    j = "" if c.get("J_param", "full") == "full" else f", J {c['J_param']}{c.get('J_band') or ''}"
    return f"T={c['seq_len']}, FFN {'on' if c['ffn'] else 'off'}{j}"


def _seconds(cs) -> float:
    return sum(x for x in (c["wall_s"] for c in cs) if not math.isnan(x))


def _pairwise(root, mine, every) -> str:
    md = ("Learned position-pair field `B[h, i, j]` added to every query's fields (T² parameters **per head**; "
          "these cells have one head), starting at 0 and not weight-decayed, for softmax and h. softmax and h "
          "without it: the committed brackets-hard cell of the same shape and seeds (a rerun of softmax seed 0 "
          "reproduced it bit for bit). hJ: rerun under today's code where a `pairwise/T<T>` cell holds it; the "
          "committed hJ runs predate a float-level change of the Ising path (rerun seed 0 at T = 16: 98.39% "
          "against the committed 98.41%), so they are not bit-reproducible, only statistically comparable. "
          "Positive Δ: the first model did better.\n")
    for c in (c for c in mine if c.get("pair_bias")):
        ref = find(every, "brackets-hard", c, J_param=c.get("J_param")) or {"results": {}}
        R, B = dict(ref["results"]), c["results"]
        R["hJ"], source = rerun_hJ(every, c)
        named = [("softmax", R.get("softmax")), ("softmax+B", B.get("softmax")), ("h", R.get("h")),
                 ("h+B", B.get("h")), ("hJ", R.get("hJ"))]
        md += f"\n### brackets-hard, {_shape(c)} ({os.path.relpath(c['folder'], root)}; hJ from {source})\n\n"
        md += "| | " + " | ".join(n for n, _ in named) + " |\n" + "|---" * (len(named) + 1) + "|\n"
        md += means_row("test accuracy (%)", named) + "\n"
        get = lambda r, v: r.get(v) or {}
        md += compare_rows([("hJ − softmax+B", get(R, "hJ"), get(B, "softmax")), ("hJ − h+B", get(R, "hJ"), get(B, "h")),
                            ("softmax+B − softmax", get(B, "softmax"), get(R, "softmax")),
                            ("h+B − h", get(B, "h"), get(R, "h")), ("hJ − softmax (for reference)", get(R, "hJ"),
                                                                    get(R, "softmax"))])
    return md


def _seeds10(root, mine, every) -> str:
    from isingattn_study.reruns import reproduced

    checked = [reproduced(root, f"brackets-hard/{c['folder'].rsplit('/', 1)[-1].replace('-s5', '')}", "softmax")
               for c in mine]
    if checked and all(checked):
        soft = "softmax's seeds 0-4 were retrained bit for bit by the later code (`rerun/README.md`)"
    else:
        soft = ("softmax's seed 0 was retrained bit for bit by the later code (`pairwise/README.md`); its other seeds "
                + ("were retrained, not all bit for bit (`rerun/README.md`)" if any(x is False for x in checked)
                   else "were not rerun"))
    md = ("Seeds 5-9 of the brackets-hard headline cells (this part) pooled with seeds 0-4 (the brackets-hard "
          f"cell of the same shape), same settings. The two blocks were trained by two code versions: seeds 0-4 "
          f"by the grid's (up to 2026-12-02), seeds 5-9 by the controls' (from 2026-12-04 on). {soft}; hJ's are "
          "not (a float-level change of the Ising path, see `pairwise/README.md`), so hJ's seeds 0-4 come from a "
          "rerun under the later code where one exists (named below). The pooled rows therefore pair runs of two "
          "code versions; `summary.md` tests each block on its own. Holm over the rows of the comparison "
          "table.\n")
    pairs, sources = [], []
    md += "\n| cell | softmax | hJ | h | J |\n|---|---|---|---|---|\n"
    for c in mine:
        ref = dict((find(every, "brackets-hard", c) or {"results": {}})["results"])
        ref["hJ"], source = rerun_hJ(every, c)
        sources.append(f"{_shape(c)}: {source}")
        pooled = {v: {**ref.get(v, {}), **c["results"].get(v, {})} for v in ("softmax", "hJ", "h", "J")}
        md += means_row(_shape(c), [(v, pooled[v]) for v in ("softmax", "hJ", "h", "J")])
        pairs += [(f"{_shape(c)}: hJ − softmax", pooled["hJ"], pooled["softmax"]),
                  (f"{_shape(c)}: hJ − h", pooled["hJ"], pooled["h"])]
    return md + "\nhJ's seeds 0-4 from " + "; ".join(sources) + ".\n\n" + compare_rows(pairs)


def winners(mine) -> dict:
    """{variant: ((lr, wd, dropout), validation accuracy)}: the best setting of each variant (first on ties)."""
    best = {}
    for c in sorted(mine, key=lambda c: SWEEP.index(_setting(c)) if _setting(c) in SWEEP else 99):
        for v, r in c["results"].items():
            acc = float(np.mean(list(r.values())))
            if v not in best or acc > best[v][1]:
                best[v] = (_setting(c), acc)
    return best


def _setting(c) -> tuple:
    return (c["lr"], c.get("weight_decay", 0.01), c.get("dropout", 0.0))


def _tuning(root, mine, every) -> str:
    md = ("Each setting trained on seed 0's training set and scored on a **validation** split drawn like the test "
          "set (2,000 strings of shapes seen neither in training nor in the test set; `test_acc` in these "
          "folders' logs is that validation accuracy). One seed per setting: differences below ~1 point are "
          "within the spread between seeds. T = 16: full J, the whole sweep; T = 64: toeplitz J (band 8, "
          "through Banded), the same sweep.\n")
    for T in sorted({c["seq_len"] for c in mine}):
        at = [c for c in mine if c["seq_len"] == T]
        md += f"\n### T = {T}\n\n| lr | weight decay | dropout | softmax | h | hJ |\n|---|---|---|---|---|---|\n"
        for c in sorted(at, key=lambda c: _setting(c)):
            name = os.path.relpath(c["folder"], root)
            md += "| {:g} | {:g} | {:g} | ".format(*_setting(c)) + " | ".join(
                f"{100 * np.mean(list(c['results'][v].values())):.2f}" if c["results"].get(v) else
                f"diverged (step {DIVERGED[name, v]})" if (name, v) in DIVERGED else "—"
                for v in ("softmax", "h", "hJ")) + " |\n"
        md += "\nWinner per variant (highest validation accuracy):\n\n"
        for v, (s, acc) in winners(at).items():
            flag = "" if tuple(WINNERS.get(v, ())) == s else " (**not the setting in `parts.WINNERS`**)"
            md += f"- {v}: lr {s[0]:g}, weight decay {s[1]:g}, dropout {s[2]:g} ({100 * acc:.2f}%){flag}\n"
    return md


def _tuned_table(cells_) -> tuple[str, dict]:
    """The untuned and tuned test accuracy per variant of one T's ``tuned`` cells, and their paired comparisons."""
    untuned, tuned = tuned_results(cells_)
    md = "| variant | setting | untuned | tuned |\n|---|---|---|---|\n"
    for v in ("softmax", "h", "hJ"):
        s = WINNERS.get(v)
        md += (f"| {v} | {'—' if s is None else 'lr {:g}, wd {:g}, dropout {:g}'.format(*s)} | "
               + " | ".join("—" if not r else f"{fmt(*mean_ci(list(r.values())), 100)} (n={len(r)})"
                            for r in (untuned.get(v), tuned.get(v))) + " |\n")
    g = lambda d, v: d.get(v) or {}
    md += "\n" + compare_rows([("tuned hJ − tuned softmax", g(tuned, "hJ"), g(tuned, "softmax")),
                               ("tuned hJ − tuned h", g(tuned, "hJ"), g(tuned, "h")),
                               ("untuned hJ − untuned softmax", g(untuned, "hJ"), g(untuned, "softmax")),
                               ("untuned hJ − untuned h", g(untuned, "hJ"), g(untuned, "h"))]
                              + [(f"tuned {v} − untuned {v}", g(tuned, v), g(untuned, v)) for v in ("softmax", "h", "hJ")])
    return md, untuned


def _tuned(root, mine, every) -> str:
    md = (f"The winner of `tuning` for each variant retrained with fresh seeds ({TUNED_SEED0}-{TUNED_SEED0 + 4}) and "
          "scored on the test split, against the untuned setting (lr 0.003, weight decay 0.01, no dropout) at the "
          "same seeds. Paired by seed (same data and initialization).\n")
    at64 = [c for c in mine if c["seq_len"] == 64]
    table, untuned = _tuned_table([c for c in mine if c["seq_len"] == 16])
    md += "\n### T = 16\n\n" + table
    blocks = untuned_blocks(every, untuned, ("hJ", "softmax"))
    if blocks:
        md += ("\nThe untuned setting on every seed trained at T = 16 (FFN on): seeds 0-4 (the brackets-hard cell; hJ "
               "rerun under today's code), 5-9 (`seeds10`) and 10-14 (this part). Each seed draws its own data split "
               "(held-out nesting shapes), so the blocks differ in data as well as initialization.\n\n")
        pooled = [{k: v for _, b in blocks for k, v in b[var].items()} for var in ("hJ", "softmax")]
        md += compare_rows([(f"hJ − softmax, seeds {lab}", b["hJ"], b["softmax"]) for lab, b in blocks]
                           + [("hJ − softmax, all seeds pooled", *pooled)])
    if at64:
        won = winners([c for c in every if c["part"] == "tuning" and c["seq_len"] == 64])
        same = all(tuple(WINNERS.get(v, ())) == s for v, (s, _) in won.items())
        md += ("\n### T = 64 (toeplitz J, band 8)\n\nThe T = 64 sweep picked "
               + ("the same setting per variant as T = 16" if same else "**a different setting from T = 16's for "
                  "some variant; these cells ran T = 16's winners**") + " (see `tuning/README.md`); the untuned "
               "T = 64 cell on seeds 0-4 is `brackets-hard/T64-toeplitz8`.\n\n" + _tuned_table(at64)[0])
    return md


def tuned_results(mine) -> tuple[dict, dict]:
    """``(untuned, tuned)``, each ``{variant: {seed: accuracy}}``, from the ``tuned`` part's cells ``mine``."""
    untuned = next((c for c in mine if _setting(c) == DEFAULT), {"results": {}})["results"]
    tuned = {v: next((c["results"][v] for c in mine if _setting(c) == tuple(s) and v in c["results"]), {})
             for v, s in WINNERS.items()}
    return untuned, tuned


def _mqar(root, mine, every) -> str:
    md = ("Multi-query associative recall (`isingattn.models.mqar`): key-value pairs, then every key queried once "
          "more; accuracy is the share of queries whose value is recalled. 2 layers.\n")
    for c in mine:
        # a full-J cell trains hJ and J only: softmax and h (no J) are the toeplitz cell's runs of the same seeds
        R = with_siblings(c, mine)
        named = list(R.items())
        engine = "" if c["engine"] in ("exact", "banded") else f", through {c['engine']}" + "".join(
            f" {x}" for k, x in c.get("engine_kw", ()) if k == "method")
        md += (f"\n### T={c['seq_len']}, {c['pairs']} pairs, vocabulary {c['mqar_vocab']}, d_model {c['d_model']}, "
               f"J {c['J_param']}{c.get('J_band') or ''}{engine}\n\n| | softmax | hJ | h | J |\n|---|---|---|---|---|\n")
        md += means_row("recall accuracy (%)", named) + "\n"
        md += compare_rows([("hJ − softmax", R.get("hJ") or {}, R.get("softmax") or {}),
                            ("hJ − h", R.get("hJ") or {}, R.get("h") or {})])
        if "softmax" not in c["variants"]:
            md += ("\nsoftmax and h are the runs of the same seeds in the toeplitz cell of this T, pairs and vocabulary "
                   "(their models differ from this cell's only in the shape of an unused J parameter).\n")
    return md


WRITERS = {"pairwise": ("A fair pairwise control: a learned position-pair field B[i, j]", _pairwise),
           "seeds10": ("Ten seeds for the brackets-hard headline cells", _seeds10),
           "tuning": ("Tuning at T = 16 and 64: validation accuracy of every setting", _tuning),
           "tuned": ("Tuned against untuned, fresh seeds, test accuracy", _tuned),
           "mqar": ("Multi-query associative recall (MQAR)", _mqar),
           "capacity": ("Capacity: parameters per configuration", capacity_readme)}


def unfinished(root: str, part: str) -> list[dict]:
    """The part's cells still training (no results.json), as :func:`load_cells` reads a cell, with the runs
    their ``metrics.jsonl`` logs as finished (a row at the last step); ``in_progress`` marks them."""
    import json

    out = []
    for path in sorted(glob.glob(os.path.join(glob.escape(root), part, "*", "cell.json"))):
        folder = os.path.dirname(path)
        log = os.path.join(folder, "metrics.jsonl")
        if os.path.exists(os.path.join(folder, "results.json")):
            continue
        cell = {**json.load(open(path)), "folder": folder, "in_progress": True}
        started = os.path.exists(log)  # a cell whose first run is still training has no log yet
        cell["results"] = logged_results(cell) if started else {}
        cell["wall_s"] = wall_seconds(folder, finished_runs(cell)) if started else 0.0
        out.append(cell)
    return out


CORES = 2  # the machine that trained these parts: 2 CPU cores, shared with other work
ISSUE_PART = {"tuning": 2, "tuned": 2, "pairwise": 3, "seeds10": 4, "capacity": 5, "mqar": 6}  # the numbering of the audit that asked for them


def _spent(mine) -> tuple:
    """(finished runs, wall-clock seconds, cells still training) of a part's cells."""
    return sum(len(finished_runs(c)) for c in mine), _seconds(mine), sum(bool(c.get("in_progress")) for c in mine)


def compute(root: str) -> dict:
    """``{part: (finished runs, wall-clock seconds, cells still training)}`` from the cells' files under ``root``."""
    every = load_cells(root)
    return {part: _spent([c for c in every + unfinished(root, part) if c["part"] == part]) for part in PARTS}


def compute_table(root: str) -> str:
    """``root/compute.md``: :func:`compute` with core-hours (wall-clock × ``CORES``: an upper bound, since
    training ran niced beside other work and at times paused)."""
    spent = compute(root)
    rows = [f"| {ISSUE_PART[p]} | {p} | {WRITERS[p][0]} | {n} | {s / 3600:.1f} | {CORES * s / 3600:.1f} | {k or '—'} |"
            for p, (n, s, k) in spent.items()]
    total = [sum(x[0] for x in spent.values()), sum(x[1] for x in spent.values()) / 3600]
    text = ("# Compute spent per part (issue 32)\n\nGenerated by `isingattn_study.parts` from the cells' "
            "`wall_time.json` and `metrics.jsonl` (a cell still training: its finished runs). Core-hours are "
            f"wall-clock hours × {CORES} cores, an upper bound on the CPU time of the runs counted: training ran at "
            "the lowest priority beside other work, and was paused (not stopped) while the test suite ran. A run "
            "killed before it finished (a session's end) is counted from its last start only. The study's own "
            "cells (the paper's grid and the confirmations before issue 32) and the retraining for learned "
            "couplings are not counted.\n\n"
            "| issue part | part | what | finished runs | wall-clock hours | core-hours (at most) | cells still training |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows)
            + f"\n| | all | | {total[0]} | {total[1]:.1f} | {CORES * total[1]:.1f} | |\n")
    atomic.write_text(os.path.join(root, "compute.md"), text)
    return text


def write_part(root: str, part: str) -> str:
    """``root/<part>/README.md`` from the part's cells (those still training: their finished runs) and the
    study's cells it pairs against."""
    every = load_cells(root) + unfinished(root, part)
    mine = [c for c in every if c["part"] == part]
    title, body = WRITERS[part]
    runs, seconds, _ = _spent(mine)
    text = (f"# {title}\n\nGenerated by `isingattn_study.parts` from the files of `results/reproduce` "
            f"(issue 32). Mean ± 95% CI (Student t) over seeds; paired Δ by seed. Training time of this part's "
            f"cells: {seconds / 60:.1f} minutes of wall-clock time over {runs} finished runs ({CORES} CPU cores "
            f"shared with other work, at times paused: at most {CORES * seconds / 3600:.1f} core-hours; all "
            "parts in `results/reproduce/compute.md`).\n\n"
            + body(root, mine, every))
    partial = [os.path.relpath(c["folder"], root) for c in mine if c.get("in_progress")]
    if partial:
        text += (f"\n**Still training** (their finished runs only are shown): {', '.join(partial)}. Rerun "
                 f"`python -m isingattn_study.parts --only {part}` (or `isingattn reproduce --only {part}`) to "
                 "finish them; it resumes run by run.\n")
    todo = [c.name for c in cells() if c.part == part and not os.path.exists(os.path.join(root, c.name, "cell.json"))]
    if todo:
        text += (f"\n**Not yet run** (defined in `parts.cells()`; `python -m isingattn_study.parts --cell NAME` "
                 f"runs one): {', '.join(todo)}.\n")
    os.makedirs(os.path.join(root, part), exist_ok=True)
    atomic.write_text(os.path.join(root, part, "README.md"), text)
    compute_table(root)
    controls.plot(every, *tuned_results([c for c in every if c["part"] == "tuned" and c["seq_len"] == 16]),
                  os.path.join(root, "controls.png"))
    return text


def main(argv=None) -> int:
    """``python -m isingattn_study.parts [--only PART] [--cell NAME] [--variants a,b] [--report-only]``:
    run these parts' cells (resumable, as ``isingattn reproduce`` does) and write their READMEs."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m isingattn_study.parts")
    ap.add_argument("--only", choices=PARTS)
    ap.add_argument("--cell")
    ap.add_argument("--variants", help="run only these variants of the cells (comma-separated)")
    ap.add_argument("--root", default="results/reproduce")
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args(argv)
    todo = [c for c in cells() if (a.only in (None, c.part)) and a.cell in (None, c.name)]
    for cell in [] if a.report_only else todo:
        # a variant that diverged in a cell is not retried (its cell ran without it, as its commands.txt says)
        vs = tuple(v for v in cell.variants if (cell.name, v) not in DIVERGED
                   and (not a.variants or v in a.variants.split(",")))
        if not vs:
            continue
        if vs != cell.variants:
            cell = dataclasses.replace(cell, variants=vs)
        print(f"{cell.name}: {', '.join(cell.variants)}", flush=True)
        run_cell(cell, os.path.join(a.root, cell.name), progress=False,
                 command=f"python -m isingattn_study.parts --cell {cell.name}"
                         + (f" --variants {a.variants}" if a.variants else ""))
    for part in sorted({c.part for c in todo} | ({"capacity"} if a.only in (None, "capacity") else set())):
        write_part(a.root, part)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
