"""The finished cells of a results folder, and what each cell's hJ is paired against.

A cell is read from ``<root>/<part>/<cell>/{cell.json, results.json, metrics.jsonl,
wall_time.json}`` as a dict: the fields of its ``Cell``, plus ``folder``, ``results``
(``results[variant][seed]``, finished runs only) and ``wall_s``.
"""

from __future__ import annotations

import glob
import json
import math
import os
from typing import Optional

from isingattn.models.app.report import mean_ci

# per task: the logged metric, its label, and the scale of the tables (accuracy in %)
METRIC = {"shakespeare": ("test_ppl", "validation perplexity", 1.0), "brackets": ("test_acc", "test accuracy (%)", 100.0),
          "brackets-hard": ("test_acc", "test accuracy (%)", 100.0), "mqar": ("test_acc", "recall accuracy (%)", 100.0)}

# Parts paired against one variant of another part's exact-engine cell (same task, T, FFN, steps, shape) rather
# than softmax: (reference part, variant, label). Where no such cell exists, the row falls back to softmax.
AGAINST = {"annealing": ("brackets", "hJ", "exact-trained hJ"),
           "annealing-hard": ("brackets-hard", "hJ", "exact-trained hJ"),
           "annealing-qpu": ("brackets-hard", "hJ", "exact-trained hJ"),
           "confounds": ("brackets-hard", "hJ", "hJ, J not decayed"),
           "meanfield": ("shakespeare-long", "hJ", "exact-trained hJ")}
# Parts whose cells may take softmax from another part's cell of the same shape when they lack it.
SOFTMAX_FROM = {"meanfield": "shakespeare-long", "confounds": "brackets-hard"}


def logged_seconds(folder: str, runs: set) -> float:
    """Each of ``runs`` ``{(variant, seed)}``'s last ``wall_s`` in metrics.jsonl, summed: counts the runs of a
    process killed mid-cell (which never adds to wall_time.json). ``wall_s`` restarts when a run resumes: a
    lower bound, like wall_time.json."""
    last = {}
    path = os.path.join(folder, "metrics.jsonl")
    for line in open(path, encoding="utf-8") if os.path.exists(path) else ():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        key = (rec.get("variant"), rec.get("seed"))
        if isinstance(rec.get("wall_s"), (int, float)) and key in runs:
            last[key] = max(last.get(key, 0.0), float(rec["wall_s"]))
    return sum(last.values()) if last else math.nan


def logged_results(cell) -> dict:
    """``{variant: {seed: metric}}`` (the task's metric, :data:`METRIC`) of the runs that the metrics.jsonl of
    ``cell["folder"]`` logs as finished (a row at step ``cell["steps"]``), whether or not results.json holds
    them (a cell still training, or a variant dropped after it diverged on a later seed)."""
    out: dict = {}
    metric = METRIC[cell["task"]][0]
    path = os.path.join(cell["folder"], "metrics.jsonl")
    for line in open(path, encoding="utf-8") if os.path.exists(path) else ():
        rec = json.loads(line)
        if rec.get("step") == cell["steps"]:
            out.setdefault(rec["variant"], {})[int(rec["seed"])] = rec[metric]
    return out


def wall_seconds(folder: str, runs: set) -> float:
    """A cell's training time as its report shows it (and ``reproduce`` prints it, a resumed cell too):
    the larger of ``wall_time.json`` (summed over the processes that trained the cell) and
    :func:`logged_seconds` of ``runs`` ``{(variant, seed)}``; both are lower bounds. nan without either."""
    wt = os.path.join(folder, "wall_time.json")
    known = [x for x in (json.load(open(wt))["seconds"] if os.path.exists(wt) else math.nan,
                         logged_seconds(folder, runs)) if not math.isnan(x)]
    return max(known) if known else math.nan


def load_cells(root: str) -> list[dict]:
    cells = []
    for path in sorted(glob.glob(os.path.join(root, "*", "*", "cell.json"))):
        folder = os.path.dirname(path)
        if not os.path.exists(os.path.join(folder, "results.json")):
            continue
        cell = json.load(open(path))
        cell["folder"] = folder
        # results.json holds the variants the cell finished with; a variant dropped after it diverged on a later
        # seed (``parts.DIVERGED``) keeps the seeds it finished before, from metrics.jsonl
        cell["results"] = {**logged_results(cell), **{
            v: {int(s): x for s, x in r.items()} for v, r in json.load(
                open(os.path.join(folder, "results.json"))).items()}}
        cell["wall_s"] = wall_seconds(folder, finished(cell))
        cells.append(cell)
    return cells


def finished(cell) -> set:
    """``{(variant, seed)}`` in results.json: the report reads no other run (one may still be training)."""
    return {(v, s) for v, r in cell["results"].items() for s in r}


def scale(cell) -> float:
    return METRIC[cell["task"]][2]


def paired(a: dict, b: dict):
    common = sorted(set(a) & set(b))
    return mean_ci([a[s] - b[s] for s in common]) + (len(common),) if common else (math.nan, math.nan, 0)


def same_shape(a, b) -> bool:
    """Same task, context, FFN, steps and model shape (and MQAR's pairs and vocabulary): runs whose seeds pair."""
    keys = ("task", "seq_len", "ffn", "steps", "d_model", "pairs", "mqar_vocab")
    return all(a.get(k) == b.get(k) for k in keys) and (a.get("layers", 1), a.get("heads", 1)) == (
        b.get("layers", 1), b.get("heads", 1))


def reference(cell, cells) -> tuple[Optional[dict], str, str]:
    """``(reference cell, variant, label)``: what ``cell``'s hJ is paired against (cell None when there is none).

    A part in AGAINST takes that variant of the reference part's exact cell; otherwise softmax, from
    :func:`sibling`."""
    part = cell["part"]
    if part in AGAINST:
        ref_part, variant, label = AGAINST[part]
        ref = next((x for x in cells if x["part"] == ref_part and x["engine"] == "exact" and same_shape(x, cell)
                    and variant in x["results"]), None)
        if ref is not None:
            return ref, variant, label
    return sibling(cell, cells, "softmax"), "softmax", "softmax"


def sibling(cell, cells, variant: str) -> Optional[dict]:
    """The cell whose ``variant`` pairs with ``cell``'s hJ: ``cell`` itself when it trained that variant, else a
    cell of the same shape in its part (or SOFTMAX_FROM's), where softmax and h are trained once per T (the
    banded-J cells, full J through mean field); None when there is none."""
    if variant in cell["results"]:
        return cell
    part = cell["part"]
    return next((x for x in cells if x["part"] in (part, SOFTMAX_FROM.get(part)) and same_shape(x, cell)
                 and variant in x["results"]), None)


def with_siblings(cell, cells, variants=("softmax", "hJ", "h", "J")) -> dict:
    """``{variant: results by seed or None}``: ``cell``'s own for the variants it trains or has finished runs
    of, :func:`sibling`'s for the others (a full-J MQAR cell trains hJ and J; softmax and h, which have no J,
    come from the toeplitz cell)."""
    own = set(cell.get("variants") or ()) | set(cell["results"])
    return {v: cell["results"].get(v) if v in own else (sib["results"][v] if (sib := sibling(cell, cells, v)) else None)
            for v in variants}


def baseline(cell, cells) -> tuple[Optional[dict], str]:
    """``(results by seed, label)`` that ``cell``'s hJ is paired against (None when there is none): see
    :func:`reference`."""
    ref, variant, label = reference(cell, cells)
    return (ref["results"][variant] if ref is not None else None), label
