"""Decontamination: mark training documents that share an n-gram with a benchmark test item.

Benchmarks are local jsonl (.gz/.zst) or parquet files; each item's configured text fields are
normalized like dedup text (lowercase, no punctuation, digits folded, whitespace collapsed) and cut into
word n-grams (default 13). A field value may be a string or a list of strings (e.g. answer choices):
n-grams never span two fields or two list elements. Fields with fewer than `ngram` words give no n-gram
(a 3-word answer would match half the web); items left with no n-gram at all are counted and listed in
the report, never silently ignored.

Every training document containing any benchmark n-gram gets a row in its source's co-partitioned
attribute file `{id, benchmark, item, ngram_hits}`: the first matching benchmark and item (in the
order given) and how many of the document's n-grams matched. `report.json` lists counts per benchmark
and per source.
"""

from __future__ import annotations

import dataclasses
import io
import json
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterator, Literal, Sequence

import numpy as np
import pyarrow as pa

from datakit.manifest.checks import check_name, check_nonempty, probe_local_file
from datakit.shuffle import ExecConfig, counters
from datakit.core.fsio import atomic_write_bytes, exists, open_read, sha256_file
from datakit.core.layout import AttributesDir
from datakit.shuffle.io import open_decompressed

from .hashing import U64
from .layout import (
    DedupInputError,
    FileEntry,
    SourceRef,
    as_sources,
    attr_dir,
    file_table,
    invalidate,
    iter_batches,
    open_parquet,
    per_file_tasks,
    remove_tree,
    write_meta,
    write_parquet_atomic,
)
from .minhash import text_batches
from .shingles import SHINGLE_FORMAT, Tokens, ngrams, word_tokens

DECON_FORMAT = 1
DECON_SCHEMA = pa.schema([
    ("id", pa.string()), ("benchmark", pa.string()), ("item", pa.string()), ("ngram_hits", pa.int64()),
])
_NO_CAP = 1 << 62
_MAX_EXAMPLES = 10


@dataclass(frozen=True)
class BenchmarkSpec:
    """A benchmark test set (an item of the manifest's `decontaminate.benchmarks`): name, a local
    jsonl/parquet file (format from the extension unless given), the fields holding text, optionally an
    item id field."""

    name: str = field(metadata={"check": check_name})
    path: str = field(metadata={"path": True, "probe": probe_local_file})
    text_fields: tuple[str, ...] = field(default=("text",), metadata={"check": check_nonempty})
    id_field: str | None = None
    format: Literal["jsonl", "parquet"] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.text_fields, str):
            object.__setattr__(self, "text_fields", (self.text_fields,))
        else:
            object.__setattr__(self, "text_fields", tuple(self.text_fields))
        if not self.text_fields:
            raise ValueError(f"benchmark {self.name}: text_fields must not be empty")


@dataclass(frozen=True)
class DecontamConfig:
    """The manifest's `decontaminate:` section: the benchmarks to remove from the corpus, and the n-gram
    length a shared passage must reach to count."""

    benchmarks: tuple[BenchmarkSpec, ...] = ()
    ngram: int = field(default=13, metadata={"min": 1})

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        seen: set[str] = set()
        for b in self.benchmarks:
            if b.name in seen:
                return [("benchmarks", f"duplicate benchmark name '{b.name}'")]
            seen.add(b.name)
        return []

    def __post_init__(self) -> None:
        if not isinstance(self.ngram, int) or self.ngram < 1:
            raise ValueError(f"ngram must be a positive integer, got {self.ngram!r}")


@dataclass
class DecontamResult:
    sources: dict[str, dict] = field(default_factory=dict)
    benchmarks: dict[str, dict] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    report: str = "report.json"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DecontamResult":
        return cls(**d)


# ---------------------------------------------------------------- benchmark items
def _iter_records(path: str, fmt: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line or row number, record) from a jsonl(.gz/.zst) or parquet file; malformed JSON is an error."""
    if fmt == "parquet" or (fmt is None and path.endswith(".parquet")):
        with open_parquet(path) as pf:
            row = 0
            for batch in pf.iter_batches(batch_size=4096):
                for rec in batch.to_pylist():
                    row += 1
                    yield row, rec
        return
    with open_decompressed(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DedupInputError(f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(rec, dict):
                raise DedupInputError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            yield lineno, rec


def _segments(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    return None


def load_benchmark_ngrams(
    specs: Sequence[BenchmarkSpec], cfg: DecontamConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[str]], dict]:
    """(sorted unique n-gram hashes, benchmark index, item index, item labels per benchmark, stats)."""
    hashes, bench_idx, item_idx, labels, stats = [], [], [], [], {}
    for b, spec in enumerate(specs):
        if not exists(spec.path):
            raise DedupInputError(f"benchmark {spec.name}: file not found: {spec.path}")
        texts, owner, names = [], [], []
        st = {"items": 0, "missing_field": 0, "bad_field_type": 0, "items_without_ngrams": 0, "examples": []}
        seen_fields: set[str] = set()
        for lineno, rec in _iter_records(spec.path, spec.format):
            item = st["items"]
            st["items"] += 1
            seen_fields.update(rec)
            label = rec.get(spec.id_field) if spec.id_field else None
            names.append(str(label) if label is not None else str(item))
            for fld in spec.text_fields:
                if fld not in rec or rec[fld] is None:
                    st["missing_field"] += 1
                    if len(st["examples"]) < _MAX_EXAMPLES:
                        st["examples"].append(f"{spec.path}:{lineno}: field {fld!r} missing")
                    continue
                segs = _segments(rec[fld])
                if segs is None:
                    st["bad_field_type"] += 1
                    if len(st["examples"]) < _MAX_EXAMPLES:
                        st["examples"].append(
                            f"{spec.path}:{lineno}: field {fld!r} is a {type(rec[fld]).__name__}, not text")
                    continue
                texts.extend(segs)
                owner.extend([item] * len(segs))
        if st["items"] == 0:
            raise DedupInputError(f"benchmark {spec.name}: {spec.path} has no items")
        if not texts:
            raise DedupInputError(
                f"benchmark {spec.name}: none of the fields {list(spec.text_fields)} holds text in {spec.path} "
                f"(fields seen: {', '.join(sorted(seen_fields)[:20])}); check text_fields"
            )
        owners = np.asarray(owner, dtype=np.int64)
        grams = ngrams(_long_docs(word_tokens(texts, _NO_CAP), cfg.ngram), cfg.ngram)
        counts = np.diff(grams.offsets)
        item_of = np.repeat(owners, counts)
        has = np.zeros(st["items"], dtype=bool)
        has[owners[counts > 0]] = True
        st["items_without_ngrams"] = int((~has).sum())
        for i in np.flatnonzero(~has)[: _MAX_EXAMPLES - len(st["examples"])]:
            st["examples"].append(f"{spec.name} item {names[i]}: no field has {cfg.ngram}+ words")
        st["ngrams"] = int(len(np.unique(grams.values)))
        st["sha256"] = sha256_file(spec.path)
        hashes.append(grams.values)
        bench_idx.append(np.full(len(grams.values), b, dtype=np.int64))
        item_idx.append(item_of)
        labels.append(names)
        stats[spec.name] = st
    h = np.concatenate(hashes) if hashes else np.empty(0, U64)
    bi = np.concatenate(bench_idx) if bench_idx else np.empty(0, np.int64)
    ii = np.concatenate(item_idx) if item_idx else np.empty(0, np.int64)
    order = np.lexsort((ii, bi, h))  # per hash: first benchmark, then first item
    h, bi, ii = h[order], bi[order], ii[order]
    first = np.ones(len(h), dtype=bool)
    first[1:] = h[1:] != h[:-1]
    return h[first], bi[first], ii[first], labels, stats


# ---------------------------------------------------------------- training documents
BATCH_ROWS = 2048


def _scan_file(job: tuple[FileEntry, str], table_path: str, ngram: int, bench_names: Sequence[str],
               labels_path: str, meta: dict) -> dict:
    entry, dst = job
    with open_read(table_path) as f:
        table = np.load(f)
        hashes, bench, item = table["hashes"], table["bench"], table["item"]
    out_rows, out_bench, out_item, out_hits = [], [], [], []
    row0 = 0
    ids = []
    for rb in iter_batches(entry.path, ["id", "text"], BATCH_ROWS):
        ids.append(rb.column(0))
        all_texts = rb.column(1).to_pylist()
        for a, b in text_batches(all_texts, _NO_CAP) if len(hashes) else ():
            texts = all_texts[a:b]
            grams = ngrams(_long_docs(word_tokens(texts, _NO_CAP), ngram), ngram)
            pos = np.minimum(np.searchsorted(hashes, grams.values), len(hashes) - 1)
            hit = hashes[pos] == grams.values
            if not hit.any():
                continue
            doc_of = np.repeat(np.arange(len(texts)), np.diff(grams.offsets))[hit]
            key = bench[pos[hit]] * (1 << 32) + item[pos[hit]]  # first benchmark, then first item
            docs = np.unique(doc_of)
            best = np.full(len(texts), np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(best, doc_of, key)
            out_rows.append(docs + row0 + a)
            out_bench.append(best[docs] >> 32)
            out_item.append(best[docs] & 0xFFFFFFFF)
            out_hits.append(np.bincount(doc_of, minlength=len(texts))[docs])
        row0 += len(all_texts)
    counters.increment(f"docs/{entry.source}", row0)
    rows = np.concatenate(out_rows) if out_rows else np.empty(0, np.int64)
    if len(rows):
        with open_read(labels_path) as f:
            labels = json.loads(f.read())
        b = np.concatenate(out_bench)
        it = np.concatenate(out_item)
        all_ids = pa.chunked_array(ids).combine_chunks() if ids else pa.array([], pa.string())
        table = pa.table({
            "id": all_ids.take(pa.array(rows)),
            "benchmark": pa.array([bench_names[x] for x in b], pa.string()),
            "item": pa.array([labels[x][y] for x, y in zip(b.tolist(), it.tolist())], pa.string()),
            "ngram_hits": np.concatenate(out_hits).astype(np.int64),
        }, schema=DECON_SCHEMA)
        for x in b.tolist():
            counters.increment(f"contaminated/{entry.source}/{bench_names[x]}")
    else:
        table = DECON_SCHEMA.empty_table()
    counters.increment(f"contaminated/{entry.source}", len(rows))
    write_parquet_atomic(table, dst, meta)
    return {"gidx": entry.gidx, "marked": int(len(rows))}


def _long_docs(tok: Tokens, n: int) -> Tokens:
    """Docs with fewer than n words contribute no n-gram (instead of one short shingle)."""
    seg = np.diff(tok.offsets)
    short = (seg > 0) & (seg < n)
    if not short.any():
        return tok
    keep = np.repeat(~short, seg)
    offs = np.zeros(len(seg) + 1, dtype=np.int64)
    np.cumsum(np.where(short, 0, seg), out=offs[1:])
    return Tokens(tok.values[keep], offs)


def decontaminate(
    sources: Sequence[SourceRef | tuple],
    benchmarks: Sequence[BenchmarkSpec],
    out_dir: str,
    cfg: DecontamConfig | None = None,
    exec_config: ExecConfig | None = None,
) -> DecontamResult:
    """Mark documents of every source that share a word n-gram with any benchmark item."""
    cfg = cfg or DecontamConfig()
    specs = [b if isinstance(b, BenchmarkSpec) else BenchmarkSpec(**b) for b in benchmarks]
    names = [b.name for b in specs]
    if len(set(names)) != len(names):
        raise DedupInputError(f"duplicate benchmark names: {names}")
    srcs = as_sources(sources)
    entries = file_table(srcs)
    hashes, bench, item, labels, bstats = load_benchmark_ngrams(specs, cfg)
    for s in srcs:
        invalidate(attr_dir(out_dir, s.name))
    work = f"{out_dir.rstrip('/')}/work"
    table_path, labels_path = f"{work}/benchmark_ngrams.npz", f"{work}/item_labels.json"
    buf = io.BytesIO()
    np.savez(buf, hashes=hashes, bench=bench, item=item)
    atomic_write_bytes(table_path, buf.getvalue())
    atomic_write_bytes(labels_path, json.dumps(labels).encode())
    params = {
        "kind": "decontaminate", "decon_format": DECON_FORMAT, "shingle_format": SHINGLE_FORMAT,
        "ngram": cfg.ngram,
        "benchmarks": [{"name": s.name, "text_fields": list(s.text_fields), "id_field": s.id_field,
                        "sha256": bstats[s.name]["sha256"]} for s in specs],
    }
    meta = {"kind": "decontaminate", "params": params}
    jobs = [(e, AttributesDir.of(out_dir, e.source).file(e.name)) for e in entries]
    run = per_file_tasks(jobs, [e.path for e in entries]).map(partial(
        _scan_file, table_path=table_path, ngram=cfg.ngram, bench_names=names, labels_path=labels_path, meta=meta,
    )).run(exec_config)
    c = run.counters
    result = DecontamResult(counters=dict(sorted(c.items())), params=params)
    for s in srcs:
        per_bench = {b: c.get(f"contaminated/{s.name}/{b}", 0) for b in names}
        sc = {"docs": c.get(f"docs/{s.name}", 0), "contaminated": c.get(f"contaminated/{s.name}", 0),
              "by_benchmark": per_bench}
        write_meta(attr_dir(out_dir, s.name), {
            "kind": "decontaminate", "source": s.name, "params": params,
            "files": [e.name for e in entries if e.source == s.name], "counters": sc,
        })
        result.sources[s.name] = {"attributes": AttributesDir.rel(s.name), **sc}
    for b in names:
        st = dict(bstats[b])
        st["docs_marked"] = {s.name: c.get(f"contaminated/{s.name}/{b}", 0) for s in srcs}
        st["docs_marked_total"] = sum(st["docs_marked"].values())
        result.benchmarks[b] = st
    report = {"ngram": cfg.ngram, "benchmarks": result.benchmarks, "sources": result.sources}
    atomic_write_bytes(f"{out_dir.rstrip('/')}/report.json", json.dumps(report, indent=1, sort_keys=True).encode())
    remove_tree(work)
    return result
