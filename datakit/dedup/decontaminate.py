"""Decontamination: flag training documents that hold a substantial part of a benchmark test item.

A single shared n-gram is not evidence: on real code a docstring's list of small integers shares runs of
digits with unrelated files, and a license header or an import block is in thousands of documents. So a
document is flagged by how much of an item it contains (every knob is a key of the manifest's
`decontaminate:` section; the per-benchmark ones can be overridden on a benchmark's entry):

1. Each item's text fields are normalized like dedup text (lowercase, punctuation and symbols dropped,
   digits folded to 0, whitespace collapsed) and cut into word n-grams (`ngram`, default 13). A field may
   be a string or a list of strings; n-grams never span two fields or two list elements, unless
   `combine_fields` joins the fields into one text (HumanEval's prompt + canonical_solution is one
   function). A field shorter than `ngram` words gives no n-gram.
2. Weak n-grams do not count: an n-gram needs `min_content_tokens` tokens that are not digits, single
   characters or very common words (`STOP_WORDS`). They are not looked up at all.
3. Boilerplate is measured on the corpus itself: an item n-gram found in more than
   max(`boilerplate_min_docs`, `boilerplate_doc_fraction` x corpus documents) documents of all sources
   (license headers, import blocks, common idioms) is discounted: it counts neither as a hit nor in the
   item's size. An item most of whose n-grams are that common is itself copied across the corpus, which
   is contamination, not boilerplate: it keeps them all.
4. A document is flagged for an item when the n-grams of the item found in it cover at least
   `min_fraction` of the item's words (those its counted n-grams cover), or of one field's words, and
   they are at least `min_hits` distinct n-grams (a field with fewer counted n-grams than `min_hits`
   must be found whole). Words, not n-grams, make the fraction: the first half of an item found is 0.5
   whatever the item's length (as a share of n-grams it would be far less for a short item).

What happens to a flagged document is its benchmark's `action`: `remove` the whole document (default),
`cut` only the matched spans (the rest is kept; consolidate gives it the id of its new text), or
`annotate` (recorded, nothing removed). `annotate_only: true` turns every benchmark to annotate, to tune
the knobs on a real corpus before removing anything. With several benchmarks in one document the
strongest action wins (remove > cut > annotate) and a cut removes every matched span. A cut that would
leave fewer than `ngram` words, or whose text equals another document of the same file, removes the
document instead (the detail says why).

Audit trail: every flagged document gets a row in its source's co-partitioned attribute file: the best
flag (benchmark, item, matched fraction, hit count, the field that decided or "" for the whole item),
every flag of the document, the action, the matched character spans of the original text, an excerpt,
the id after a cut, and the detail consolidate writes to outputs/removed/. `report.json` holds, per
benchmark, the items read, weak and boilerplate n-grams and the documents flagged per source, and lists
the flags (up to `_MAX_REPORT_FLAGS`) with their excerpts.

Benchmarks: jsonl (.gz/.zst), parquet, or a directory of text files (one item per file, its path
relative to the directory as `path`). Item ids come from `id_field`, else the line (jsonl) or row
(parquet) number from 1, or the file's relative path (a directory).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import unicodedata
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterator, Literal, Sequence

import numpy as np
import pyarrow as pa
import xxhash

from datakit.core import arrow_numpy as an
from datakit.core.documents import content_id
from datakit.core.fsio import atomic_write_bytes, exists, local_path, open_read, remove
from datakit.core.layout import AttributesDir
from datakit.core.listing import content_sha256, directory_files
from datakit.core.uris import is_remote
from datakit.manifest.checks import check_name, check_nonempty
from datakit.shuffle import ExecConfig, counters
from datakit.shuffle.io import open_decompressed

from .consolidate import cut_text
from . import keyed
from .hashing import U64
from .keyed import Reuse
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
    read_columns,
    write_meta,
    write_parquet_atomic,
)
from .minhash import text_batches
from .shingles import SHINGLE_FORMAT, Tokens, ngrams, normalize_text, word_spans, word_tokens

DECON_FORMAT = 2
Action = Literal["remove", "cut", "annotate"]
ACTIONS = ("annotate", "cut", "remove")  # weakest first: a document's action is the strongest of its flags
SPAN = pa.struct([("start", pa.int64()), ("end", pa.int64())])
FLAG = pa.struct([("benchmark", pa.string()), ("item", pa.string()), ("fraction", pa.float64()),
                  ("ngram_hits", pa.int64()), ("field", pa.string())])
DECON_SCHEMA = pa.schema([
    ("id", pa.string()), ("benchmark", pa.string()), ("item", pa.string()), ("fraction", pa.float64()),
    ("ngram_hits", pa.int64()), ("field", pa.string()), ("action", pa.string()), ("flags", pa.list_(FLAG)),
    ("spans", pa.list_(SPAN)), ("new_id", pa.string()), ("excerpt", pa.string()), ("detail", pa.string()),
])
_NO_CAP = 1 << 62
_MAX_EXAMPLES = 10
_MAX_REPORT_FLAGS = 1000
_EXCERPT_CHARS = 240
BATCH_ROWS = 2048
SCAN_DIR = "reuse/scan"  # pass 1's per-file scans, named by their content key (kept for the next build)

# Very common words: an n-gram made only of these, digits and single characters says nothing about
# which text it came from. English function words plus the keywords and builtins every Python file uses.
STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers him his how i if in into is it its itself just me more most my no nor not now of
off on once only or other our out over own same she should so some such than that the their theirs them
then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours
def return self cls none true false elif else import pass break continue lambda yield raise try except
finally class global nonlocal assert del with async await print len range int str list dict set tuple
float bool object type isinstance append
""".split())


def _probe_benchmark_path(path: str, timeout: float) -> list[str]:
    """A benchmark must be a local file or directory: its content is hashed into the step identity."""
    if is_remote(path):
        return [f"{path}: must be a local path"]
    if not os.path.exists(local_path(path)):
        return [f"file not found: {path}"]
    return []


@dataclass(frozen=True)
class BenchmarkSpec:
    """A benchmark test set (an item of the manifest's `decontaminate.benchmarks`).

    path: a jsonl(.gz/.zst) or parquet file, or a directory of text files (one item per file);
    text_fields: the fields holding the item's text (a directory's items have `text` and `path`);
    id_field: the field naming each item (default: the line/row number from 1, a file's relative path);
    format: jsonl | parquet | text (a directory), else from the extension;
    combine_fields: join the text fields into one text per item (n-grams span the join), for fields
    that continue each other (HumanEval: prompt + canonical_solution);
    action, min_fraction, min_hits: this benchmark's override of the section's knob (null: the section's).
    """

    name: str = field(metadata={"check": check_name})
    path: str = field(metadata={"path": True, "probe": _probe_benchmark_path})
    text_fields: tuple[str, ...] = field(default=("text",), metadata={"check": check_nonempty})
    id_field: str | None = None
    format: Literal["jsonl", "parquet", "text"] | None = None
    combine_fields: bool = False
    action: Action | None = None
    min_fraction: float | None = field(default=None, metadata={"gt": 0, "max": 1})
    min_hits: int | None = field(default=None, metadata={"min": 1})

    def _probe(self, timeout: float) -> list[tuple[str, str]]:
        """The manifest check that reads the file: its first records hold the declared text fields."""
        if not os.path.exists(self.path):
            return []  # the path's own probe reports it
        seen: set[str] = set()
        try:
            for i, (_, rec) in enumerate(_iter_records(self.path, self.format)):
                seen.update(rec)
                if i >= 99:
                    break
        except Exception as e:  # noqa: BLE001 - an unreadable benchmark is reported, not raised
            return [("path", f"cannot read {self.path}: {type(e).__name__}: {e}")]
        missing = [f for f in self.text_fields if f not in seen]
        if missing:
            return [("text_fields", f"{', '.join(missing)} not in the records of {os.path.basename(self.path)} "
                                    f"(fields: {', '.join(sorted(seen)) or 'none'})")]
        return []

    def __post_init__(self) -> None:
        if isinstance(self.text_fields, str):
            object.__setattr__(self, "text_fields", (self.text_fields,))
        else:
            object.__setattr__(self, "text_fields", tuple(self.text_fields))
        if not self.text_fields:
            raise ValueError(f"benchmark {self.name}: text_fields must not be empty")
        if self.action is not None and self.action not in ACTIONS:
            raise ValueError(f"benchmark {self.name}: action must be one of {', '.join(ACTIONS)}, got {self.action!r}")


@dataclass(frozen=True)
class DecontamConfig:
    """The manifest's `decontaminate:` section (module docstring: how a document is flagged).

    ngram: words per n-gram (13); min_fraction: the share of an item's (or one field's) words a document
    must hold in matched n-grams (0.3); min_hits: and at least this many distinct n-grams (2);
    min_content_tokens: an n-gram counts only with this many tokens that are not digits, single
    characters or stop words (1);
    boilerplate_doc_fraction / boilerplate_min_docs: an n-gram in more than max(min_docs, fraction x
    corpus documents) documents is boilerplate and discounted (0.001, 20); action: remove | cut |
    annotate (remove); annotate_only: flag and record only, remove nothing (false).
    """

    benchmarks: tuple[BenchmarkSpec, ...] = ()
    ngram: int = field(default=13, metadata={"min": 1})
    min_fraction: float = field(default=0.3, metadata={"gt": 0, "max": 1})
    min_hits: int = field(default=2, metadata={"min": 1})
    min_content_tokens: int = field(default=1, metadata={"min": 0})
    boilerplate_doc_fraction: float = field(default=0.001, metadata={"min": 0, "max": 1})
    boilerplate_min_docs: int = field(default=20, metadata={"min": 1})
    action: Action = "remove"
    annotate_only: bool = False

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        seen: set[str] = set()
        for b in self.benchmarks:
            if b.name in seen:
                return [("benchmarks", f"duplicate benchmark name '{b.name}'")]
            seen.add(b.name)
        if self.min_content_tokens > self.ngram:
            return [("min_content_tokens", f"{self.min_content_tokens} is more than ngram ({self.ngram}): no "
                                           "n-gram could count; lower it")]
        return []

    def __post_init__(self) -> None:
        if not isinstance(self.ngram, int) or self.ngram < 1:
            raise ValueError(f"ngram must be a positive integer, got {self.ngram!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {self.action!r}")

    def knobs(self, spec: BenchmarkSpec) -> tuple[float, int, str]:
        """(min_fraction, min_hits, action) in force for one benchmark."""
        action = "annotate" if self.annotate_only else (spec.action or self.action)
        return (spec.min_fraction if spec.min_fraction is not None else self.min_fraction,
                spec.min_hits if spec.min_hits is not None else self.min_hits, action)


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


# ---------------------------------------------------------------- benchmark files
def _is_dir_format(path: str, fmt: str | None) -> bool:
    return fmt == "text" or (fmt is None and os.path.isdir(path))


def _dir_files(path: str) -> list[str]:
    """A directory benchmark's files (relative paths, sorted; dot-files and dot-folders skipped)."""
    return directory_files(path)


def _iter_records(path: str, fmt: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line or row number from 1, record) of a jsonl(.gz/.zst) or parquet file, or (file number,
    {"path", "text"}) of a directory of text files; malformed JSON is an error."""
    if _is_dir_format(path, fmt):
        if not os.path.isdir(path):
            raise DedupInputError(f"{path}: format text means a directory of text files, and this is not one")
        for i, rel in enumerate(_dir_files(path), 1):
            with open(os.path.join(path, rel), encoding="utf-8", errors="replace") as f:
                yield i, {"path": rel, "text": f.read()}
        return
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


def benchmark_sha256(path: str) -> str:
    """Content hash of a benchmark file or directory (`core.listing.content_sha256`)."""
    return content_sha256(path)


def _segments(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return [str(v) for v in value]
    return None


def _item_label(spec: BenchmarkSpec, number: int, rec: dict) -> str:
    value = rec.get(spec.id_field) if spec.id_field else None
    if value is None and _is_dir_format(spec.path, spec.format):
        value = rec.get("path")
    return str(value) if value is not None else str(number)


def _item_texts(spec: BenchmarkSpec, st: dict) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """(item label, [(field index, text)]) per item; missing and non-text fields are counted in `st`."""
    def note(msg: str) -> None:
        if len(st["examples"]) < _MAX_EXAMPLES:
            st["examples"].append(msg)

    for number, rec in _iter_records(spec.path, spec.format):
        st["items"] += 1
        st["fields_seen"].update(rec)
        texts: list[tuple[int, str]] = []
        for fi, fld in enumerate(spec.text_fields):
            if rec.get(fld) is None:
                st["missing_field"] += 1
                note(f"{spec.path}:{number}: field {fld!r} missing")
                continue
            segs = _segments(rec[fld])
            if segs is None:
                st["bad_field_type"] += 1
                note(f"{spec.path}:{number}: field {fld!r} is a {type(rec[fld]).__name__}, not text")
                continue
            texts.extend((fi, s) for s in segs)
        if spec.combine_fields and texts:
            texts = [(0, "\n".join(t for _, t in texts))]
        yield _item_label(spec, number, rec), texts


# ---------------------------------------------------------------- the benchmark table
@dataclass
class BenchmarkTable:
    """Every countable n-gram of every item, and the units (whole items and fields) it belongs to.

    hashes: sorted unique n-gram hashes (uid = index); pair_uid/pair_unit/pair_pos: one entry per place
    an n-gram has in a unit (the position of its first word among the unit's words), sorted by uid;
    pair_off: the pairs of uid u are pair_off[u]:pair_off[u+1]; unit_item/unit_field: a unit's item and
    field index (-1: the whole item); item_bench: an item's benchmark index.
    """

    hashes: np.ndarray
    pair_uid: np.ndarray
    pair_unit: np.ndarray
    pair_pos: np.ndarray
    pair_off: np.ndarray
    unit_item: np.ndarray
    unit_field: np.ndarray
    item_bench: np.ndarray

    def save(self, path: str) -> None:
        buf = io.BytesIO()
        np.savez(buf, **dataclasses.asdict(self))
        atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path: str) -> "BenchmarkTable":
        with open_read(path) as f:
            z = np.load(f)
            return cls(**{k.name: z[k.name] for k in dataclasses.fields(cls)})


def _weak_tokens(text: str) -> list[bool]:
    """Per normalized word of `text`: True for digits, single characters and stop words."""
    return [len(w) == 1 or w in STOP_WORDS or not w.strip("0") for w in normalize_text(text).split()]


def _countable_grams(texts: list[str], cfg: DecontamConfig
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(n-gram hashes, their segment, their first word's position in it, words per segment (0 below
    `ngram`), weak n-grams dropped) of the countable n-grams of every segment."""
    n = cfg.ngram
    tok = word_tokens(texts, _NO_CAP)
    seg = np.diff(tok.offsets)
    strong = np.zeros(len(tok.values), dtype=np.int64)
    for i, t in enumerate(texts):
        if seg[i] >= n:
            weak = _weak_tokens(t)
            if len(weak) != seg[i]:
                raise RuntimeError(f"word count mismatch in a benchmark text ({len(weak)} != {seg[i]}) "
                                   "(internal error)")
            strong[tok.offsets[i]:tok.offsets[i + 1]] = ~np.asarray(weak, dtype=bool)
    long = _long_docs(tok, n)
    keep = np.repeat(seg >= n, seg)
    grams = ngrams(long, n)
    counts = np.diff(grams.offsets)
    seg_of = np.repeat(np.arange(len(texts)), counts)
    starts = np.repeat(long.offsets[:-1], counts) + (np.arange(len(seg_of)) - np.repeat(grams.offsets[:-1], counts))
    cs = np.concatenate(([0], np.cumsum(strong[keep])))
    content = cs[starts + n] - cs[starts] if len(starts) else np.empty(0, np.int64)
    ok = content >= cfg.min_content_tokens
    pos = starts - long.offsets[seg_of] if len(starts) else np.empty(0, np.int64)
    return grams.values[ok], seg_of[ok], pos[ok], np.where(seg >= n, seg, 0), int((~ok).sum())


def _offsets_in_group(keys: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Exclusive running sum of `lengths` restarting wherever `keys` changes (consecutive groups)."""
    total = np.cumsum(lengths) - lengths
    start = np.ones(len(keys), dtype=bool)
    start[1:] = keys[1:] != keys[:-1]
    group_base = total[start][np.cumsum(start) - 1]
    return total - group_base


def load_benchmarks(specs: Sequence[BenchmarkSpec], cfg: DecontamConfig
                    ) -> tuple[BenchmarkTable, list[list[str]], list[list[str]], dict]:
    """(the table, item labels per benchmark, unit field names per benchmark, stats per benchmark)."""
    max_fields = max((len(s.text_fields) for s in specs), default=1) + 1
    all_hash, all_raw, all_pos, item_bench, labels, field_names, stats = [], [], [], [], [], [], {}
    for b, spec in enumerate(specs):
        if not exists(spec.path):
            raise DedupInputError(f"benchmark {spec.name}: file not found: {spec.path}")
        st = {"items": 0, "missing_field": 0, "bad_field_type": 0, "items_without_ngrams": 0, "examples": [],
              "fields_seen": set()}
        names, texts, seg_item, seg_field = [], [], [], []
        for label, item_texts in _item_texts(spec, st):
            gid = len(item_bench)
            item_bench.append(b)
            names.append(label)
            for fi, t in item_texts:
                texts.append(t)
                seg_item.append(gid)
                seg_field.append(fi)
        _check_benchmark_read(spec, st, texts)
        hashes, seg_of, pos, seg_words, weak = _countable_grams(texts, cfg)
        s_item, s_field = np.asarray(seg_item, np.int64), np.asarray(seg_field, np.int64)
        items, fields_ = s_item[seg_of], s_field[seg_of]
        # positions in the unit's words: its segments one after the other
        item_pos = pos + _offsets_in_group(s_item, seg_words)[seg_of]
        field_pos = pos + _offsets_in_group(s_item * max_fields + s_field, seg_words)[seg_of]
        all_hash.append(hashes)
        all_raw.append(items * max_fields)  # the whole item
        all_pos.append(item_pos)
        if not spec.combine_fields and len(spec.text_fields) > 1:
            all_hash.append(hashes)
            all_raw.append(items * max_fields + fields_ + 1)
            all_pos.append(field_pos)
        gid0 = len(item_bench) - len(names)
        has = np.zeros(len(names), dtype=bool)
        has[items - gid0] = True
        st["items_without_ngrams"] = int((~has).sum())
        for i in np.flatnonzero(~has)[: max(0, _MAX_EXAMPLES - len(st["examples"]))]:
            st["examples"].append(f"{spec.name} item {names[i]}: no field has {cfg.ngram}+ words with a countable "
                                  "n-gram")
        st.update(ngrams=int(len(np.unique(hashes))), weak_ngrams=weak, sha256=benchmark_sha256(spec.path))
        del st["fields_seen"]
        labels.append(names)
        field_names.append(["+".join(spec.text_fields)] if spec.combine_fields else list(spec.text_fields))
        stats[spec.name] = st
    table = _table(all_hash, all_raw, all_pos, max_fields, np.asarray(item_bench, np.int64))
    return table, labels, field_names, stats


def _check_benchmark_read(spec: BenchmarkSpec, st: dict, texts: list[str]) -> None:
    if st["items"] == 0:
        raise DedupInputError(f"benchmark {spec.name}: {spec.path} has no items")
    if not texts:
        raise DedupInputError(
            f"benchmark {spec.name}: none of the fields {list(spec.text_fields)} holds text in {spec.path} "
            f"(fields seen: {', '.join(sorted(st['fields_seen'])[:20])}); check text_fields"
        )


def _table(all_hash: list, all_raw: list, all_pos: list, max_fields: int, item_bench: np.ndarray
           ) -> BenchmarkTable:
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.empty(0, dt))
    h, raw, pos = cat(all_hash, U64), cat(all_raw, np.int64), cat(all_pos, np.int64)
    hashes, uid = np.unique(h, return_inverse=True)
    units_raw, unit = np.unique(raw, return_inverse=True)
    order = np.lexsort((pos, unit, uid))
    uid, unit, pos = uid[order].astype(np.int64), unit[order].astype(np.int64), pos[order]
    off = np.zeros(len(hashes) + 1, dtype=np.int64)
    np.cumsum(np.bincount(uid, minlength=len(hashes)), out=off[1:])
    return BenchmarkTable(hashes, uid, unit, pos, off, units_raw // max_fields, units_raw % max_fields - 1,
                          item_bench)


def _covered(group: np.ndarray, pos: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(groups, words covered in each by the n-word windows starting at `pos`): the union's length."""
    if not len(group):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.lexsort((pos, group))
    g, p = group[order], pos[order]
    step = np.full(len(p), n, dtype=np.int64)
    same = g[1:] == g[:-1]
    step[:-1] = np.where(same, np.minimum(n, p[1:] - p[:-1]), n)
    keys, first = np.unique(g, return_index=True)
    return keys, np.add.reduceat(step, first)


# ---------------------------------------------------------------- pass 1: where item n-grams occur
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


def _scan_file(job: tuple[FileEntry, str], table_path: str, ngram: int) -> dict[str, int]:
    """One file's hits (row, n-gram uid, token position) and its per-n-gram document counts (for the
    boilerplate measure) to its scan file; its document count. The scan depends on the file's text and
    the table's n-gram hashes only, so it is a unit later builds reuse (keyed.py)."""
    entry, hits_path = job
    hashes = BenchmarkTable.load(table_path).hashes
    rows, uids, poss = [], [], []
    row0 = 0
    for rb in iter_batches(entry.path, ["text"], BATCH_ROWS):
        texts = rb.column(0).to_pylist()
        for a, b in text_batches(texts, _NO_CAP) if len(hashes) else ():
            grams = ngrams(_long_docs(word_tokens(texts[a:b], _NO_CAP), ngram), ngram)
            pos = np.minimum(np.searchsorted(hashes, grams.values), len(hashes) - 1)
            idx = np.flatnonzero(hashes[pos] == grams.values)
            if not len(idx):
                continue
            doc = np.searchsorted(grams.offsets, idx, side="right") - 1
            rows.append(doc + row0 + a)
            uids.append(pos[idx])
            poss.append(idx - grams.offsets[doc])
        row0 += len(texts)
    cat = (lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.empty(0, np.int64))
    r, u, p = cat(rows), cat(uids), cat(poss)
    doc_uid = np.unique(r * max(len(hashes), 1) + u) % max(len(hashes), 1)
    df_uid, df_n = np.unique(doc_uid, return_counts=True)
    buf = io.BytesIO()
    np.savez(buf, rows=r, uids=u, pos=p, df_uid=df_uid.astype(np.int64), df_n=df_n.astype(np.int64))
    atomic_write_bytes(hits_path, buf.getvalue())
    return {"docs": row0}


def _scan_jobs(srcs: Sequence[SourceRef], entries: Sequence[FileEntry], table: BenchmarkTable, ngram: int,
               out_dir: str, reuse_from: Reuse | None) -> tuple[list[str], list[keyed.Job]]:
    """(each entry's scan file, the unique keyed scan jobs). A scan's key: the n-gram size, the table's
    hashes (uids index them), the formats and the file's recorded content; its file is named by the
    key, so identical files share one scan and a later build finds it whatever the file is called."""
    settings = reuse_from.settings if reuse_from is not None else ()
    earlier = reuse_from.earlier if reuse_from is not None else None
    recorded = keyed.recorded_hashes([s.dir for s in srcs]) if reuse_from is not None else {}
    table_digest = xxhash.xxh3_128_hexdigest(np.ascontiguousarray(table.hashes).tobytes())
    formats = (DECON_FORMAT, SHINGLE_FORMAT, unicodedata.unidata_version, ngram, table_digest)
    paths, jobs, seen = [], [], set()
    for e in entries:
        key = keyed.key_of(settings, formats, recorded.get(e.path)) if reuse_from is not None else None
        rel = f"{SCAN_DIR}/{key or f'{e.source}-{e.gidx:06d}'}.npz"
        paths.append(f"{out_dir.rstrip('/')}/{rel}")
        if rel not in seen:
            seen.add(rel)
            jobs.append(keyed.Job(key, (rel,), (e, paths[-1]), earlier))
    return paths, jobs


def _scan(srcs: Sequence[SourceRef], entries: Sequence[FileEntry], table: BenchmarkTable, table_path: str,
          ngram: int, out_dir: str, reuse_from: Reuse | None, exec_config: ExecConfig | None
          ) -> tuple[list[str], dict[str, int]]:
    """Pass 1 over every file (taking unchanged files' scans from the earlier build): each entry's scan
    file, and the counters (documents per source; files reused and computed)."""
    paths, jobs = _scan_jobs(srcs, entries, table, ngram, out_dir, reuse_from)
    compute = partial(_scan_file, table_path=table_path, ngram=ngram)
    done = keyed.run_all(jobs, [j.job[0].path for j in jobs], out_dir, compute, exec_config)
    docs = {d.files[0]: d.stats["docs"] for d in done}
    c: dict[str, int] = {}
    for e, path in zip(entries, paths):
        rel = path[len(out_dir.rstrip("/")) + 1:]
        c[f"docs/{e.source}"] = c.get(f"docs/{e.source}", 0) + docs[rel]
    if reuse_from is not None:
        c.update(keyed.record(out_dir, done))
    return paths, c


# ---------------------------------------------------------------- between the passes: boilerplate
def _discount(table: BenchmarkTable, df: np.ndarray, total_docs: int, cfg: DecontamConfig
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(counted mask over pairs, words of each unit its counted n-grams cover, counted n-grams per unit,
    boilerplate mask over uids, the threshold in documents)."""
    threshold = max(cfg.boilerplate_min_docs, math.ceil(cfg.boilerplate_doc_fraction * total_docs))
    boiler = df > threshold
    n_units, n_items = len(table.unit_item), len(table.item_bench)
    whole = table.unit_field[table.pair_unit] == -1
    item_of = table.unit_item[table.pair_unit[whole]]
    total = np.bincount(item_of, minlength=n_items)
    common = np.bincount(item_of, weights=boiler[table.pair_uid[whole]], minlength=n_items)
    replicated = common * 2 > total  # mostly "boilerplate": the item itself is copied around
    counted = ~boiler[table.pair_uid] | replicated[table.unit_item[table.pair_unit]]
    den = np.zeros(n_units, dtype=np.int64)
    units, words = _covered(table.pair_unit[counted], table.pair_pos[counted], cfg.ngram)
    den[units] = words
    distinct = np.unique(table.pair_unit[counted] * max(len(table.hashes), 1) + table.pair_uid[counted])
    grams = np.bincount(distinct // max(len(table.hashes), 1), minlength=n_units)
    return counted, den, grams, boiler, threshold


# ---------------------------------------------------------------- pass 2: flags per document
@dataclass
class _Knobs:
    """Everything pass 2 needs besides the table, as one picklable value."""

    table_path: str
    decide_path: str
    labels_path: str
    ngram: int
    bench_names: list[str]
    min_fraction: list[float]
    min_hits: list[int]
    actions: list[str]
    meta: dict


@dataclass
class _Flag:
    bench: int
    item: int  # global item index
    fraction: float
    hits: int
    field: int  # -1: the whole item


def _unit_hits(table: BenchmarkTable, counted: np.ndarray, rows: np.ndarray, uids: np.ndarray, n: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(row, unit, distinct counted n-grams of the unit found in the row, unit words they cover)."""
    n_uid = max(len(table.hashes), 1)
    key = np.unique(rows * n_uid + uids)
    r, u = key // n_uid, key % n_uid
    start, cnt = table.pair_off[u], table.pair_off[u + 1] - table.pair_off[u]
    base = np.repeat(np.cumsum(cnt) - cnt, cnt)
    pidx = np.repeat(start, cnt) + (np.arange(int(cnt.sum())) - base)
    pr = np.repeat(r, cnt)
    keep = counted[pidx]
    pr, pidx = pr[keep], pidx[keep]
    n_units = len(table.unit_item)
    group = pr * n_units + table.pair_unit[pidx]
    k_hits, hits = np.unique(np.unique(group * n_uid + table.pair_uid[pidx]) // n_uid, return_counts=True)
    k_cov, words = _covered(group, table.pair_pos[pidx], n)
    assert np.array_equal(k_hits, k_cov)
    return k_hits // n_units, k_hits % n_units, hits, words


def _flags(table: BenchmarkTable, counted: np.ndarray, den: np.ndarray, grams: np.ndarray, k: _Knobs,
           rows: np.ndarray, uids: np.ndarray) -> dict[int, list[_Flag]]:
    """row -> its flags, best first (highest fraction, then benchmark order, then item order).

    The fraction of a unit is the share of its words (those its counted n-grams cover) inside n-grams
    found in the document: half of an item found is 0.5 whatever the item's length."""
    r, u, hits, words = _unit_hits(table, counted, rows, uids, k.ngram)
    d = den[u]
    frac = np.where(d > 0, words / np.maximum(d, 1), 0.0)
    bench = table.item_bench[table.unit_item[u]]
    need = np.minimum(np.asarray(k.min_hits, np.int64)[bench], grams[u])
    ok = (d > 0) & (frac >= np.asarray(k.min_fraction)[bench]) & (hits >= need)
    whole = table.unit_field[u] == -1
    sel = whole & np.isin(r, r[ok])
    item_hits = dict(zip(zip(r[sel].tolist(), table.unit_item[u[sel]].tolist()), hits[sel].tolist()))
    best: dict[tuple[int, int], _Flag] = {}
    for row, unit, f in zip(r[ok].tolist(), u[ok].tolist(), frac[ok].tolist()):
        item = int(table.unit_item[unit])
        cur = best.get((row, item))
        if cur is None or f > cur.fraction:
            best[(row, item)] = _Flag(int(table.item_bench[item]), item, f, item_hits.get((row, item), 0),
                                      int(table.unit_field[unit]))
    out: dict[int, list[_Flag]] = {}
    for (row, _), fl in sorted(best.items()):
        out.setdefault(row, []).append(fl)
    for fl in out.values():
        fl.sort(key=lambda x: (-x.fraction, x.bench, x.item))
    return out


def _token_ranges(table: BenchmarkTable, hits: tuple[np.ndarray, np.ndarray, np.ndarray],
                  flags: dict[int, list[_Flag]], n: int) -> dict[int, list[tuple[int, int]]]:
    """row -> merged token ranges of every occurrence of its flagged items' n-grams (counted or not).

    Ranges closer than `n` tokens are bridged, so a stretch of weak n-grams inside a planted item (a
    list of numbers) goes with the item rather than being left behind as a fragment."""
    rows, uids, pos = hits
    sel = np.flatnonzero(np.isin(rows, np.fromiter(flags, np.int64)))
    r, u, p = rows[sel], uids[sel], pos[sel]
    cnt = table.pair_off[u + 1] - table.pair_off[u]
    hit_i = np.repeat(np.arange(len(sel)), cnt)
    pidx = np.repeat(table.pair_off[u], cnt) + (np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt))
    n_items = len(table.item_bench)
    want = np.fromiter((row * n_items + f.item for row, fl in flags.items() for f in fl), np.int64)
    ok = np.isin(r[hit_i] * n_items + table.unit_item[table.pair_unit[pidx]], want)
    keep = np.unique(hit_i[ok])
    out: dict[int, list[tuple[int, int]]] = {}
    for row, start in sorted(set(zip(r[keep].tolist(), p[keep].tolist()))):
        ranges = out.setdefault(row, [])
        if ranges and start < ranges[-1][1] + n:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], start + n))
        else:
            ranges.append((start, start + n))
    return out


def _char_spans(text: str, ranges: list[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Token ranges as character spans of the original text (None if the words do not line up)."""
    ws = word_spans(text)
    if not ranges or ranges[-1][1] > len(ws):
        return None
    return [(int(ws[a, 0]), int(ws[b - 1, 1])) for a, b in ranges]


def _excerpt(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return " ".join(text[:_EXCERPT_CHARS].split())
    s, e = spans[0]
    body = " ".join(text[s:min(e, s + 4 * _EXCERPT_CHARS)].split())
    return body if len(body) <= _EXCERPT_CHARS else body[:_EXCERPT_CHARS - 1] + "…"


def _cut_outcome(text: str, spans: list[tuple[int, int]] | None, n: int, ids: set[str], new_ids: set[str]
                 ) -> tuple[str, str | None, str]:
    """(action, new id, note) for a document whose benchmark says cut."""
    if spans is None:
        return "remove", None, "matched words could not be located, removed whole"
    rest = cut_text(text, spans)
    left = len(word_spans(rest))
    if left < n:
        return "remove", None, f"cutting would leave {left} word(s), removed whole"
    nid = content_id(rest)
    if nid in ids or nid in new_ids:
        return "remove", None, f"the cut text equals document {nid}, removed whole"
    new_ids.add(nid)
    return "cut", nid, f"cut {len(spans)} span(s), new id {nid}"


def _flag_label(f: _Flag, k: _Knobs, labels: list[list[str]], field_names: list[list[str]]) -> dict:
    item = labels[f.bench][f.item - k.meta["item_base"][f.bench]]
    fname = field_names[f.bench][f.field] if f.field >= 0 else ""
    return {"benchmark": k.bench_names[f.bench], "item": item, "fraction": round(f.fraction, 6),
            "ngram_hits": f.hits, "field": fname}


def _detail(flags: list[dict], note: str) -> str:
    b = flags[0]
    out = f"{b['benchmark']}:{b['item']} fraction={b['fraction']:.2f} hits={b['ngram_hits']}"
    out += f" field={b['field']}" if b["field"] else ""
    if len(flags) > 1:
        more = ", ".join(f"{x['benchmark']}:{x['item']}" for x in flags[1:4])
        out += f"; +{len(flags) - 1} more ({more}{', ...' if len(flags) > 4 else ''})"
    return out + (f"; {note}" if note else "")


def _doc_row(doc_id: str, text: str, flags: list[_Flag], ranges: list[tuple[int, int]], k: _Knobs,
             names: tuple[list[list[str]], list[list[str]]], ids: set[str], new_ids: set[str]) -> dict:
    """The attribute row of one flagged document (DECON_SCHEMA)."""
    labelled = [_flag_label(f, k, *names) for f in flags]
    action = max((k.actions[f.bench] for f in flags), key=ACTIONS.index)
    spans = _char_spans(text or "", ranges)
    new_id, note = None, ""
    if action == "cut":
        action, new_id, note = _cut_outcome(text or "", spans, k.ngram, ids, new_ids)
    best = labelled[0]
    return {"id": doc_id, "benchmark": best["benchmark"], "item": best["item"], "fraction": best["fraction"],
            "ngram_hits": best["ngram_hits"], "field": best["field"], "action": action, "flags": labelled,
            "spans": [{"start": s, "end": e} for s, e in spans or []], "new_id": new_id,
            "excerpt": _excerpt(text or "", spans or []), "detail": _detail(labelled, note)}


def _flag_file(job: tuple[FileEntry, str, str], k: _Knobs) -> dict:
    """One file's attribute rows: its flagged documents, decided from its hits and the corpus counts."""
    entry, hits_path, dst = job
    with open_read(hits_path) as f:
        z = np.load(f)
        hits = (z["rows"], z["uids"], z["pos"])
    flags: dict[int, list[_Flag]] = {}
    if len(hits[0]):
        table = BenchmarkTable.load(k.table_path)
        with open_read(k.decide_path) as f:
            d = np.load(f)
            counted, den, grams = d["counted"], d["den"], d["grams"]
        flags = _flags(table, counted, den, grams, k, hits[0], hits[1])
    records: list[dict] = []
    if flags:
        with open_read(k.labels_path) as f:
            names = tuple(json.loads(f.read()))
        ranges = _token_ranges(table, hits, flags, k.ngram)
        t = read_columns(entry.path, ["id", "text"])
        ids = t.column("id").to_pylist()
        order = sorted(flags)
        texts = t.column("text").take(pa.array(order)).to_pylist()
        id_set, new_ids = set(ids), set()
        records = [_doc_row(ids[row], text, flags[row], ranges.get(row, []), k, names, id_set, new_ids)
                   for row, text in zip(order, texts)]
    table_out = pa.Table.from_pylist(records, schema=DECON_SCHEMA) if records else an.empty(DECON_SCHEMA)
    write_parquet_atomic(table_out, dst, k.meta["file_meta"])
    return _count_flags(entry, records, flags)


def _count_flags(entry: FileEntry, records: list[dict], flags: dict[int, list[_Flag]]) -> dict:
    """Flat counters of one file's flags, and what the report needs from it."""
    counters.increment(f"contaminated/{entry.source}", len(records))
    for rec in records:
        for b in sorted({f["benchmark"] for f in rec["flags"]}):
            counters.increment(f"contaminated/{entry.source}/{b}")
        counters.increment(f"action/{entry.source}/{rec['action']}")
    report = [{"source": entry.source, "file": entry.name, "id": r["id"], "benchmark": r["benchmark"],
               "item": r["item"], "fraction": r["fraction"], "ngram_hits": r["ngram_hits"], "field": r["field"],
               "action": r["action"], "spans": [[s["start"], s["end"]] for s in r["spans"][:20]],
               "excerpt": r["excerpt"], "detail": r["detail"]} for r in records[:_MAX_REPORT_FLAGS]]
    items = sorted({f.item for fl in flags.values() for f in fl})
    return {"gidx": entry.gidx, "marked": len(records), "items": items, "flags": report}


# ---------------------------------------------------------------- the step
def _params(cfg: DecontamConfig, specs: Sequence[BenchmarkSpec], bstats: dict) -> dict:
    """Every knob, as the attribute sets and the report record them (benchmarks by content)."""
    knobs = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "benchmarks"}
    benches = []
    for s in specs:
        b = {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "path"}
        mf, mh, action = cfg.knobs(s)
        benches.append({**b, "text_fields": list(s.text_fields), "sha256": bstats[s.name]["sha256"],
                        "effective": {"min_fraction": mf, "min_hits": mh, "action": action}})
    return {"kind": "decontaminate", "decon_format": DECON_FORMAT, "shingle_format": SHINGLE_FORMAT, **knobs,
            "benchmarks": benches}


def _corpus_counts(table: BenchmarkTable, scans: list[str], scan_counters: dict[str, int]
                   ) -> tuple[np.ndarray, int]:
    """Documents holding each item n-gram (all sources together, summed from every file's scan: the
    global counts are recomputed, never patched), and the number of documents."""
    df = np.zeros(len(table.hashes), dtype=np.int64)
    for path in scans:
        with open_read(path) as f:
            z = np.load(f)
            np.add.at(df, z["df_uid"], z["df_n"])
    return df, sum(v for k, v in scan_counters.items() if k.startswith("docs/"))


def decontaminate(
    sources: Sequence[SourceRef | tuple],
    benchmarks: Sequence[BenchmarkSpec],
    out_dir: str,
    cfg: DecontamConfig | None = None,
    exec_config: ExecConfig | None = None,
    reuse_from: Reuse | None = None,
) -> DecontamResult:
    """Flag documents of every source that hold a substantial part of a benchmark item (module docstring).

    ``reuse_from``: take each file's scan (pass 1, the part that reads every text) from the earlier
    build when the file and the benchmark table are unchanged; the corpus counts and pass 2 are
    recomputed from the scans (pass 2 reads texts of flagged documents only)."""
    cfg = cfg or DecontamConfig()
    specs = [b if isinstance(b, BenchmarkSpec) else BenchmarkSpec(**b) for b in benchmarks]
    names = [b.name for b in specs]
    if len(set(names)) != len(names):
        raise DedupInputError(f"duplicate benchmark names: {names}")
    srcs = as_sources(sources)
    entries = file_table(srcs)
    table, labels, field_names, bstats = load_benchmarks(specs, cfg)
    for s in srcs:
        invalidate(attr_dir(out_dir, s.name))
    work = f"{out_dir.rstrip('/')}/work"
    paths = {k: f"{work}/{k}" for k in ("table.npz", "decide.npz", "labels.json")}
    table.save(paths["table.npz"])
    atomic_write_bytes(paths["labels.json"], json.dumps([labels, field_names]).encode())
    params = _params(cfg, specs, bstats)
    hits, scan_counters = _scan(srcs, entries, table, paths["table.npz"], cfg.ngram, out_dir, reuse_from,
                                exec_config)
    df, total_docs = _corpus_counts(table, hits, scan_counters)
    counted, den, grams, boiler, threshold = _discount(table, df, total_docs, cfg)
    buf = io.BytesIO()
    np.savez(buf, counted=counted, den=den, grams=grams)
    atomic_write_bytes(paths["decide.npz"], buf.getvalue())
    item_base = np.searchsorted(table.item_bench, np.arange(len(specs))).tolist()
    knobs = [cfg.knobs(s) for s in specs]
    k = _Knobs(paths["table.npz"], paths["decide.npz"], paths["labels.json"], cfg.ngram, names,
               [x[0] for x in knobs], [x[1] for x in knobs], [x[2] for x in knobs],
               {"item_base": item_base, "file_meta": {"kind": "decontaminate", "params": params}})
    jobs = [(e, h, AttributesDir.of(out_dir, e.source).file(e.name)) for e, h in zip(entries, hits)]
    run2 = per_file_tasks(jobs, [e.path for e in entries]).map(partial(_flag_file, k=k)).run(exec_config)
    c = {**scan_counters, **run2.counters}
    boiler_stats = {"threshold_docs": threshold, "corpus_docs": total_docs}
    result = _result(out_dir, srcs, entries, specs, table, boiler, bstats, c, run2.items, params)
    report = {"ngram": cfg.ngram, "params": params, "boilerplate": boiler_stats, "benchmarks": result.benchmarks,
              "sources": result.sources, **_report_flags(run2.items)}
    atomic_write_bytes(f"{out_dir.rstrip('/')}/report.json", json.dumps(report, indent=1, sort_keys=True).encode())
    remove(work)
    return result


def _report_flags(items: list[dict]) -> dict:
    flags = [f for it in items for f in it["flags"]]
    total = sum(it["marked"] for it in items)
    return {"flags": flags[:_MAX_REPORT_FLAGS], "flags_total": total,
            "flags_listed": min(len(flags), _MAX_REPORT_FLAGS)}


def _result(out_dir: str, srcs: list[SourceRef], entries: list[FileEntry], specs: Sequence[BenchmarkSpec],
            table: BenchmarkTable, boiler: np.ndarray, bstats: dict, c: dict, items: list[dict],
            params: dict) -> DecontamResult:
    """The step's result: per source and per benchmark counts; writes each source's attribute meta."""
    names = [s.name for s in specs]
    result = DecontamResult(counters=dict(sorted(c.items())), params=params)
    for s in srcs:
        per_bench = {b: c.get(f"contaminated/{s.name}/{b}", 0) for b in names}
        by_action = {a: c.get(f"action/{s.name}/{a}", 0) for a in ACTIONS}
        sc = {"docs": c.get(f"docs/{s.name}", 0), "contaminated": c.get(f"contaminated/{s.name}", 0),
              "by_benchmark": per_bench, "by_action": by_action}
        write_meta(attr_dir(out_dir, s.name), {
            "kind": "decontaminate", "source": s.name, "params": params,
            "files": [e.name for e in entries if e.source == s.name], "counters": sc,
        })
        result.sources[s.name] = {"attributes": AttributesDir.rel(s.name), **sc}
    pair_bench = table.item_bench[table.unit_item[table.pair_unit]]
    flagged = {i for it in items for i in it["items"]}
    for b, name in enumerate(names):
        st = dict(bstats[name])
        st["docs_marked"] = {s.name: c.get(f"contaminated/{s.name}/{name}", 0) for s in srcs}
        st["docs_marked_total"] = sum(st["docs_marked"].values())
        st["boilerplate_ngrams"] = int(len(np.unique(table.pair_uid[(pair_bench == b) & boiler[table.pair_uid]])))
        st["items_flagged"] = sum(1 for i in flagged if table.item_bench[i] == b)
        result.benchmarks[name] = st
        result.counters[f"items_flagged/{name}"] = st["items_flagged"]
    return result
