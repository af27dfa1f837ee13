"""The static plan of a junction-tree contraction: cliques, messages, and the scans that run
them (DESIGN.md §3, "Junction tree / variable elimination"). Host-side numpy work on the graph
alone, cached per (graph, order).

**Cliques.** Eliminating spin ``v`` in the order joins its remaining neighbours ``N_v`` (its
separator) into a clique ``C_v = {v} ∪ N_v``; the message ``v`` sends is a table over ``N_v``
and goes to the clique of the first-eliminated spin of ``N_v`` (its parent: this is the
elimination tree). Each coupling ``(a, b)`` and field enters the clique of whichever endpoint
is eliminated first, as ``s_a (h_a + Σ_b J_ab s_b)``. A clique contained in its child's
(``C_p = N_c``) is merged into that child, which then sums out several spins at once: the
junction tree over maximal cliques, fewer and larger steps.

**Scans.** Every step is the same few array operations on a table of ``2^k`` entries, so
steps of one size run as one ``lax.scan`` with per-step index arrays (compile time independent
of ``n``). Steps are scheduled children first, grouped by size, and runs of nearby sizes are
merged into one scan padded to the largest (a padded separator slot is a dummy spin the message
does not depend on; a padded eliminated slot is a dummy spin pinned to +1): a few scans at
little extra work. Messages live in one flat buffer ``[M + 1, batch]`` (row ``M`` is a zero
message for padded children), each at a static offset; a step gathers its children's entries
with index arrays ``[C, 2^K]``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from isingattn.inference.junction_tree.order import adjacency

MAX_SEGMENTS = 10  # scans per pass at most (each is compiled once)
SCAN_COST = 2**12  # work (in table entries) that one more scan is worth: its compile time


@dataclass
class Step:
    """One elimination step: sum the spins ``elim`` out of a table over ``elim + sep``."""

    elim: list
    sep: list
    children: list = field(default_factory=list)  # step ids whose messages this step gathers

    @property
    def k(self) -> int:
        return len(self.elim) + len(self.sep)


@dataclass
class Segment:
    """Steps run by one scan, padded to ``R`` eliminated and ``K - R`` separator slots, with at
    most ``C`` children each. Arrays have a leading step axis ``[m, ...]``."""

    K: int
    R: int
    C: int
    steps: list
    off: np.ndarray  # [m] offset of each step's message (2^(K-R) rows) in the message buffer
    gidx: np.ndarray  # [m, C, 2^K] buffer row of each child's message entry, per table entry
    hidx: np.ndarray  # [m, R] the eliminated spins (n: a padded slot)
    widx: np.ndarray  # [m, R, K] edge coupling eliminated slot i to slot j (E: none)
    sidx: np.ndarray  # [m, K - R] the separator's spins (n: a padded slot)
    emask: np.ndarray  # [m, 2^R] 0 where the padded eliminated slots are +1, -inf elsewhere


def eliminate(n: int, edges: np.ndarray, order: list) -> list[Step]:
    """One step per spin in ``order``: its separator (sorted by elimination position)."""
    adj = adjacency(n, edges)
    pos = np.empty(n, np.int64)
    pos[np.asarray(order, np.int64)] = np.arange(n)
    steps = []
    for v in order:
        sep = sorted(adj[v], key=lambda u: pos[u])
        for u in sep:
            adj[u] |= adj[v]
            adj[u].discard(u)
            adj[u].discard(v)
        adj[v] = set()
        steps.append(Step([v], sep))
    return steps


def merge_cliques(steps: list[Step], n: int) -> list[Step]:
    """The junction tree of maximal cliques: a spin whose clique equals its child's separator is
    summed out by that child's step. Returns steps in a valid order (children first) with
    ``children`` filled in."""
    owner = {}  # spin -> index into out of the step that sums it out
    out: list[Step] = []
    by_spin = {s.elim[0]: s for s in steps}
    kids: dict[int, list[int]] = {}  # spin p -> steps (out indices) whose message goes to p's clique
    for s in steps:
        p = s.elim[0]
        mine = kids.pop(p, [])
        target = None
        for c in mine:  # a child whose separator is this whole clique absorbs it
            if set(out[c].sep) == {p} | set(s.sep):
                target = c
                break
        if target is None:
            out.append(Step([p], list(s.sep), list(mine)))
            idx = len(out) - 1
        else:
            t = out[target]
            t.elim.append(p)
            t.sep = list(s.sep)
            t.children.extend(c for c in mine if c != target)
            idx = target
        owner[p] = idx
        if s.sep:
            kids.setdefault(s.sep[0], []).append(idx)
    del by_spin, owner
    # out is in the order the steps were created; a merged step now runs where its last spin
    # is summed out, so reorder children first
    return _topological(out)


def _topological(steps: list[Step]) -> list[Step]:
    parent = {}
    for i, s in enumerate(steps):
        for c in s.children:
            parent[c] = i
    order, state = [], [0] * len(steps)
    for root in range(len(steps)):
        if root in parent:
            continue
        stack = [(root, False)]
        while stack:
            i, expanded = stack.pop()
            if expanded:
                order.append(i)
                continue
            stack.append((i, True))
            stack.extend((c, False) for c in steps[i].children)
    new = {old: k for k, old in enumerate(order)}
    return [Step(steps[i].elim, steps[i].sep, [new[c] for c in steps[i].children]) for i in order]


def _runs(steps: list[Step]) -> tuple[list[int], list[list]]:
    """A children-first schedule that keeps steps of one shape ``(r, k - r)`` together, and its
    runs ``[r, s, count, children]`` (s = separator size, children the most any step has)."""
    m = len(steps)
    parent = [-1] * m
    for i, s in enumerate(steps):
        for c in s.children:
            parent[c] = i
    pending = [len(s.children) for s in steps]
    shape = [(len(s.elim), len(s.sep)) for s in steps]
    ready: dict[tuple, list[int]] = {}
    for i in range(m):
        if pending[i] == 0:
            ready.setdefault(shape[i], []).append(i)
    sched, runs, cur = [], [], None
    while len(sched) < m:
        if not ready.get(cur):
            cur = min((sh for sh, v in ready.items() if v), key=lambda sh: (sum(sh), sh))
            runs.append([cur[0], cur[1], 0, 1])
        i = ready[cur].pop()
        sched.append(i)
        runs[-1][2] += 1
        runs[-1][3] = max(runs[-1][3], len(steps[i].children))
        p = parent[i]
        if p >= 0:
            pending[p] -= 1
            if pending[p] == 0:
                ready.setdefault(shape[p], []).append(p)
    return sched, runs


def _segments(runs: list[list]) -> list[tuple[int, int]]:
    """Split consecutive runs into at most MAX_SEGMENTS scans: ``[(first run, end run)]`` of least
    work plus SCAN_COST per scan. A step's work is its padded table times the gathers it makes
    (one per child slot) and about two more passes (its potential, the log-sum-exp)."""
    R = len(runs)
    inf = float("inf")
    best = [[inf] * (MAX_SEGMENTS + 1) for _ in range(R + 1)]
    back = [[0] * (MAX_SEGMENTS + 1) for _ in range(R + 1)]
    best[0][0] = 0.0
    for i in range(1, R + 1):
        for s in range(1, MAX_SEGMENTS + 1):
            r = sep = cnt = kids = 0
            for j in range(i - 1, -1, -1):
                r, sep, cnt, kids = max(r, runs[j][0]), max(sep, runs[j][1]), cnt + runs[j][2], max(kids, runs[j][3])
                c = best[j][s - 1] + cnt * 2.0 ** (r + sep) * (kids + 2) + SCAN_COST
                if c < best[i][s]:
                    best[i][s], back[i][s] = c, j
    s = min(range(MAX_SEGMENTS + 1), key=lambda s: best[R][s])
    cuts, i = [], R
    while i > 0:
        j = back[i][s]
        cuts.append((j, i))
        i, s = j, s - 1
    return cuts[::-1]


def _bits(x: np.ndarray, K: int, pos) -> np.ndarray:
    """Bit of table position ``pos`` (0: the most significant) of every index ``x``: [len(x), len(pos)]."""
    return (x[:, None] >> (K - 1 - np.asarray(pos, np.int64))[None, :]) & 1


class Plan:
    """The contraction of one graph in one elimination order.

    Attributes:
        n, E: spins and edges of the graph.
        order: ``[n]`` the spins in the order they are summed out.
        treewidth: the width of this elimination (largest clique minus one).
        segments: the scans, in execution order.
        M: columns of the message buffer (the live messages at their offsets); column ``M`` is the
            zero message.
        roots: ``[R]`` offsets of the messages of root cliques (their sum is log Z).
        entries: table entries per model over all steps, padding included (the work of a pass).
        exact_entries: ``Σ 2^{|C|}`` over the maximal cliques, without padding.
    """

    def __init__(self, n: int, edges: np.ndarray, order: list, heuristic: str = "given"):
        edges = np.asarray(edges, np.int64).reshape(-1, 2)
        self.n, self.E, self.heuristic = n, edges.shape[0], heuristic
        raw = eliminate(n, edges, order)
        self.treewidth = max((len(s.sep) for s in raw), default=0)
        steps = merge_cliques(raw, n)
        sched, runs = _runs(steps)
        self.exact_entries = int(sum(2 ** s.k for s in steps))
        where = {old: k for k, old in enumerate(sched)}
        steps = [Step(steps[i].elim, steps[i].sep, [where[c] for c in steps[i].children]) for i in sched]
        self.order = np.asarray([v for s in steps for v in s.elim], np.int64)
        # edges by the step and slot of the endpoint summed out first
        done_at = {}
        for i, s in enumerate(steps):
            for r, v in enumerate(s.elim):
                done_at[v] = (i, r)
        cuts = _segments(runs)
        bounds = np.cumsum([0] + [run[2] for run in runs])
        seg_of_step, dims = np.zeros(len(steps), np.int64), []
        for q, (a, b) in enumerate(cuts):
            R = max(runs[j][0] for j in range(a, b))
            S = max(runs[j][1] for j in range(a, b))
            seg_of_step[bounds[a]:bounds[b]] = q
            dims.append((R + S, R))
        # Message slots are reused once read: a message lives from its step to its parent's, so the
        # buffer holds the live messages only (a few for a path-like tree). A step takes its slot
        # before freeing its children's, so it never writes over a message it reads.
        off, M, free = np.zeros(len(steps), np.int64), 0, {}
        size = lambda i: 2 ** (dims[seg_of_step[i]][0] - dims[seg_of_step[i]][1])
        for i in range(len(steps)):
            if free.get(size(i)):
                off[i] = free[size(i)].pop()
            else:
                off[i], M = M, M + size(i)
            for c in steps[i].children:
                free.setdefault(size(c), []).append(off[c])
        self.M = int(M)
        self.roots = np.asarray([off[i] for i, s in enumerate(steps) if not s.sep], np.int64)
        self._steps, self._dims, self._cuts, self._bounds = steps, dims, cuts, bounds
        self._seg_of_step, self._off, self._edges, self._done_at = seg_of_step, off, edges, done_at
        self.entries = self.work = self.biggest = 0
        for q, (a, b) in enumerate(cuts):
            K, R = dims[q]
            m = int(bounds[b] - bounds[a])
            C = max(1, max(len(steps[i].children) for i in range(bounds[a], bounds[b])))
            self.entries += m * 2**K
            self.work += m * 2**K * (C + 2)
            self.biggest = max(self.biggest, 2**K * (C + 3))

    @functools.cached_property
    def segments(self) -> list[Segment]:
        """The scans with their index arrays (built on first use: their size is the plan's work,
        so a plan refused for its width never builds them)."""
        steps, dims, bounds, off, n, M = self._steps, self._dims, self._bounds, self._off, self.n, self.M
        seg_of_step, done_at = self._seg_of_step, self._done_at
        edge_slot = {}  # step -> list of (eliminated slot, other spin, edge)
        for e, (a, b) in enumerate(self._edges.tolist()):
            first, other = (a, b) if done_at[a] < done_at[b] else (b, a)
            i, r = done_at[first]
            edge_slot.setdefault(i, []).append((r, other, e))
        it = np.int32 if M < 2**31 - 1 else np.int64
        segments = []
        for q, (a, b) in enumerate(self._cuts):
            K, R = dims[q]
            ids = list(range(bounds[a], bounds[b]))
            C = max(1, max(len(steps[i].children) for i in ids))
            m = len(ids)
            x = np.arange(2**K, dtype=np.int64)
            gidx = np.full((m, C, 2**K), M, it)
            hidx = np.full((m, R), n, np.int32)
            sidx = np.full((m, K - R), n, np.int32)
            widx = np.full((m, R, K), self.E, np.int32)
            emask = np.zeros((m, 2**R))
            for t, i in enumerate(ids):
                s = steps[i]
                r = len(s.elim)
                slot = {v: p for p, v in enumerate(s.elim)}
                slot.update({v: R + p for p, v in enumerate(s.sep)})
                for c_n, c in enumerate(s.children):
                    Kc, Rc = dims[seg_of_step[c]]
                    csep = steps[c].sep
                    bits = _bits(x, K, [slot[v] for v in csep])  # [2^K, len(csep)]
                    y = bits @ (1 << (Kc - Rc - 1 - np.arange(len(csep), dtype=np.int64)))
                    gidx[t, c_n] = off[c] + y
                hidx[t, :r] = s.elim
                sidx[t, : len(s.sep)] = s.sep
                for (ri, other, e) in edge_slot.get(i, []):
                    widx[t, ri, slot[other]] = e
                if R > r:
                    pad = _bits(np.arange(2**R, dtype=np.int64), R, list(range(r, R))).any(axis=1)
                    emask[t] = np.where(pad, -np.inf, 0.0)
            segments.append(Segment(K, R, C, ids, off[ids].astype(it), gidx, hidx, widx, sidx, emask))
        return segments

    def table_bytes(self, batch: int, itemsize: int) -> int:
        """Memory of the contraction for ``batch`` models: the saved tables of every step (read
        by the downward pass), the message buffer and its cotangent, and the gathered children of
        the largest step."""
        return int(batch * itemsize * (self.entries + 2 * (self.M + 1) + self.biggest))

    def __repr__(self):
        shapes = ", ".join(f"{int(self._bounds[b] - self._bounds[a])}×(K={K}, R={R})"
                           for (a, b), (K, R) in zip(self._cuts, self._dims))
        return (f"Plan(n={self.n}, E={self.E}, treewidth={self.treewidth}, heuristic={self.heuristic!r}, "
                f"entries={self.entries}, scans=[{shapes}])")
