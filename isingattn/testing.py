"""Float64 brute-force references for tests of every engine (independent of the
engines: plain numpy enumeration of all ``2^n`` configurations)."""

from __future__ import annotations

import itertools

import numpy as np



def all_spins(n: int) -> np.ndarray:
    """``[2^n, n]`` float64 table of every configuration."""
    return np.array(list(itertools.product([1.0, -1.0], repeat=n))).reshape(2**n, n)


def brute_force(h, J, beta=1.0, mask=None):
    """Exact statistics of one model in float64.

    h: [n], J: [n, n], mask: [n] bool or None. Inactive spins are removed.
    Returns dict(mean [n], corr [n, n], log_z, probs [2^m], spins [2^m, m], active).
    """
    h, J = np.asarray(h, np.float64), np.asarray(J, np.float64)
    n = h.shape[0]
    act = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
    idx = np.flatnonzero(act)
    hs, Js = h[idx], J[np.ix_(idx, idx)]
    S = all_spins(len(idx))
    E = -S @ hs - 0.5 * np.einsum("ci,ij,cj->c", S, Js, S)
    logw = -beta * E
    mx = logw.max()
    w = np.exp(logw - mx)
    log_z = mx + np.log(w.sum())
    p = w / w.sum()
    mean = np.zeros(n)
    mean[idx] = p @ S
    corr = np.zeros((n, n))
    corr[np.ix_(idx, idx)] = np.einsum("c,cj,ck->jk", p, S, S)
    return dict(mean=mean, corr=corr, log_z=log_z, probs=p, spins=S, active=act)


def brute_force_batch(h, J, beta=1.0, mask=None) -> dict:
    """:func:`brute_force` over every batch element. h [..., n], J [..., n, n] and mask
    [..., n] broadcast; returns mean [..., n], corr [..., n, n], log_z [...]."""
    h, J = np.asarray(h, np.float64), np.asarray(J, np.float64)
    n = h.shape[-1]
    shapes = [h.shape[:-1], J.shape[:-2]] + ([] if mask is None else [np.shape(mask)[:-1]])
    batch = np.broadcast_shapes(*shapes)
    hb, Jb = np.broadcast_to(h, batch + (n,)), np.broadcast_to(J, batch + (n, n))
    mb = None if mask is None else np.broadcast_to(mask, batch + (n,))
    out = dict(mean=np.zeros(batch + (n,)), corr=np.zeros(batch + (n, n)), log_z=np.zeros(batch))
    for idx in np.ndindex(*batch):
        r = brute_force(hb[idx], Jb[idx], beta, None if mb is None else mb[idx])
        for k in out:
            out[k][idx] = r[k]
    return out


def chi_square_p(draws, probs) -> float:
    """p-value of Pearson's chi-square test of ``draws [S, m]`` (±1) against ``probs [2^m]`` in
    the order of :func:`all_spins`; cells expected below 5 are pooled into one."""
    from scipy import stats

    m = draws.shape[1]
    idx = ((np.asarray(draws) < 0).astype(np.int64) * (2 ** np.arange(m - 1, -1, -1))).sum(-1)
    counts = np.bincount(idx, minlength=2**m).astype(float)
    expected = probs * len(idx)
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    stat = np.sum((obs[keep] - exp[keep]) ** 2 / exp[keep])
    return float(stats.chi2.sf(stat, keep.sum() - 1))
