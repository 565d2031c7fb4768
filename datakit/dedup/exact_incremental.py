"""Exact dedup as a change to the earlier build: only ids that a changed file held or holds are decided again.

A file's marks list its ids that a preferred copy elsewhere survives (exact.py: the copy with the
smallest node, i.e. the highest-priority source, then file and row). Files that came, went or changed
(a changed file is a removed token and a new one, key_index.file_token) hold the *changed ids*; every
other id has the same holders as before, in the same relative order (node numbers shift, their order
among the documents that stay does not), so its marks are unchanged. The build therefore finds every
current holder of a changed id in the id index (key_index.py: id's high half -> (file token, row), the
low half checked against the file's ids), decides those ids again, and rewrites only the marks files
holding a changed id; every other file's marks are taken from the earlier build as they are.

State, under ``reuse/exact/<settings digest>/`` of the step dir: state.json (the files in rank order
with their tokens, the sources, the index segments), ``ids/<token>.npz`` (each file's ids, in row
order) and the index segments. A full build (exact.py) writes it as it goes; a build whose earlier
state is missing, damaged or has the sources in another relative order is a full one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa

from datakit.core import arrow_numpy as an
from datakit.core import fsio
from datakit.core.layout import AttributesDir
from datakit.steps import reuse

from . import key_index
from .key_index import State
from .hashing import FILE_BITS, ROW_BITS, U64, ids_to_u64, node_rank, u64_to_ids
from .layout import FileEntry, read_columns, write_parquet_atomic

STATE_FORMAT = 1
ROOT = "reuse/exact"
SEGMENT_REL = "seg-full"


def folder_for(settings: tuple) -> str:
    return f"{ROOT}/{reuse.content_key(STATE_FORMAT, settings)}"


def ids_rel(token: int) -> str:
    return f"ids/{token:016x}.npy"


@dataclass(frozen=True)
class IdsSink:
    """Where a full build's per-file task writes the file's ids (hi, lo: a 2 x n array)."""

    root: str
    token: int

    def write(self, hi: np.ndarray, lo: np.ndarray) -> None:
        save_ids(self.root, self.token, hi, lo)


def save_ids(root: str, token: int, hi: np.ndarray, lo: np.ndarray) -> None:
    """One file's ids (a 2 x n array: high and low halves, in row order) in the state folder ``root``."""
    key_index.save_array(fsio.join(root, ids_rel(token)), np.stack([hi, lo]).astype(U64))


def write_state(state: State) -> None:
    body = {"format": STATE_FORMAT, "sources": state.sources, "files": state.files,
            "segments": [s.to_dict() for s in state.segments]}
    fsio.atomic_write_bytes(state.path("state.json"), json.dumps(body, indent=0, sort_keys=True).encode())


def record_full(state: State, entries: Sequence[FileEntry], tokens: np.ndarray, rows: Sequence[int], parts: int) -> None:
    """The state of a full build, whose tasks wrote the ids and the index: files and segments, state.json.
    When the engine resumed a stage from its checkpoint (a killed driver), its tasks did not write their
    part: the missing ids are read again and the missing index partitions written (key_index.complete)."""
    state.files = [{"source": e.source, "name": e.name, "token": f"{int(tokens[e.gidx]):016x}",
                    "rows": int(rows[e.gidx])} for e in entries]
    listed = set(fsio.list_names(state.path("ids")))
    missing = [e for e in entries if ids_rel(int(tokens[e.gidx])).split("/")[1] not in listed]
    for e in missing:
        hi, lo = ids_to_u64(read_columns(e.path, ["id"]).column("id"), e.path)
        save_ids(state.root, int(tokens[e.gidx]), hi, lo)
    if missing:
        per_file = {}
        for t in tokens.tolist():
            ids = key_index.load_array(state.path(ids_rel(int(t))))
            per_file[int(t)] = (np.arange(ids.shape[1]), ids[0].reshape(-1, 1))
        present = key_index.complete(state.root, SEGMENT_REL, parts, per_file)
    else:
        present = key_index.present(state.root, SEGMENT_REL)
    state.segments = [key_index.Segment(SEGMENT_REL, parts, present, int(sum(rows)))]
    write_state(state)


def load(earlier: reuse.Earlier | None, folder: str) -> State | None:
    """The earlier build's state when every file it names is there as recorded (None: build in full)."""
    if earlier is None or not reuse.intact(earlier, f"{folder}/state.json"):
        return None
    try:
        body = json.loads(fsio.read_bytes(fsio.join(earlier.step_dir, folder, "state.json")))
        if body.get("format") != STATE_FORMAT:
            return None
        state = State(earlier.step_dir, folder, [str(s) for s in body["sources"]], list(body["files"]),
                      [key_index.Segment.from_dict(s) for s in body["segments"]])
        needed = [ids_rel(int(f["token"], 16)) for f in state.files] + key_index.files_of(state.segments)
    except (ValueError, KeyError, TypeError):
        return None
    return state if all(reuse.intact(earlier, f"{folder}/{r}") for r in needed) else None


# ---------------------------------------------------------------- the incremental build
@dataclass(frozen=True)
class Change:
    entries: Sequence[FileEntry]
    tokens: np.ndarray
    rows: np.ndarray
    names: Sequence[str]
    out_dir: str
    meta: dict
    schema: pa.Schema
    old: State
    new: State
    earlier: reuse.Earlier


def run(ch: Change) -> dict[str, int] | None:
    """Apply the change; the counters a full build gives (None: the earlier state is unusable, or the
    change is too big to pay off on the driver, key_index.change_too_big)."""
    if [s for s in ch.old.sources if s in ch.names] != [s for s in ch.names if s in ch.old.sources]:
        return None
    if key_index.change_too_big({int(f["token"], 16): int(f["rows"]) for f in ch.old.files},
                                {int(t): int(n) for t, n in zip(ch.tokens, ch.rows)}):
        return None
    old_tokens = {int(f["token"], 16) for f in ch.old.files}
    current = {int(t) for t in ch.tokens}
    changed_ids, new_ids = _changed_ids(ch, old_tokens, current)
    segments = _segments(ch, new_ids, old_tokens, current)
    holders = _holders(ch, segments, changed_ids, new_ids)
    marks = _decide(holders, ch)
    counters = _write_marks(ch, marks, changed_ids, old_tokens, set(holders.gidx.tolist()))
    ch.new.sources = list(ch.names)
    ch.new.files = [{"source": e.source, "name": e.name, "token": f"{int(ch.tokens[e.gidx]):016x}",
                     "rows": int(ch.rows[e.gidx])} for e in ch.entries]
    ch.new.segments = segments
    write_state(ch.new)
    counters["incremental_ids"] = len(changed_ids[0])
    return counters


def _changed_ids(ch: Change, old_tokens: set[int], current: set[int]
                 ) -> tuple[tuple[np.ndarray, np.ndarray], dict[int, np.ndarray]]:
    """The ids of every removed and every new file (sorted unique (hi, lo)), and the new files' ids,
    read from their documents files and kept in this build's state."""
    his, los = [], []
    for f in ch.old.files:
        tok = int(f["token"], 16)
        if tok not in current:
            ids = key_index.load_array(ch.old.path(ids_rel(tok)))
            his.append(ids[0])
            los.append(ids[1])
    new_ids = {}
    for e in ch.entries:
        tok = int(ch.tokens[e.gidx])
        if tok in old_tokens:
            continue
        hi, lo = ids_to_u64(read_columns(e.path, ["id"]).column("id"), e.path)
        IdsSink(ch.new.root, tok).write(hi, lo)
        new_ids[tok] = np.stack([hi, lo])
        his.append(hi)
        los.append(lo)
    hi = np.concatenate(his) if his else np.empty(0, U64)
    lo = np.concatenate(los) if los else np.empty(0, U64)
    pairs = np.unique(np.stack([hi, lo], axis=1), axis=0) if len(hi) else np.empty((0, 2), U64)
    return (pairs[:, 0].copy(), pairs[:, 1].copy()), new_ids


def _segments(ch: Change, new_ids: dict[int, np.ndarray], old_tokens: set[int], current: set[int]
              ) -> list[key_index.Segment]:
    """The kept files' ids (taken) and the index after the change (key_index.next_segments), keyed by
    each id's high half; dead entries are the gone files' rows."""
    for tok in old_tokens & current:
        fsio.link_or_copy(ch.old.path(ids_rel(tok)), ch.new.path(ids_rel(tok)))
    new_files = {t: (np.arange(ids.shape[1]), ids[0].reshape(-1, 1)) for t, ids in new_ids.items()}
    dead = sum(int(f["rows"]) for f in ch.old.files if int(f["token"], 16) not in current)
    return key_index.next_segments(ch.old.root, ch.new.root, ch.old.segments, new_files, np.unique(ch.tokens), dead)


@dataclass
class Holders:
    """Every current copy of a changed id: its node, id and file (gidx)."""

    node: np.ndarray
    hi: np.ndarray
    lo: np.ndarray
    gidx: np.ndarray


def _holders(ch: Change, segments, changed: tuple[np.ndarray, np.ndarray], new_ids: dict[int, np.ndarray]) -> Holders:
    """The current copies of the changed ids: the index by the ids' high halves, each hit's low half
    checked against its file's ids."""
    hi_q, lo_q = changed
    _k, tok, row = key_index.query(ch.new.root, segments, hi_q, np.unique(ch.tokens))
    order = np.argsort(ch.tokens, kind="stable")
    sorted_tok = ch.tokens[order]
    gidx = order[np.searchsorted(sorted_tok, tok)] if len(tok) else np.empty(0, np.int64)
    hi, lo = np.empty(len(tok), U64), np.empty(len(tok), U64)
    for g in np.unique(gidx).tolist():
        sel = gidx == g
        t = int(ch.tokens[g])
        ids = new_ids.get(t)
        if ids is None:
            ids = key_index.load_array(ch.new.path(ids_rel(t)))
        hi[sel], lo[sel] = ids[0][row[sel]], ids[1][row[sel]]
    keep = in_pairs(hi, lo, hi_q, lo_q)
    entries = ch.entries
    rank = np.array([e.rank for e in entries], np.int64)[gidx[keep]]
    fidx = np.array([e.file_idx for e in entries], np.int64)[gidx[keep]]
    node = (rank << np.int64(FILE_BITS + ROW_BITS)) | (fidx << np.int64(ROW_BITS)) | row[keep].astype(np.int64)
    return Holders(node, hi[keep], lo[keep], gidx[keep])


def in_pairs(hi: np.ndarray, lo: np.ndarray, hi_q: np.ndarray, lo_q: np.ndarray) -> np.ndarray:
    """(hi[i], lo[i]) is one of the ids (hi_q, lo_q) (sorted by (hi, lo), unique)."""
    if not len(hi_q):
        return np.zeros(len(hi), bool)
    left, right = np.searchsorted(hi_q, hi, "left"), np.searchsorted(hi_q, hi, "right")
    out = np.zeros(len(hi), bool)
    one = right - left == 1
    out[one] = lo_q[left[one]] == lo[one]
    for i in np.flatnonzero(right - left > 1).tolist():  # two ids sharing a high half: checked one by one
        out[i] = bool((lo_q[left[i]:right[i]] == lo[i]).any())
    return out


def _decide(h: Holders, ch: Change) -> dict[int, dict[str, np.ndarray]]:
    """Per file (gidx), the marks rows of the changed ids: every copy but the one with the smallest node,
    with the survivor's source."""
    order = np.lexsort((h.node, h.lo, h.hi))
    hi, lo, node = h.hi[order], h.lo[order], h.node[order]
    first = np.ones(len(hi), bool)
    first[1:] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    start = np.maximum.accumulate(np.where(first, np.arange(len(hi)), 0))
    dup = ~first
    survivor_rank = node_rank(node[start[dup]])
    bases = {(e.rank, e.file_idx): e.gidx for e in ch.entries}
    width = np.int64((1 << FILE_BITS) - 1)
    key = node[dup] >> np.int64(ROW_BITS)
    gidx = np.array([bases[(int(k >> FILE_BITS), int(k & width))] for k in key.tolist()], np.int64)
    out: dict[int, dict[str, np.ndarray]] = {}
    for g in np.unique(gidx).tolist():
        sel = gidx == g
        out[g] = {"hi": hi[dup][sel], "lo": lo[dup][sel], "rank": survivor_rank[sel]}
    return out


def _write_marks(ch: Change, marks: dict[int, dict[str, np.ndarray]], changed: tuple[np.ndarray, np.ndarray],
                 old_tokens: set[int], touched: set[int]) -> dict[str, int]:
    """Each file's marks: an unchanged file holding no changed id keeps its earlier marks file; any other
    keeps its earlier rows of unchanged ids and gets the rows just decided. Counters as exact.py's."""
    counters: dict[str, int] = {}
    for e in ch.entries:
        tok = int(ch.tokens[e.gidx])
        rel = f"{AttributesDir.rel(e.source)}/{e.name}"
        path = fsio.join(ch.out_dir, rel)
        counters[f"docs/{e.source}"] = counters.get(f"docs/{e.source}", 0) + int(ch.rows[e.gidx])
        if tok in old_tokens and e.gidx not in touched and reuse.take_file(ch.earlier, rel, path):
            n = read_columns(path, ["id"]).num_rows
        else:
            table = _merged(ch, rel, tok in old_tokens, marks.get(e.gidx), changed, ch.schema)
            write_parquet_atomic(table, path, ch.meta)
            n = table.num_rows
        if n:  # as exact.py counts: only files with marks
            counters[f"exact_duplicates/{e.source}"] = counters.get(f"exact_duplicates/{e.source}", 0) + n
    return counters


def _merged(ch: Change, rel: str, existed: bool, new: dict | None, changed: tuple[np.ndarray, np.ndarray],
            schema: pa.Schema) -> pa.Table:
    """The earlier marks rows of unchanged ids (an unchanged file) and the rows just decided, by id."""
    ids, survivors = [], []
    if existed:
        old = read_columns(fsio.join(ch.earlier.step_dir, rel), ["id", "duplicate_of"])
        hi, lo = ids_to_u64(old.column("id"), rel)
        keep = ~in_pairs(hi, lo, changed[0], changed[1])
        ids.append((hi[keep], lo[keep]))
        survivors.append(np.asarray(old.column("duplicate_of").to_pylist(), dtype=object)[keep])
    if new is not None:
        ids.append((new["hi"], new["lo"]))
        survivors.append(np.asarray(ch.names, dtype=object)[new["rank"]])
    hi = np.concatenate([i[0] for i in ids]) if ids else np.empty(0, U64)
    lo = np.concatenate([i[1] for i in ids]) if ids else np.empty(0, U64)
    names = np.concatenate(survivors) if survivors else np.empty(0, object)
    order = np.lexsort((lo, hi))
    return pa.table({"id": u64_to_ids(hi[order], lo[order]),
                     "duplicate_of": an.strings(names[order].tolist())}, schema=schema)
