"""The expanded (dimer) graph of a zero-field Ising model and its Kasteleyn orientation.

High-temperature expansion: ``Z = 2^n Π_e cosh(βJ_e) · Σ_{F even} Π_{e∈F} t_e`` with
``t_e = tanh(βJ_e)``, the sum over even subgraphs ``F`` (every spin has an even number of
edges of ``F``). Replace every spin by a *city*: one terminal per incident edge plus inner
nodes, such that for every even set of terminals matched outward (along their edge, weight
``t_e``) the rest of the city has exactly one perfect matching (weight 1). Then even subgraphs
and perfect matchings of the expanded graph correspond one to one, with equal weights, and on a
planar graph a Kasteleyn orientation (every inner face has an odd number of edges oriented
clockwise) gives all matchings one sign: ``Σ_F Π t = |Pf(K)|`` with ``K`` the oriented,
weighted skew adjacency matrix (Kasteleyn 1963; Fisher 1966).

Two constructions:

* **Square lattice** (open or torus, spins in ``graphs.lattice((L, M))`` order): 4 terminals
  per spin (W, N, E, S) with the fixed skew block of :data:`_CITY`, every horizontal edge
  oriented E→W (rightward), every vertical one S→N (downward). ``_CITY`` is the Schur
  complement of Fisher's 6-node city (two triangles W-N-p, E-S-q joined by p-q), whose inner
  nodes p, q are eliminated: with the triangles oriented clockwise and p→q, each 12-edge
  plaquette face has 3 edges clockwise, so the orientation is Kasteleyn whatever the
  weights (zero weights only remove matchings).
* **Any planar graph**: networkx's ``check_planarity`` gives a rotation system; a spin of
  degree ``d ≥ 3`` becomes a chain of ``d - 2`` degree-3 gadgets (a centre joined to three
  terminals, two of them also joined; consecutive gadgets linked by a weight-1 edge), a
  spin of degree 2 a single edge. The expanded graph is embedded again and oriented face by
  face along the dual of a spanning tree (:func:`kasteleyn_orientation`). Bridges are in no
  even subgraph: they are left out (their correlation is ``t_e``).

On the ``L × M`` torus (genus 1) the wrap-around edges are added to the lattice's orientation.
An even subgraph's sign in ``Pf`` then depends on its homology class ``c ∈ Z₂²`` (the parities
of its horizontal and vertical wrap edges): ``Pf(K_ab) = s Σ_c (-1)^{a c₁ + b c₂} ε_c W_c``,
where ``K_ab`` flips the signs of the horizontal (``a``) and vertical (``b``) wrap edges and
``W_c`` sums the weights of class ``c``. So ``Σ_c W_c`` is a signed sum of the four Pfaffians.
The signs ``ε_c`` are properties of the orientation alone; :func:`class_signs` reads them off
one loop of each class.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import scipy.sparse as sp

from isingattn.inference.planar.pfaffian import SparseSkew, update_ratio

# Fixed skew block of the lattice city on terminals (W, N, E, S) = (0, 1, 2, 3): K[a, b] = v.
_CITY = ((0, 1, 1.0), (0, 2, -1.0), (0, 3, 1.0), (1, 2, 1.0), (1, 3, -1.0), (2, 3, 1.0))
W_, N_, E_, S_ = 0, 1, 2, 3

NOT_IN_K = -1  # edge_u of an edge left out of the expanded graph (a bridge: in no even subgraph)


class Dimer:
    """The expanded graph of a coupling graph: what ``K`` needs besides the weights.

    Attributes (numpy): ``N`` nodes; the weight-1 entries ``fixed = (rows, cols, vals)``
    (``K[r, c] = v``, ``K[c, r] = -v``); per coupling edge ``e`` (the graph's order), the
    nodes ``edge_u[e], edge_v[e]`` and orientation ``edge_sign[e]`` (``K[u, v] = sign · t_e``),
    ``edge_u = NOT_IN_K`` for edges left out; ``wrap [E]`` (0, or 1 / 2 for the horizontal /
    vertical wrap edges of a torus); ``kind`` ("lattice", "torus" or "planar") and
    ``shape`` (``(L, M)`` for the lattice kinds); ``class_sign`` (torus: ``ε_c`` for
    ``c = (c₁, c₂)`` as a ``[2, 2]`` array)."""

    def __init__(self, N, fixed, edge_u, edge_v, edge_sign, kind, shape=None, wrap=None):
        self.N = int(N)
        self.fixed = tuple(np.asarray(a) for a in fixed)
        self.edge_u, self.edge_v = np.asarray(edge_u, np.int64), np.asarray(edge_v, np.int64)
        self.edge_sign = np.asarray(edge_sign, np.float64)
        self.kind, self.shape = kind, shape
        self.wrap = np.zeros(self.edge_u.size, np.int8) if wrap is None else np.asarray(wrap, np.int8)
        self.class_sign = None

    @property
    def in_k(self):
        """``[E]`` bool: the edges that are entries of ``K``."""
        return self.edge_u != NOT_IN_K

    def matrix(self, t, flips=None, keep=None):
        """``K`` (scipy CSC) for edge weights ``t [E]``: ``flips`` ``[E]`` ±1 multiplies edge
        signs (the torus' boundary conditions), ``keep`` ``[E]`` bool selects the edges entered
        (default: all of ``K``'s)."""
        r, c, v = self.fixed
        on = self.in_k if keep is None else (self.in_k & keep)
        w = (t * self.edge_sign * (1.0 if flips is None else flips))[on]
        rows = np.concatenate([r, self.edge_u[on]])
        cols = np.concatenate([c, self.edge_v[on]])
        vals = np.concatenate([v, w])
        K = sp.coo_matrix((np.concatenate([vals, -vals]), (np.concatenate([rows, cols]), np.concatenate([cols, rows]))),
                          shape=(self.N, self.N))
        return K.tocsc()


# ---- square lattice and torus ------------------------------------------------------------

def lattice_kind(n: int, edges: np.ndarray):
    """``(kind, (L, M))`` when every edge ``(i < j)`` is a bond of the row-major ``L × M``
    lattice (``"lattice"``) or of its torus (``"torus"``, ``L, M ≥ 3``), for some ``L · M = n``;
    else None. The open lattice is preferred; among shapes, the first that fits."""
    i, j = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    d = j - i
    divisors = [M for M in range(1, n + 1) if n % M == 0]
    torus = None
    for M in divisors:
        L = n // M
        bond = ((d == 1) & (j % M != 0)) | ((d == M) & (L > 1))
        if bond.all():
            return "lattice", (L, M)
        if torus is None and L >= 3 and M >= 3:
            wrap = ((d == M - 1) & (i % M == 0)) | (d == (L - 1) * M)
            if (bond | wrap).all():
                torus = (L, M)
    return None if torus is None else ("torus", torus)


def build_lattice(n: int, edges: np.ndarray, kind: str, shape, signs: bool = True) -> Dimer:
    """The 4-terminal expanded graph of the row-major ``L × M`` lattice (``kind`` "lattice")
    or torus ("torus", with its ``class_sign`` unless ``signs`` is False) holding ``edges``."""
    L, M = shape
    wrap, (u, v) = _kinds(edges, shape, kind), _torus_nodes(edges, shape, kind)
    base = 4 * np.arange(n, dtype=np.int64)[:, None]
    a, b, w = (np.array(x) for x in zip(*_CITY))
    fixed = ((base + a).ravel(), (base + b).ravel(), np.broadcast_to(w, (n, w.size)).ravel().astype(np.float64))
    dimer = Dimer(4 * n, fixed, u, v, np.ones(edges.shape[0]), kind, shape, wrap)
    if kind == "torus" and signs:
        dimer.class_sign = class_signs(shape)
    return dimer


def _kinds(edges, shape, kind="torus"):
    """``[E]``: 0 for a lattice bond, 1 for a horizontal wrap edge, 2 for a vertical one."""
    L, M = shape
    i, j = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    d = j - i
    bond = ((d == 1) & (j % M != 0)) | ((d == M) & (L > 1))
    if kind != "torus":
        return np.zeros(d.size, np.int8)
    return np.where(bond, 0, np.where((d == M - 1) & (i % M == 0), 1, 2)).astype(np.int8)


def _torus_nodes(edges, shape, kind="torus"):
    """``(u, v)`` terminals of every edge: E→W for horizontal bonds and wraps (the wrap from
    column M-1 to column 0), S→N for vertical ones (the wrap from row L-1 to row 0)."""
    L, M = shape
    i, j = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    d = j - i
    wrap = _kinds(edges, shape, kind)
    horiz = (wrap == 0) & (d == 1) & (j % M != 0)
    vert = (wrap == 0) & ~horiz
    u = np.where(horiz, 4 * i + E_, np.where(vert, 4 * i + S_, np.where(wrap == 1, 4 * j + E_, 4 * j + S_)))
    v = np.where(horiz, 4 * j + W_, np.where(vert, 4 * j + N_, np.where(wrap == 1, 4 * i + W_, 4 * i + N_)))
    return u, v


def _torus_loops(L: int, M: int):
    """One simple loop of spins per nontrivial class: (1, 0) row 0, (0, 1) column 0, (1, 1)
    row 0, then down column M-1, across the horizontal wrap to (L-1, 0) and up the vertical
    wrap to (0, 0)."""
    idx = lambda r, c: r * M + c
    row = [idx(0, c) for c in range(M)]
    col = [idx(r, 0) for r in range(L)]
    both = row + [idx(r, M - 1) for r in range(1, L)] + [idx(L - 1, 0)]
    return {(1, 0): row, (0, 1): col, (1, 1): both}


def class_signs(shape) -> np.ndarray:
    """``ε_c`` of the ``L × M`` torus orientation, ``[2, 2]`` (``ε_00 = 1``). An edge's orientation
    depends on its position only, so the signs hold for any subset of the torus' bonds.

    For a class ``c``, put weight 1 on the non-wrap edges of one loop of class ``c``, ½ on
    its wrap edges and 0 elsewhere: the even subgraphs are the empty one and the loop, so
    ``Pf(K_00) / Pf(K_planar) = 1 + ε_c w`` with ``w`` the product of the wrap weights (¼ or ½),
    computed with the same signed low-rank update as the model's Pfaffians. Only the loop's
    cities matter (the others are the same block in both Pfaffians), so the matrices are small."""
    L, M = shape
    idx = np.arange(L * M).reshape(L, M)
    edges = np.concatenate([np.stack([idx.ravel(), np.roll(idx, -1, ax).ravel()], 1) for ax in (0, 1)])
    edges = np.sort(edges, axis=1)
    dimer = build_lattice(L * M, edges, "torus", shape, signs=False)
    key = {(int(a), int(b)): e for e, (a, b) in enumerate(edges.tolist())}
    eps = np.ones((2, 2))
    for c, loop in _torus_loops(L, M).items():
        cyc = loop + loop[:1]
        es = [key[tuple(sorted((cyc[k], cyc[k + 1])))] for k in range(len(loop))]
        t = np.zeros(edges.shape[0])
        t[es] = np.where(dimer.wrap[es] > 0, 0.5, 1.0)
        nodes = np.sort((4 * np.asarray(loop)[:, None] + np.arange(4)).ravel())
        sub = lambda K: K[nodes][:, nodes]
        planar = SparseSkew(sub(dimer.matrix(t, keep=dimer.wrap == 0)))
        wrap_e = [e for e in es if dimer.wrap[e] > 0]
        pos = np.searchsorted(nodes, np.ravel([[dimer.edge_u[e], dimer.edge_v[e]] for e in wrap_e]))
        G = planar.columns(pos, rows=pos)
        s, log_r = update_ratio(G, t[wrap_e] * dimer.edge_sign[wrap_e])
        ratio = s * np.exp(log_r)
        eps[c] = 1.0 if ratio > 1.0 else -1.0
    return eps


# ---- general planar graphs -------------------------------------------------------------------

def build_planar(n: int, edges: np.ndarray):
    """The expanded graph of a planar coupling graph (any labelling), or None when the graph is
    not planar."""
    import networkx as nx

    E = edges.shape[0]
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from(map(tuple, edges.tolist()))
    planar, emb = nx.check_planarity(G)
    if not planar:
        return None
    bridges = {frozenset(b) for b in nx.bridges(G)}
    keep = np.array([frozenset(e) not in bridges for e in edges.tolist()], bool)
    # terminals and city edges, from the rotation of each spin's non-bridge edges
    terminal: dict = {}
    inner: list = []  # (a, b) weight-1 edges
    count = [0]

    def node():
        count[0] += 1
        return count[0] - 1

    for v in range(n):
        nbrs = [w for w in emb.neighbors_cw_order(v) if frozenset((v, w)) not in bridges]
        d = len(nbrs)
        if d == 0:
            continue
        for w in nbrs:
            terminal[v, w] = node()
        if d == 2:
            inner.append((terminal[v, nbrs[0]], terminal[v, nbrs[1]]))
            continue
        groups = [nbrs[:2]] + [[w] for w in nbrs[2:d - 2]] + [nbrs[d - 2:]] if d > 3 else [nbrs]
        prev = None
        for k, grp in enumerate(groups):
            ports = [terminal[v, w] for w in grp]
            if prev is not None:
                ports = [node()] + ports
                inner.append((prev, ports[0]))
            if k < len(groups) - 1:
                prev = node()
                ports = ports + [prev]
            x = node()
            inner.extend((p, x) for p in ports)
            inner.append((ports[0], ports[1]))
    N = count[0]
    eu = np.full(E, NOT_IN_K, np.int64)
    ev = np.full(E, NOT_IN_K, np.int64)
    for e, (a, b) in enumerate(edges.tolist()):
        if keep[e]:
            eu[e], ev[e] = terminal[a, b], terminal[b, a]
    H = nx.Graph()
    H.add_nodes_from(range(N))
    H.add_edges_from(inner)
    H.add_edges_from(zip(eu[keep].tolist(), ev[keep].tolist()))
    orient = kasteleyn_orientation(H)
    sign = lambda a, b: 1.0 if orient[frozenset((a, b))] == (a, b) else -1.0
    rows = np.array([a for a, _ in inner], np.int64)
    cols = np.array([b for _, b in inner], np.int64)
    vals = np.array([sign(a, b) for a, b in inner])
    esign = np.array([sign(a, b) if keep[e] else 1.0 for e, (a, b) in enumerate(zip(eu.tolist(), ev.tolist()))])
    return Dimer(N, (rows, cols, vals), eu, ev, esign, "planar")


def kasteleyn_orientation(H) -> dict:
    """A Kasteleyn orientation of the planar graph ``H``: ``{frozenset((a, b)): (a, b)}``.

    Per component: orient a BFS spanning tree at will; the other edges form a spanning tree
    of the dual, whose faces (walks of a planar embedding, each traversed with the face on the
    same side) are closed leaf first, each given an odd number of edges oriented along its
    walk by its one edge still free. The root face is left as it is (it is the outer face of
    an embedding on the sphere). All walks keep their face on one side, so each inner face is
    traversed with one rotational sense: the orientation is Kasteleyn for the embedding or
    for its mirror image, and both are planar embeddings."""
    import networkx as nx

    orient: dict = {}
    for comp in nx.connected_components(H):
        if len(comp) < 2:
            continue
        C = H.subgraph(comp)
        _, emb = nx.check_planarity(C)
        face_of: dict = {}  # half-edge (a, b) -> face id
        faces: list = []
        for a, b in emb.edges():
            if (a, b) in face_of:
                continue
            walk = emb.traverse_face(a, b)
            half = [(walk[k], walk[(k + 1) % len(walk)]) for k in range(len(walk))]
            for h in half:
                face_of[h] = len(faces)
            faces.append(half)
        root = next(iter(comp))
        seen, queue = {root}, deque([root])
        while queue:  # spanning tree, oriented parent -> child
            a = queue.popleft()
            for b in C.neighbors(a):
                if b not in seen:
                    seen.add(b)
                    orient[frozenset((a, b))] = (a, b)
                    queue.append(b)
        dual: dict = {f: [] for f in range(len(faces))}
        for a, b in C.edges():
            if frozenset((a, b)) not in orient:
                f, g = face_of[a, b], face_of[b, a]
                dual[f].append((g, (a, b)))
                dual[g].append((f, (b, a)))
        order, parent = [0], {0: None}
        for f in order:  # BFS over the dual tree
            for g, h in dual[f]:
                if g not in parent:
                    parent[g] = (f, h)
                    order.append(g)
        for g in reversed(order[1:]):  # leaves first: the parent edge is g's last free edge
            f, (a, b) = parent[g]  # half-edge (a, b) in f, so (b, a) in g
            along = sum(1 for x, y in faces[g] if orient.get(frozenset((x, y))) == (x, y))
            orient[frozenset((a, b))] = (b, a) if along % 2 == 0 else (a, b)
    return orient
