"""Fuzzy dedup as a change to the earlier build: re-pair only the documents whose buckets changed.

The result must be byte for byte a full build's (fuzzy.py), so this reasons about what a change can
reach. Candidate pairs come from buckets (`fuzzy.window_pairs`): each member of a bucket is paired with
the few before it in node order. A change (files added, removed, or edited: removed + added) changes
the membership of the *dirty* buckets, those holding a removed or an added document. Call *affected*
every document now in a dirty bucket. Then:

- a pair with neither side affected comes only from clean buckets, whose members and their order are
  unchanged (node numbers shift when files come and go, but (source rank, file, row) order among the
  documents that stay does not), so the earlier build's pairs between unaffected documents are exactly
  this build's, and so are their Jaccards;
- every pair touching an affected document is recomputed from all of that document's buckets (their
  full member lists come from the bucket index, key_index.py), its Jaccard looked up in the earlier
  build's pairs by id pair or verified on the texts.

Clusters and marks are then a pure function of the pairs (the forest of forest.py), computed over the
whole (small) pair graph, and a file's marks file is taken from the earlier build when its digest did not
change. Of the pairs whose Jaccard is not known, only those that could give a document an earlier parent
are verified (`forest.verify_parents`). The earlier
build's state (fuzzy_state.py) must have the same settings and the sources in the same relative order
(a source's rank decides which copy is kept); otherwise fuzzy.py builds in full.

What this runs is in-process on the driver: its work follows the affected documents and the pair graph,
not the corpus, except reading each file's token and the index's segment list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from datakit.core import arrow_numpy as an
from datakit.core import fsio
from datakit.core.layout import AttributesDir
from datakit.core.listing import relative_to
from datakit.steps import reuse

from . import batches, fuzzy_state, key_index, pair_cache
from .forest import component_labels, forest_edges, verify_parents
from .fuzzy_core import row_texts, shingle_sets
from .fuzzy_state import FileState, State
from .hashing import FILE_BITS, ROW_BITS, U64, ids_to_u64, node_rank, node_row
from .layout import FileEntry, read_columns


@dataclass(frozen=True)
class Change:
    """A fuzzy build as a change to the earlier one: the current files (``tokens[gidx]``, ``rows[gidx]``)
    and how to read and write them, the earlier state and this build's (``new``, empty so far)."""

    entries: Sequence[FileEntry]
    tokens: np.ndarray
    rows: np.ndarray
    names: Sequence[str]
    mh_paths: Sequence[str]
    mh_params: dict
    threshold: float | None
    clique_max: int
    out_dir: str
    file_meta: dict
    old: State
    new: State
    earlier: reuse.Earlier
    cache_folder: str | None
    cache_bits: int


@dataclass
class Pairs:
    """Candidate pairs as current nodes (u < v), their ids (the smaller first) and Jaccard."""

    u: np.ndarray
    v: np.ndarray
    ids: dict[str, np.ndarray]
    jaccard: np.ndarray

    def take(self, mask: np.ndarray) -> "Pairs":
        return Pairs(self.u[mask], self.v[mask], {k: c[mask] for k, c in self.ids.items()}, self.jaccard[mask])


@dataclass
class Nodes:
    """Current file numbering: token -> gidx, and a node for a (token, row)."""

    entries: Sequence[FileEntry]
    tokens: np.ndarray
    order: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.order = np.argsort(self.tokens, kind="stable")

    def gidx(self, tok: np.ndarray) -> np.ndarray:
        """The gidx of each token (-1: not a current file)."""
        tok = np.asarray(tok, dtype=U64)
        if not len(self.tokens):
            return np.full(len(tok), -1, np.int64)
        sorted_tok = self.tokens[self.order]
        pos = np.minimum(np.searchsorted(sorted_tok, tok), len(sorted_tok) - 1)
        return np.where(sorted_tok[pos] == tok, self.order[pos], -1).astype(np.int64)

    def node(self, tok: np.ndarray, row: np.ndarray) -> np.ndarray:
        """The current node of each (token, row) (-1: its file is gone)."""
        g = self.gidx(tok)
        rank = np.array([e.rank for e in self.entries], np.int64)
        fidx = np.array([e.file_idx for e in self.entries], np.int64)
        gg = np.maximum(g, 0)
        node = (rank[gg] << np.int64(FILE_BITS + ROW_BITS)) | (fidx[gg] << np.int64(ROW_BITS)) | np.asarray(row, np.int64)
        return np.where(g >= 0, node, -1)

    def gidx_of_nodes(self, nodes: np.ndarray) -> np.ndarray:
        bases = {(e.rank, e.file_idx): e.gidx for e in self.entries}
        key = (np.asarray(nodes, np.int64) >> np.int64(ROW_BITS))
        uniq, inv = np.unique(key, return_inverse=True)
        width = np.int64((1 << FILE_BITS) - 1)
        table = np.array([bases[(int(k >> FILE_BITS), int(k & width))] for k in uniq.tolist()], np.int64)
        return table[inv] if len(uniq) else np.empty(0, np.int64)


def sources_in_order(old: State, names: Sequence[str]) -> bool:
    """The sources both builds have keep their relative order (ranks decide which copy is kept)."""
    return [s for s in old.sources if s in names] == [s for s in names if s in old.sources]


def affected(change: Change, new: State, new_keys: dict[int, tuple[np.ndarray, np.ndarray]],
             segments: Sequence[key_index.Segment], live: np.ndarray, nodes: Nodes) -> np.ndarray:
    """The current nodes of every document in a bucket that lost or gained a member (sorted)."""
    current = set(change.tokens.tolist())
    dirty = [fuzzy_state.load_npz(change.old.path(fuzzy_state.keys_rel(f.token)))["keys"]
             for f in change.old.files if f.token not in current]
    dirty += [keys for _rows, keys in new_keys.values()]
    flat = np.concatenate([k.reshape(-1) for k in dirty]) if dirty else np.empty(0, U64)
    _k, tok, row = key_index.query(new.root, segments, flat, live)
    return np.unique(nodes.node(tok, row))


def keys_of(nodes_a: np.ndarray, nodes: Nodes, change: Change, new: State,
            new_keys: dict[int, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Every bucket key of these documents."""
    gidx = nodes.gidx_of_nodes(nodes_a)
    out = []
    for g in np.unique(gidx).tolist():
        tok = int(change.tokens[g])
        rows, keys = new_keys.get(tok) or _load_keys(new, tok)
        want = node_row(nodes_a[gidx == g])
        out.append(keys[np.searchsorted(rows, want)].reshape(-1))
    return np.concatenate(out) if out else np.empty(0, U64)


def _load_keys(state: State, token: int) -> tuple[np.ndarray, np.ndarray]:
    z = fuzzy_state.load_npz(state.path(fuzzy_state.keys_rel(token)))
    return z["rows"], z["keys"]


def ids_of(nodes_q: np.ndarray, known_nodes: np.ndarray, known_hi: np.ndarray, known_lo: np.ndarray,
           nodes: Nodes) -> tuple[np.ndarray, np.ndarray]:
    """The ids of these nodes: from the earlier build's members where it has them, else read from the
    documents files (only the files holding a node it lacks)."""
    hi, lo = np.zeros(len(nodes_q), U64), np.zeros(len(nodes_q), U64)
    found = np.zeros(len(nodes_q), bool)
    if len(known_nodes):
        pos = np.minimum(np.searchsorted(known_nodes, nodes_q), len(known_nodes) - 1)
        found = known_nodes[pos] == nodes_q
        hi[found], lo[found] = known_hi[pos[found]], known_lo[pos[found]]
    missing = np.flatnonzero(~found)
    gidx = nodes.gidx_of_nodes(nodes_q[missing])
    for g in np.unique(gidx).tolist():
        sel = missing[gidx == g]
        entry = nodes.entries[g]
        col = read_columns(entry.path, ["id"]).column("id")
        h, lw = ids_to_u64(col, entry.path)
        rows = node_row(nodes_q[sel])
        hi[sel], lo[sel] = h[rows], lw[rows]
    return hi, lo


def pair_ids(u_hi, u_lo, v_hi, v_lo) -> dict[str, np.ndarray]:
    """A pair's ids, the smaller first (the pair cache's key)."""
    swap = (u_hi > v_hi) | ((u_hi == v_hi) & (u_lo > v_lo))
    return {"ah": np.where(swap, v_hi, u_hi), "al": np.where(swap, v_lo, u_lo),
            "bh": np.where(swap, u_hi, v_hi), "bl": np.where(swap, u_lo, v_lo)}


# Characters of texts kept for a later round, at most: 32-128 MB of the driver's memory (1-4 bytes a character).
KEEP_TEXT_CHARS = 32 << 20


class NodeSets:
    """`verify_parents`' reader: the shingle sets of documents (sorted nodes in, their sets in that order),
    re-derived from the texts as fuzzy.py verifies, each needed file streamed (`row_texts`). Told which
    documents the second round may need (`expect`), it keeps their texts from the files the first round
    reads anyway (up to KEEP_TEXT_CHARS), so that round takes them from here instead of reading those
    files again (on benchmarks/incremental.py's add, the second round shingles 2,149 documents the first
    did not). The sets are the same whichever way a text came."""

    def __init__(self, nodes: Nodes, minhash_params: dict) -> None:
        self.nodes, self.params = nodes, minhash_params
        self.later = np.empty(0, np.int64)
        self.kept: dict[int, str] = {}
        self.kept_chars = 0

    def expect(self, later: np.ndarray) -> None:
        """Documents the next round may need: their texts are kept when the next read opens their files
        (that read uses the hint up: a round after it keeps nothing no round will ask for)."""
        self.later = np.unique(later)

    def __call__(self, need: np.ndarray) -> batches.Ragged:
        found = np.fromiter((n in self.kept for n in need.tolist()), bool, len(need))
        got_nodes = [need[found]]
        got_sets = [shingle_sets([self.kept.pop(n) for n in need[found].tolist()], self.params)]
        rest = need[~found]
        extra = np.setdiff1d(self.later, need)
        extra = extra[~np.isin(extra, np.fromiter(self.kept, np.int64, len(self.kept)))]
        self.later = np.empty(0, np.int64)
        gidx, extra_gidx = self.nodes.gidx_of_nodes(rest), self.nodes.gidx_of_nodes(extra)
        for g in np.unique(gidx).tolist():
            nodes_g, sets_g = self._read(g, rest[gidx == g], extra[extra_gidx == g])
            got_nodes += nodes_g
            got_sets += sets_g
        nodes = np.concatenate(got_nodes)
        both = batches.concat([{"sh": r} for r in got_sets])["sh"]
        return batches.take_ragged(both, np.argsort(nodes, kind="stable"))

    def _read(self, g: int, want: np.ndarray, also: np.ndarray) -> tuple[list[np.ndarray], list[batches.Ragged]]:
        """File ``g``'s documents ``want`` shingled, batch by batch, (nodes, sets) per batch; the texts of
        ``also`` read along and kept while the budget lasts."""
        every = np.union1d(want, also)  # nodes of one file sort as its rows
        is_wanted = np.isin(every, want)
        nodes, sets = [], []
        for pos, texts in row_texts(self.nodes.entries[g].path, node_row(every)):
            wanted = is_wanted[pos]
            if wanted.any():
                nodes.append(every[pos[wanted]])
                sets.append(shingle_sets([t for t, w in zip(texts, wanted.tolist()) if w], self.params))
            for n, t, w in zip(every[pos].tolist(), texts, wanted.tolist()):
                if not w and self.kept_chars + len(t) <= KEEP_TEXT_CHARS:
                    self.kept[n] = t
                    self.kept_chars += len(t)
        return nodes, sets


def clusters(edges_u: np.ndarray, edges_v: np.ndarray, hi_of) -> dict[str, np.ndarray]:
    """The trees of the forest edges (`forest.forest_edges`: parent, child) and the canonical member of
    each (its root: the highest-priority source, then the lowest id): one marks row per member with its
    parent (zero for the root), as fuzzy._choose_canonical gives them."""
    members, inv = np.unique(np.concatenate([edges_u, edges_v]), return_inverse=True)
    n, m = len(members), len(edges_u)
    if not n:
        empty = np.empty(0, np.int64)
        return {"node": empty, "hi": np.empty(0, U64), "lo": np.empty(0, U64), "is_canonical": np.empty(0, bool),
                "c_hi": np.empty(0, U64), "c_lo": np.empty(0, U64), "c_rank": empty, "size": empty,
                "p_hi": np.empty(0, U64), "p_lo": np.empty(0, U64), "p_rank": empty}
    label = component_labels(inv[:m], inv[m:], n)
    hi, lo = hi_of(members)
    rank = node_rank(members)
    p_hi, p_lo, p_rank = np.zeros(n, U64), np.zeros(n, U64), np.zeros(n, np.int64)
    child, parent = inv[m:], inv[:m]
    p_hi[child], p_lo[child], p_rank[child] = hi[parent], lo[parent], rank[parent]
    order = np.lexsort((lo, hi, rank, label))
    lab = label[order]
    first = np.ones(n, bool)
    first[1:] = lab[1:] != lab[:-1]
    starts = np.flatnonzero(first)
    sizes = np.diff(np.append(starts, n))
    head = order[np.repeat(starts, sizes)]
    out = {"node": members[order], "hi": hi[order], "lo": lo[order], "is_canonical": first,
           "c_hi": hi[head], "c_lo": lo[head], "c_rank": rank[head], "size": np.repeat(sizes, sizes).astype(np.int64),
           "p_hi": p_hi[order], "p_lo": p_lo[order], "p_rank": p_rank[order]}
    return out


def marks_file_rel(entry: FileEntry) -> str:
    return f"{AttributesDir.rel(entry.source)}/{entry.name}"


# ---------------------------------------------------------------- the run
@dataclass
class Outcome:
    """What the incremental build computed: the counters a full build gives (its work counters are this
    build's: pairs verified now, documents re-paired), the largest clusters, and the marks files taken."""

    counters: dict[str, int]
    largest: list[dict]
    marks_taken: int


def run(ch: Change) -> Outcome | None:
    """Apply the change; None when the earlier state cannot be used or the change is too big to pay off
    on the driver (key_index.change_too_big): then fuzzy.py builds in full."""
    if not sources_in_order(ch.old, ch.names) or key_index.change_too_big(
            {f.token: f.rows for f in ch.old.files}, {int(t): int(n) for t, n in zip(ch.tokens, ch.rows)}):
        return None
    nodes = Nodes(ch.entries, ch.tokens)
    old_files = {f.token: f for f in ch.old.files}
    new_keys = _new_file_keys(ch, old_files)
    fuzzy_state.carry(ch.old, ch.new, [fuzzy_state.keys_rel(int(t)) for t in ch.tokens if int(t) in old_files])
    segments = _segments(ch, new_keys)
    live = np.unique(ch.tokens)
    touched = affected(ch, ch.new, new_keys, segments, live, nodes)
    fresh = _pairs_touching(touched, ch, nodes, new_keys, segments, live)
    old_pairs, members, jaccards = _earlier_pairs(ch, nodes, touched)
    fresh, known = _jaccards(fresh, ch, nodes, jaccards, members)
    pairs = _union(old_pairs, fresh)
    member_ids = _in_pairs(pairs, known)
    read = NodeSets(nodes, ch.mh_params)
    verified_now = 0 if ch.threshold is None else verify_parents(
        pairs.u, pairs.v, pairs.jaccard, ch.threshold, member_ids.lookup, read, read.expect)
    edges = pairs.take(pairs.jaccard >= ch.threshold) if ch.threshold is not None else pairs
    marks = clusters(*forest_edges(edges.u, edges.v, member_ids.lookup), member_ids.lookup)
    counters, largest, taken, digests = _write_marks(ch, marks, old_files, nodes)
    counters.update(_doc_counters(ch, old_files, new_keys))
    _write_state(ch, pairs, member_ids, segments, digests, new_keys, nodes)
    counters.update(_pair_counters(pairs, edges, verified_now, ch.threshold))
    counters["incremental_documents"] = len(touched)
    return Outcome(dict(sorted(counters.items())), largest, taken)


def _new_file_keys(ch: Change, old_files: dict[int, FileState]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Bucket keys of the files the earlier build did not have, read from their minhash files and kept
    in this build's state."""
    from .fuzzy_core import file_keys

    out = {}
    for e in ch.entries:
        tok = int(ch.tokens[e.gidx])
        if tok in old_files:
            continue
        _n, rows, keys = file_keys(ch.mh_paths[e.gidx])
        fuzzy_state.KeysSink(ch.new.root, tok).write(rows, keys)
        out[tok] = (rows.astype(np.int64), keys)
    return out


def _segments(ch: Change, new_keys: key_index.Files) -> list[key_index.Segment]:
    """The index after the change (key_index.next_segments); dead entries are the gone files' keys."""
    current = set(ch.tokens.tolist())
    width = int(ch.mh_params["bands"])
    dead = sum((f.rows - f.without) * width for f in ch.old.files if f.token not in current)
    return key_index.next_segments(ch.old.root, ch.new.root, ch.old.segments, new_keys, np.unique(ch.tokens), dead)


def _pairs_touching(touched: np.ndarray, ch: Change, nodes: Nodes, new_keys, segments, live) -> Pairs:
    """Every candidate pair with a side in ``touched``, from all of their buckets' members."""
    from .fuzzy_core import window_pairs

    keys = keys_of(touched, nodes, ch, ch.new, new_keys)
    k, tok, row = key_index.query(ch.new.root, segments, keys, live)
    clique = ch.clique_max if ch.threshold is not None else 1
    u, v = window_pairs(k, nodes.node(tok, row), clique)
    mine = np.isin(u, touched) | np.isin(v, touched)
    u, v = u[mine], v[mine]
    empty = np.empty(len(u), U64)
    return Pairs(u, v, {k: empty.copy() for k in pair_cache.IDS}, np.full(len(u), np.nan))


@dataclass
class Members:
    """Ids of documents by current node (sorted nodes)."""

    nodes: np.ndarray
    hi: np.ndarray
    lo: np.ndarray

    def lookup(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = np.searchsorted(self.nodes, q)
        if len(q) and (pos.max(initial=0) >= len(self.nodes) or not np.array_equal(self.nodes[pos], q)):
            raise RuntimeError("fuzzy incremental: a cluster member has no id (internal error)")
        return self.hi[pos], self.lo[pos]


def _earlier_pairs(ch: Change, nodes: Nodes, touched: np.ndarray
                   ) -> tuple[Pairs, Members, dict[str, np.ndarray]]:
    """The earlier build's pairs between documents the change did not touch (as current nodes), the
    earlier members' ids, and every earlier pair's ids and Jaccard (read once: `_jaccards` looks up in it)."""
    z = fuzzy_state.load_npz(ch.old.path("pairs.npz"))
    u, v = nodes.node(z["u_tok"], z["u_row"]), nodes.node(z["v_tok"], z["v_row"])
    keep = (u >= 0) & (v >= 0) & ~np.isin(u, touched) & ~np.isin(v, touched)
    pairs = Pairs(u[keep], v[keep], {k: z[k][keep] for k in pair_cache.IDS}, z["jaccard"][keep])
    m = fuzzy_state.load_npz(ch.old.path("members.npz"))
    mn = nodes.node(m["tok"], m["row"])
    ok = mn >= 0
    order = np.argsort(mn[ok], kind="stable")
    jaccards = {k: z[k] for k in (*pair_cache.IDS, "jaccard")}
    return pairs, Members(mn[ok][order], m["hi"][ok][order], m["lo"][ok][order]), jaccards


def _jaccards(fresh: Pairs, ch: Change, nodes: Nodes, earlier: dict[str, np.ndarray], members: Members
              ) -> tuple[Pairs, Members]:
    """The new pairs with their ids and the Jaccards the earlier build knew, by id pair (a pair's
    Jaccard is a function of its two ids; NaN: unknown, left to `verify_parents`); the ids known now
    (the earlier members' and the new pairs')."""
    if not len(fresh.u):
        return fresh, members
    sides = np.unique(np.concatenate([fresh.u, fresh.v]))
    hi, lo = ids_of(sides, members.nodes, members.hi, members.lo, nodes)
    known = _merge(members, Members(sides, hi, lo))
    uh, ul = known.lookup(fresh.u)
    vh, vl = known.lookup(fresh.v)
    fresh.ids = pair_ids(uh, ul, vh, vl)
    if ch.threshold is not None:
        fresh.jaccard = pair_cache.match({**fresh.ids, "u": fresh.u}, earlier)
    return fresh, known


def _merge(a: Members, b: Members) -> Members:
    nodes = np.concatenate([a.nodes, b.nodes])
    uniq, first = np.unique(nodes, return_index=True)
    return Members(uniq, np.concatenate([a.hi, b.hi])[first], np.concatenate([a.lo, b.lo])[first])


def _union(a: Pairs, b: Pairs) -> Pairs:
    """Both sets of pairs (disjoint by construction), sorted by (u, v)."""
    u, v = np.concatenate([a.u, b.u]), np.concatenate([a.v, b.v])
    order = np.lexsort((v, u))
    return Pairs(u[order], v[order], {k: np.concatenate([a.ids[k], b.ids[k]])[order] for k in a.ids},
                 np.concatenate([a.jaccard, b.jaccard])[order])


def _in_pairs(pairs: Pairs, known: Members) -> Members:
    """The ids of exactly the documents in these pairs."""
    nodes = np.unique(np.concatenate([pairs.u, pairs.v]))
    hi, lo = known.lookup(nodes)
    return Members(nodes, hi, lo)


def _split_by_file(marks: dict[str, np.ndarray], nodes: Nodes) -> dict[int, dict[str, np.ndarray]]:
    """Marks rows per file (gidx), each sorted by row."""
    if not len(marks["node"]):
        return {}
    gidx = nodes.gidx_of_nodes(marks["node"])
    order = np.lexsort((node_row(marks["node"]), gidx))
    g = gidx[order]
    bounds = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1], [True])))
    return {int(g[a]): {k: c[order[a:b]] for k, c in marks.items()} for a, b in zip(bounds[:-1], bounds[1:])}


def _write_marks(ch: Change, marks: dict[str, np.ndarray], old_files: dict[int, FileState], nodes: Nodes
                 ) -> tuple[dict[str, int], list[dict], int, dict[int, str]]:
    """Every file's marks: taken from the earlier build when the file and its marks did not change,
    else written. Counters as a full build's marks step gives them, the largest clusters, the files
    taken, each file's marks digest."""
    from .fuzzy_core import FUZZY_SCHEMA, marks_digest, marks_table
    from .largest import SampleTexts, file_top, merge_tops, with_samples
    from .layout import write_parquet_atomic

    per_file = _split_by_file(marks, nodes)
    empty = {k: c[:0] for k, c in marks.items()}
    counters: dict[str, int] = {}
    tops: list[dict] = []
    digests: dict[int, str] = {}
    taken = 0
    for e in ch.entries:
        b = per_file.get(e.gidx, empty)
        digest = digests[e.gidx] = marks_digest(b, ch.names)
        counters[f"duplicates/{e.source}"] = counters.get(f"duplicates/{e.source}", 0) + int((~b["is_canonical"]).sum())
        counters[f"cluster_members/{e.source}"] = counters.get(f"cluster_members/{e.source}", 0) + len(b["node"])
        tops += file_top(b, e.source)
        old = old_files.get(int(ch.tokens[e.gidx]))
        rel = marks_file_rel(e)
        if old is not None and old.marks == digest and reuse.take_file(ch.earlier, rel, fsio.join(ch.out_dir, rel)):
            taken += 1
            continue
        table = marks_table(b, ch.names) if len(b["node"]) else an.empty(FUZZY_SCHEMA)
        write_parquet_atomic(table, AttributesDir.of(ch.out_dir, e.source).file(e.name), ch.file_meta)
    if len(marks["node"]):
        counters["clusters"] = int(marks["is_canonical"].sum())
        counters["cluster_members"] = len(marks["node"])
    counters["max_cluster_size"] = int(marks["size"].max()) if len(marks["size"]) else 0
    texts = SampleTexts(ch.tokens, ch.old.samples)
    largest = with_samples(merge_tops(tops, ch.names), ch.entries, nodes.gidx_of_nodes, texts)
    ch.new.samples = texts.used  # written with the state (_write_state)
    return counters, largest, taken, digests


def _doc_counters(ch: Change, old_files: dict[int, FileState], new_keys) -> dict[str, int]:
    out = {"docs": int(ch.rows.sum()), "docs_without_shingles": 0}
    for e in ch.entries:
        tok = int(ch.tokens[e.gidx])
        n = int(ch.rows[e.gidx])
        out[f"docs/{e.source}"] = out.get(f"docs/{e.source}", 0) + n
        out["docs_without_shingles"] += n - len(new_keys[tok][0]) if tok in new_keys else old_files[tok].without
    return out


def _pair_counters(pairs: Pairs, edges: Pairs, verified_now: int, threshold: float | None) -> dict[str, int]:
    """The pairs as a full build counts them, except that pairs left unverified (`forest.verify_parents`:
    their later document has a parent at least as early as the pair could give it) are counted apart:
    ``pairs_unverified``, in neither
    ``verified_pairs`` (at or above the threshold) nor ``rejected_pairs``."""
    if threshold is None:
        return {"candidate_pairs": len(pairs.u)}
    unverified = int(np.isnan(pairs.jaccard).sum())
    return {"candidate_pairs": len(pairs.u), "verified_pairs": len(edges.u),
            "rejected_pairs": len(pairs.u) - len(edges.u) - unverified, "pairs_unverified": unverified,
            "pairs_cached": len(pairs.u) - verified_now - unverified, "pairs_verified_now": verified_now}


def _write_state(ch: Change, pairs: Pairs, members: Members, segments: list[key_index.Segment],
                 digests: dict[int, str], new_keys, nodes: Nodes) -> None:
    """This build's state for the next one, and its pair cache (the full build's fallback), state.json last."""
    old_files = {f.token: f for f in ch.old.files}
    files = []
    for e in ch.entries:
        tok = int(ch.tokens[e.gidx])
        rows = int(ch.rows[e.gidx])
        without = rows - len(new_keys[tok][0]) if tok in new_keys else old_files[tok].without
        files.append(FileState(e.source, e.name, tok, rows, without, digests[e.gidx]))
    record_pairs(ch.new, pairs, members, ch.tokens, nodes)
    if ch.cache_folder is not None and ch.threshold is not None:
        known = ~np.isnan(pairs.jaccard)  # the cache holds known pairs only
        write_pair_cache(ch.cache_folder, ch.cache_bits, {k: c[known] for k, c in pairs.ids.items()},
                         pairs.jaccard[known], ch.earlier, relative_to(ch.cache_folder, ch.out_dir))
    ch.new.sources = list(ch.names)
    ch.new.files = files
    ch.new.segments = list(segments)
    fuzzy_state.write(ch.new)


def record_pairs(state: State, pairs: Pairs, members: Members, tokens: np.ndarray, nodes: Nodes) -> None:
    """pairs.npz and members.npz of a build (both sides and members as (token, row))."""
    def refs(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return tokens[nodes.gidx_of_nodes(n)] if len(n) else np.empty(0, U64), node_row(n)

    ut, ur = refs(pairs.u)
    vt, vr = refs(pairs.v)
    fuzzy_state.save_npz(state.path("pairs.npz"), u_tok=ut, u_row=ur, v_tok=vt, v_row=vr,
                         **pairs.ids, jaccard=pairs.jaccard)
    mt, mr = refs(members.nodes)
    fuzzy_state.save_npz(state.path("members.npz"), tok=mt, row=mr, hi=members.hi, lo=members.lo)


def write_pair_cache(folder: str, bits: int, ids: dict[str, np.ndarray], jac: np.ndarray,
                     earlier: reuse.Earlier | None = None, rel_folder: str | None = None) -> None:
    """The verified-pair cache (pair_cache.py) of this build's pairs, written on the driver; a partition
    the earlier build wrote with the same bytes (``earlier``, the cache at ``rel_folder`` in both step
    dirs) is linked from there."""
    part = pair_cache.partition(ids["ah"], ids["al"], ids["bh"], ids["bl"], bits)
    for p in np.unique(part).tolist():
        mine = part == p
        pair_cache.write_cache(p, {**{k: c[mine] for k, c in ids.items()}, "jaccard": jac[mine]}, folder, bits,
                               earlier, rel_folder)


def record_full(state: State, entries: Sequence[FileEntry], tokens: np.ndarray, rows: np.ndarray,
                names: Sequence[str], pair_files: Sequence[str], threshold: float | None, digests: dict[int, str],
                seg_rel: str, parts: int, mh_paths: Sequence[str]) -> None:
    """The state of a full build (fuzzy.py), whose tasks already wrote the keys and the index: its
    candidate pairs (from the pair work files, with their Jaccards; unverified: the candidate edges) and
    their members' ids, the files, state.json last."""
    from .layout import read_columns as read

    nodes = Nodes(entries, tokens)
    cols = ["u", "v", *pair_cache.IDS, "jaccard"] if threshold is not None else ["u", "v"]
    tables = [read(p, cols) for p in pair_files]
    got = {c: (np.concatenate([an.columns(t, [c])[c] for t in tables]) if tables else np.empty(0)) for c in cols}
    u, v = got["u"].astype(np.int64), got["v"].astype(np.int64)
    uniq = np.unique(np.stack([u, v], axis=1), axis=0, return_index=True)[1] if len(u) else np.empty(0, np.int64)
    order = uniq[np.lexsort((v[uniq], u[uniq]))]
    u, v = u[order], v[order]
    member_nodes = np.unique(np.concatenate([u, v]))
    none = np.empty(0, U64)
    hi, lo = ids_of(member_nodes, np.empty(0, np.int64), none, none, nodes)
    members = Members(member_nodes, hi, lo)
    if threshold is not None:
        pairs = Pairs(u, v, {k: got[k][order].astype(U64) for k in pair_cache.IDS}, got["jaccard"][order])
    else:
        uh, ul = members.lookup(u)
        vh, vl = members.lookup(v)
        pairs = Pairs(u, v, pair_ids(uh, ul, vh, vl), np.full(len(u), np.nan))
    record_pairs(state, pairs, members, tokens, nodes)
    _complete_keys(state, entries, tokens, mh_paths, seg_rel, parts)
    width = 0
    files = []
    for e in entries:
        tok = int(tokens[e.gidx])
        valid, keys = _load_keys(state, tok)
        width = max(width, keys.shape[1] if keys.ndim == 2 else 0)
        files.append(FileState(e.source, e.name, tok, int(rows[e.gidx]), int(rows[e.gidx]) - len(valid), digests[e.gidx]))
    entries_total = sum((f.rows - f.without) for f in files) * width
    state.files = files
    state.sources = list(names)
    state.segments = [key_index.Segment(seg_rel, parts, key_index.present(state.root, seg_rel), entries_total)]
    fuzzy_state.write(state)


def _complete_keys(state: State, entries: Sequence[FileEntry], tokens: np.ndarray, mh_paths: Sequence[str],
                   seg_rel: str, parts: int) -> None:
    """When the engine resumed the bucket stages from their checkpoints (a killed driver), their tasks did
    not write the files' keys and the index: read the missing keys again from the minhash files and
    write the missing index partitions (key_index.complete), the same bytes the tasks write."""
    from .fuzzy_core import file_keys

    listed = set(fsio.list_names(state.path("keys")))
    missing = [e for e in entries if fuzzy_state.keys_rel(int(tokens[e.gidx])).split("/")[1] not in listed]
    for e in missing:
        _n, rows, keys = file_keys(mh_paths[e.gidx])
        fuzzy_state.save_keys(state.root, int(tokens[e.gidx]), rows, keys)
    if missing:
        key_index.complete(state.root, seg_rel, parts, {int(t): _load_keys(state, int(t)) for t in tokens.tolist()})
