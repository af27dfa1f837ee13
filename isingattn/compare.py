"""Side-by-side comparison of inference engines on one coupling graph."""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from typing import Mapping, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import atomic
from isingattn.engine import Engine, get
from isingattn.errors import IsingInputError
from isingattn.inference.exact.engine import EXACT_MAX_N
from isingattn.marginals import Marginals
from isingattn.model import IsingModel

KL_MAX_N = 16


def _exact_log_probs(model: IsingModel):
    """log p(s) over all 2^n states (table order of ``spin_table``), via the shared energy."""
    from isingattn.energy import spin_table

    S = spin_table(model.n, model.dtype)
    logw = -model.beta * model.energy(S)
    return logw - jax.scipy.special.logsumexp(logw)


def _state_index(samples):
    """±1 samples [..., n] -> row of ``spin_table`` (s=+1 is bit 0, first spin most significant)."""
    bits = (np.asarray(samples) < 0).astype(np.int64)
    return bits @ (1 << np.arange(bits.shape[-1] - 1, -1, -1))


# Exact references, cheapest first, each with the settings compare runs it with: tried in turn
# on the model (registry names; an engine not registered is passed over), the first that
# accepts the model is the reference.
EXACT_REFERENCES = (("exact", {"corr": True}), ("banded", {"bandwidth": None, "corr": True}),
                    ("junction-tree", {}), ("planar", {}))


def choose_reference(model: IsingModel) -> tuple:
    """The exact reference that applies to ``model`` (one model), and why.

    Tries :data:`EXACT_REFERENCES` in order: ``Exact`` for ``n ≤ EXACT_MAX_N``; ``Banded`` when
    the couplings lie within a band it can sweep; the junction tree when the graph's width fits
    its memory budget; ``Planar`` for a zero-field planar graph or lattice torus (log Z and edge
    correlations). Returns ``(name, engine, reason)``, the engine prepared for the model;
    ``reason`` says why it was chosen and why those before it were not. Raises
    :class:`IsingInputError` with every refusal when none applies."""
    from isingattn.engine import available

    refused = []
    for name, config in EXACT_REFERENCES:
        if name not in available():
            continue
        if name == "exact" and model.n > EXACT_MAX_N:
            refused.append(f"exact: n = {model.n} > {EXACT_MAX_N} spins")
            continue
        try:
            engine = get(name, **config).prepared(model)
        except IsingInputError as e:
            refused.append(f"{name}: {' '.join(str(e).split())}")
            continue
        why = {"exact": f"n = {model.n} ≤ {EXACT_MAX_N}: enumeration",
               "banded": f"couplings within a band of width {getattr(engine, 'bandwidth', '?')}",
               "junction-tree": "the graph's elimination width fits the memory budget",
               "planar": "zero fields on a planar graph or lattice torus"}.get(name, "it accepts the model")
        reason = f"{name} ({why})" + (f"; not {'; not '.join(refused)}" if refused else "")
        return name, engine, reason
    raise IsingInputError("no exact reference applies to this model (" + "; ".join(refused) + "). Pass an "
                          "approximate engine as the reference, e.g. --reference gibbs or reference='gibbs' (errors "
                          "are then relative to it).")


class Comparison(list):
    """The rows of :func:`compare` (a list of dicts), plus the reference they are scored
    against: ``reference`` (its :class:`~isingattn.marginals.Marginals`) and
    ``reference_name``, so callers (e.g. a plot) need not run the reference again."""

    def __init__(self, rows, reference: Marginals, reference_name: str, reference_reason: str = ""):
        super().__init__(rows)
        self.reference = reference
        self.reference_name = reference_name
        self.reference_reason = reference_reason


def compare(model: IsingModel, engines: Union[Mapping[str, Engine], Sequence[Union[str, Engine]]], *,
            key: jax.Array, reference: Union[str, Engine, None] = None, progress: bool = False,
            log_z_reference=None, reference_reason: str = "") -> Comparison:
    """Run every engine on ``model`` (one unbatched model) and score it against a reference.

    The reference is the exact engine that applies (:func:`choose_reference`: Exact, Banded,
    the junction tree or Planar; ``.reference_reason`` says which and why) when ``reference``
    is None or ``"auto"``; ``Exact(corr=True)`` for ``"exact"`` (``n ≤ EXACT_MAX_N``),
    ``"tree"`` for dwave-samplers' exact
    TreeDecompositionSampler (low treewidth: trees, strips), else the engine given (a
    registry name or an engine, e.g. a long Gibbs run, whose ``info["mcse"]`` then says
    how precise the errors are). ``progress`` prints a line per engine to stderr. Each row: ``engine``, ``max_err`` / ``mean_err`` (marginals),
    ``corr_err`` (max off-diagonal ``|Δ⟨s_j s_k⟩|``, when the engine reports ``corr``),
    ``kl`` (KL(empirical ‖ exact) of the sample distribution, samplers with n ≤ 16) and
    ``kl_floor`` (the same for as many exact draws: the finite-sample bias to compare with),
    ``ess`` (min over spins, when reported), ``wall_s`` (after compile) and
    ``compile_s``, plus the engine's ``mean [n]``; and, for engines that give ``log Z``,
    ``log_z``, ``log_z_kind``, ``log_z_se`` (the engine's standard error, where it has
    one) and ``log_z_err`` (``log_z`` minus the reference's). The reference's ``log Z`` is
    ``log_z_reference`` when given (a float, or ``(value, se)``, e.g. Kaufman's exact value
    from :func:`isingattn.onsager.torus_log_z`, or a long AIS run with its SE), else the
    reference engine's (Exact, the tree solver, Banded, an AIS engine). What each engine says
    of itself is in every row too: ``converged`` (its flag; None without one), ``mcse`` (its
    largest standard error of a marginal), ``err_z`` (the largest ``|Δ⟨s_j⟩| / MCSE_j``),
    ``log_z_z`` (``Δ log Z`` over the engines' combined SE) and ``warnings``; an engine's
    failed checks, traced under the jit that compare runs it in, are raised here, once per
    engine. Returns a
    :class:`Comparison`: the list of rows, with the reference's marginals as
    ``.reference`` and its log Z as ``.reference_log_z`` (``(value, se)``; NaN where none).
    """
    from isingattn.inference.exact.engine import Exact

    if model.batch_shape:
        raise IsingInputError(f"compare takes one model; got batch shape {model.batch_shape}. Use "
                              "model.to_bqm(index) and IsingModel.from_bqm, or index h and J.")
    if isinstance(engines, Mapping):
        items = list(engines.items())
    else:
        items = [(e, get(e)) if isinstance(e, str) else (type(e).__name__, e) for e in engines]
    reason = reference_reason  # the caller's words for a reference it chose (choose_reference)
    if reference is None or reference == "auto":
        ref_name, ref_engine, reason = choose_reference(model)
    elif not isinstance(reference, str):
        ref_name, ref_engine = type(reference).__name__, reference
    elif reference == "tree":
        ref_name, ref_engine = reference, _TreeReference()
    elif reference == "exact":
        if model.n > EXACT_MAX_N:
            raise IsingInputError(
                f"n = {model.n} is too large for an exact reference (at most {EXACT_MAX_N} spins); "
                "pass reference='<engine name>' (an approximate engine, e.g. 'gibbs'; errors are then relative to it).")
        ref_name, ref_engine = reference, Exact(corr=True)
    else:
        ref_name, ref_engine = reference, get(reference)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
    keys = jax.random.split(key, len(items) + 1)
    t0 = time.perf_counter()
    ref = ref_engine.marginals(model, key=keys[-1])
    ref_mean = np.asarray(ref.mean)
    say(f"reference {reason or ref_name}: {time.perf_counter() - t0:.1f} s")
    if log_z_reference is not None:
        ref_lz = tuple(log_z_reference) if isinstance(log_z_reference, (tuple, list)) else (log_z_reference, 0.0)
        ref_lz = (float(ref_lz[0]), float(ref_lz[1]))
    elif ref.log_z is not None:
        ref_lz = (float(ref.log_z), float(ref.info.get("log_z_se", 0.0)) if isinstance(ref.info, dict) else 0.0)
    else:
        ref_lz = (math.nan, math.nan)
    ref_corr = None if ref.corr is None else np.asarray(ref.corr)
    logp = np.asarray(_exact_log_probs(model)) if model.n <= KL_MAX_N else None

    rows = []
    for i, ((name, engine), k) in enumerate(zip(items, keys[:-1])):
        say(f"[{i + 1}/{len(items)}] {name} ...")
        # settings read from the concrete model (a bandwidth, a colouring) before tracing
        fn = jax.jit(lambda m, kk, e=engine.prepared(model): e.marginals(m, key=kk))
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(model, k))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(model, k))
        wall = time.perf_counter() - t0
        mean = np.asarray(out.mean)
        err = np.abs(mean - ref_mean)
        row = {"engine": name, "max_err": float(err.max()), "mean_err": float(err.mean()), "corr_err": math.nan,
               "kl": math.nan, "kl_floor": math.nan, "ess": math.nan, "wall_s": wall, "compile_s": max(first - wall, 0.0), "mean": mean}
        row.update(_own_estimates(engine, out, err))
        for category, message in row["warnings"]:  # raised under jit as traced flags: checked here, once per engine
            warnings.warn(f"compare, {name}: {message}", category, stacklevel=2)
        say(f"[{i + 1}/{len(items)}] {name}: {wall:.2f} s (+ {row['compile_s']:.1f} s compile), max err {row['max_err']:.2e}")
        if out.corr is not None and ref_corr is not None and model.n > 1:
            off = ~np.eye(model.n, dtype=bool)
            row["corr_err"] = float(np.abs(np.asarray(out.corr) - ref_corr)[off].max())
        if out.samples is not None and logp is not None:
            idx = _state_index(out.samples.reshape(-1, model.n))
            q = np.bincount(idx, minlength=2**model.n) / len(idx)
            nz = q > 0
            row["kl"] = float(np.sum(q[nz] * (np.log(q[nz]) - logp[nz])))
            # the empirical KL is biased upward by ~(states seen)/(2 N): show what exact draws give
            exact = jax.random.categorical(jax.random.fold_in(k, 1), jnp.asarray(logp), shape=(len(idx),))
            qe = np.bincount(np.asarray(exact), minlength=2**model.n) / len(idx)
            nze = qe > 0
            row["kl_floor"] = float(np.sum(qe[nze] * (np.log(qe[nze]) - logp[nze])))
        if isinstance(out.info, dict) and "ess" in out.info:
            row["ess"] = float(np.min(np.asarray(out.info["ess"])))
        row.update(log_z=math.nan, log_z_err=math.nan, log_z_se=math.nan, log_z_kind="", log_z_z=math.nan)
        if out.log_z is not None:
            row.update(log_z=float(out.log_z), log_z_err=float(out.log_z) - ref_lz[0],
                       log_z_kind=str(out.info.get("log_z_kind", "")),
                       log_z_se=float(out.info["log_z_se"]) if "log_z_se" in out.info else math.nan)
            se = math.hypot(row["log_z_se"], ref_lz[1]) if not math.isnan(row["log_z_se"]) else math.nan
            row["log_z_z"] = row["log_z_err"] / se if se > 0 else math.nan
        rows.append(row)
    result = Comparison(rows, ref, ref_name, reason)
    result.reference_log_z = ref_lz
    result.n, result.beta = model.n, float(model.beta)  # for a plot's title
    return result


def _own_estimates(engine, out: Marginals, err) -> dict:
    """What the engine says of its own result: ``converged`` (every model's flag; None when the
    engine has none), ``mcse`` (its largest standard error of a marginal), ``err_z`` (the largest
    ``|Δ⟨s_j⟩| / MCSE_j``: the error in units of the engine's own estimate) and ``warnings``
    (``[(category, message)]`` of its failed checks)."""
    info = out.info if isinstance(out.info, dict) else {}
    flag = info.get("converged")
    converged = None if flag is None else bool(np.all(np.asarray(flag)))
    mcse, err_z = math.nan, math.nan
    if "mcse" in info:
        se = np.asarray(info["mcse"], float)
        mcse = float(np.nanmax(se)) if np.isfinite(se).any() else math.nan
        ok = np.isfinite(se) & (se > 0)
        if ok.any():
            err_z = float(np.max(err[ok] / se[ok]))
    checks = engine.failed_checks(info) if hasattr(engine, "failed_checks") else []
    return {"converged": converged, "mcse": mcse, "err_z": err_z, "warnings": checks}


class _TreeReference:
    """dwave-samplers' TreeDecompositionSampler as a reference: exact marginals by variable
    elimination, in time exponential in the treewidth only (chains, trees, strips, small
    lattices)."""

    def marginals(self, model: IsingModel, *, key=None) -> Marginals:
        from dwave.samplers import TreeDecompositionSampler

        ss = TreeDecompositionSampler().sample(model.to_bqm(), beta=float(model.beta), marginals=True, num_reads=1)
        p_up = ss.info["variable_marginals"]  # {label: P(s = +1)}
        labels = list(model.labels) if model.labels is not None else list(range(model.n))
        return Marginals(mean=jnp.asarray([2 * p_up[v] - 1 for v in labels], model.dtype),
                         log_z=jnp.asarray(ss.info["log_partition_function"], jnp.float64))


_COLS = [("engine", "engine", "{}"), ("max_err", "max err ⟨s⟩", "{:.2e}"), ("mean_err", "mean err ⟨s⟩", "{:.2e}"),
         ("corr_err", "max err ⟨ss⟩", "{:.2e}"), ("kl", "KL(samples‖p)", "{:.3g}"),
         ("kl_floor", "KL of exact draws", "{:.3g}"), ("ess", "min ESS", "{:.0f}"),
         ("log_z", "log Z", "{:.6g}"), ("log_z_err", "Δ log Z", "{:+.2e}"), ("log_z_se", "SE log Z", "{:.2e}"),
         ("log_z_z", "Δ log Z/SE", "{:+.2g}"),
         ("wall_s", "time (s)", "{:.3g}"), ("compile_s", "compile (s)", "{:.3g}"),
         # what each engine says of itself: its convergence flag, its own error estimate, the error in its units
         ("converged", "converged", "{}"), ("mcse", "max MCSE", "{:.2e}"), ("err_z", "max err/MCSE", "{:.2g}")]


def format_table(rows: Sequence[dict], markdown: bool = True) -> str:
    """Rows of :func:`compare` as a markdown (or plain-text) table; '—' where not applicable."""
    def cell(r, k, f):
        v = r.get(k, math.nan)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "—"
        if isinstance(v, bool):
            return "yes" if v else "NO"
        return f.format(v)

    table = [[h for _, h, _ in _COLS]] + [[cell(r, k, f) for k, _, f in _COLS] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(_COLS)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in table[1:]])
    w = [max(len(r[i]) for r in table) for i in range(len(_COLS))]
    fmt_row = lambda r: "  ".join(c.ljust(w[i]) for i, c in enumerate(r))
    return "\n".join([fmt_row(table[0]), "  ".join("-" * x for x in w)] + [fmt_row(r) for r in table[1:]])


EXACT_ERR = 1e-12  # a max error at or below this is an exact engine's (0, or float rounding)


def _label_points(ax, xy, texts, colors):
    """Write ``texts`` beside the points ``xy`` (data coordinates), each at the first of a few offsets where
    it overlaps no label placed before it and no point: no label hides another."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    pts = ax.transData.transform(np.asarray(xy, float))
    taken = [Bbox([[x - 5, y - 5], [x + 5, y + 5]]) for x, y in pts]  # the markers
    offsets = [(6, 4), (6, -12), (-6, 4), (-6, -12), (6, 14), (6, -22), (-6, 14), (-6, -22), (6, 24), (-6, 24)]
    for (x, y), text, color in zip(xy, texts, colors):
        for dx, dy in offsets:
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=8, color=color,
                            ha="left" if dx > 0 else "right", annotation_clip=False)
            box = t.get_window_extent(renderer).expanded(1.05, 1.1)
            if not any(box.overlaps(b) for b in taken) and ax.bbox.contains(*box.min) and ax.bbox.contains(*box.max):
                taken.append(box)
                break
            t.remove()  # overlaps: the next offset (none free: the legend still names the engine)


def plot_comparison(rows: Sequence[dict], reference_mean, path: Optional[str] = None, title: Optional[str] = None):
    """Two panels: each engine's marginals against the reference, and its max error against time.

    An engine with no error (Exact against itself; at most ``EXACT_ERR``, float rounding) cannot sit on a log
    axis: it is drawn as a star on the axis floor, labelled "(0)", and the floor is set from the other
    engines' errors. ``title`` defaults to n and β (from a :class:`Comparison`, or n from the marginals)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.6))
    ref = np.asarray(reference_mean)
    ref_name = getattr(rows, "reference_name", "exact")
    a.plot([-1, 1], [-1, 1], "k:", lw=1)
    markers = "o^sDvP<>hX"
    look = {r["engine"]: (f"C{i % 10}", markers[i % len(markers)]) for i, r in enumerate(rows)}
    errs = [r["max_err"] for r in rows if r["max_err"] > EXACT_ERR]
    lo = 10 ** math.floor(math.log10(min(errs))) / 2 if errs else 1e-3
    hi = 10 ** math.ceil(math.log10(max(errs))) if errs else 1.0
    xy, texts, colors = [], [], []
    for r in rows:
        color, marker = look[r["engine"]]
        a.scatter(ref, r["mean"], s=16, color=color, marker=marker, label=r["engine"])
        exact = r["max_err"] <= EXACT_ERR
        y = lo if exact else r["max_err"]
        b.scatter(r["wall_s"], y, s=120 if exact else 40, color=color, marker="*" if exact else marker,
                  clip_on=False, zorder=3)
        xy.append((r["wall_s"], y))
        texts.append(f"{r['engine']} ({'0' if r['max_err'] == 0 else '< 1e-12'})" if exact else r["engine"])
        colors.append(color)
    a.set(xlabel=f"reference ⟨s_j⟩ ({ref_name})", ylabel="engine ⟨s_j⟩", title="marginals")
    a.legend(fontsize=8)
    b.set(xscale="log", yscale="log", ylim=(lo, hi), xlabel="wall time after compile (s)",
          ylabel=f"max |Δ⟨s_j⟩| against {ref_name}", title="error vs time (★ on the floor: no error)")
    if title is None:
        n, beta = getattr(rows, "n", len(ref)), getattr(rows, "beta", None)
        title = f"engines on n = {n} spins" + ("" if beta is None else f", β = {beta:g}")
    fig.suptitle(title)
    fig.tight_layout()
    _label_points(b, xy, texts, colors)  # after the layout: the axes no longer move
    if path:
        atomic.savefig(fig, path, dpi=120)
    return fig


def save_comparison(rows: Comparison, folder: str, title: str = "") -> None:
    """Write a :func:`compare` result into ``folder`` (created if missing), each file atomically:
    ``compare.md`` (``title``, then the markdown table of :func:`format_table`) and ``compare.png``
    (:func:`plot_comparison` against the reference's marginals)."""
    import matplotlib.pyplot as plt

    atomic.write_text(os.path.join(folder, "compare.md"), title + "\n\n" + format_table(rows) + "\n")
    plt.close(plot_comparison(rows, rows.reference.mean, os.path.join(folder, "compare.png")))
