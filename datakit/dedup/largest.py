"""The largest near-duplicate clusters of a fuzzy run, with a sample of the kept copy and of a removed one.

Why: a count of removed documents does not say *why* a source collapsed. `t0` ... `t999999` fold to six
texts (shingles fold every digit to 0), a template fills one cluster with thousands of pages: the
largest clusters and their texts show it at a glance. The run summary and the report read them from the
fuzzy step's result (`FuzzyResult.largest`), so nothing re-reads the attribute files.

Cheap at any scale: each marks task keeps its file's top `LARGEST` clusters (by size, then cluster id:
a global order, so a cluster in the global top is in the top of every file holding its members and its
member counts add up exactly), the driver merges those few rows and reads 2 x `LARGEST` texts, or
takes them from the earlier build's state (`SampleTexts`): a sample names its text by the content token of
its documents file and its row, so an unchanged file's sample is not read again (an edit of one file at
400 MB read all ten again for 0.06-0.1 CPU-s, 4-6% of the run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .hashing import node_row, u64_to_ids
from .layout import FileEntry, open_parquet

LARGEST = 5           # clusters recorded
EXCERPT_CHARS = 200   # characters of each sample text


def file_top(b: dict, source: str, k: int = LARGEST) -> list[dict]:
    """The k largest clusters among one file's marks rows (``b``: node, is_canonical, c_hi, c_lo, c_rank,
    size): per cluster its id, size, canonical rank, members in this file, and the nodes of its kept copy
    (when in this file) and of its first removed member here."""
    if not len(b["node"]):
        return []
    order = np.lexsort((b["node"], b["c_lo"], b["c_hi"], -b["size"]))
    hi, lo = b["c_hi"][order], b["c_lo"][order]
    new = np.concatenate(([True], (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])))
    bounds = np.append(np.flatnonzero(new), len(order))
    out = []
    for s, e in zip(bounds[:k].tolist(), bounds[1:k + 1].tolist()):
        rows = order[s:e]
        canonical = rows[b["is_canonical"][rows]]
        removed = rows[~b["is_canonical"][rows]]
        out.append({"cluster_id": u64_to_ids(hi[s:s + 1], lo[s:s + 1])[0].as_py(), "size": int(b["size"][rows[0]]),
                    "rank": int(b["c_rank"][rows[0]]), "source": source, "members": int(len(rows)),
                    "kept": int(b["node"][canonical[0]]) if len(canonical) else None,
                    "removed": int(b["node"][removed[0]]) if len(removed) else None})
    return out


def merge_tops(tops: Sequence[dict], names: Sequence[str], k: int = LARGEST) -> list[dict]:
    """The k largest clusters over every file's `file_top` rows: size, canonical source, members per
    source, and the nodes of the kept copy and of one removed member (the lowest node seen)."""
    clusters: dict[str, dict] = {}
    for t in tops:
        c = clusters.setdefault(t["cluster_id"], {"cluster_id": t["cluster_id"], "size": t["size"],
                                                  "canonical_source": names[t["rank"]], "members": {},
                                                  "kept": None, "removed": None})
        c["members"][t["source"]] = c["members"].get(t["source"], 0) + t["members"]
        for key in ("kept", "removed"):
            if t[key] is not None and (c[key] is None or t[key] < c[key]):
                c[key] = t[key]
    ranked = sorted(clusters.values(), key=lambda c: (-c["size"], c["cluster_id"]))[:k]
    for c in ranked:
        c["members"] = dict(sorted(c["members"].items()))
    return ranked


SAMPLE_READ_ROWS = 256  # rows decoded at a time while looking for a sample's row


def _text_at(path: str, row: int) -> str:
    """One row's text, decoding its row group's text column only up to that row, a few rows at a time
    (a whole row group's texts held at once is tens of MB in the driver, per sample)."""
    with open_parquet(path) as pf:
        start = 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            if row < start + n:
                for rb in pf.iter_batches(batch_size=SAMPLE_READ_ROWS, row_groups=[g], columns=["text"]):
                    if row < start + rb.num_rows:
                        return rb.column(0)[row - start].as_py() or ""
                    start += rb.num_rows
                return ""
            start += n
    return ""


@dataclass
class SampleTexts:
    """Sample excerpts by what names their text, (content token of the documents file, row): ``known``
    from the earlier build (taken, not read), ``used`` by this one (its state keeps them for the next).
    Without ``tokens`` (a build that keeps no state) every sample is read."""

    tokens: np.ndarray | None = None  # each file's content token, by global file index
    known: dict[tuple[int, int], str] = field(default_factory=dict)
    used: dict[tuple[int, int], str] = field(default_factory=dict)

    def excerpt(self, entry: FileEntry, row: int) -> str:
        key = (int(self.tokens[entry.gidx]), row) if self.tokens is not None else None
        text = self.known.get(key) if key is not None else None
        if text is None:
            text = _text_at(entry.path, row)[:EXCERPT_CHARS]
        if key is not None:
            self.used[key] = text
        return text


def with_samples(clusters: list[dict], entries: Sequence[FileEntry], gidx,
                 texts: SampleTexts | None = None) -> list[dict]:
    """The clusters with excerpts of their kept copy and removed member (``gidx(nodes)``: the entry
    index of each node) in place of the nodes; ``texts`` says which are known already and keeps what
    was used."""
    texts = texts if texts is not None else SampleTexts()
    out = []
    for c in clusters:
        c = dict(c)
        for key in ("kept", "removed"):
            node = c.pop(key)
            if node is None:
                c[key] = None
                continue
            entry = entries[int(gidx(np.array([node], dtype=np.int64))[0])]
            c[key] = texts.excerpt(entry, int(node_row(np.array([node]))[0]))
            if key == "removed":
                c["removed_source"] = entry.source
        out.append(c)
    return out
