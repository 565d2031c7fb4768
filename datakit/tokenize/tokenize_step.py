"""The tokenize stage: one consolidated source (parquet parts) -> a train and a validation token cache.

One engine task per input part: it reads the part in chunks of about ``batch_bytes`` of text, encodes
each chunk in one call (tiktoken or HF ``encode_batch_fast``, see :mod:`datakit.tokenize.engine`: the same
ids either way, checked on a sample of every shard; long texts are cut at whitespace first) on a helper
thread while the task's own thread reads the next chunk
and converts/writes the previous one, appends EOS (and optionally BOS) per document, routes each
document to train or validation by a hash of its id, and streams tokens straight into the split's .npy
files. Output shard i of each split comes from input part i only, so the result is byte-identical for
any worker count, backend or batch size.

Resume: each finished shard leaves a marker holding the fingerprint of its inputs (part name and size,
tokenizer sha256, split and encoding settings). A rerun reuses shards whose marker matches and rebuilds
the rest; the ledger (the commit point) is written last, once every shard is done.

Reuse across builds (``earlier``, datakit/steps/reuse.py): a shard's files depend on its input part's
content and the settings only (the tokenizer's sha256 and ids, the split and encoding settings, this
version), so that is its content key, with the part's content read from the input step's outputs
manifest. When the cache is rebuilt because some parts changed (a source edited, a file taken down),
every part whose key an earlier build of the same step recorded is taken from it (hard links) instead
of encoded: one edited part costs one part. A taken shard lands under this build's shard name (the
names hold the index and the count, which change when parts are added or removed; the files do not),
its markers are written as encoding it writes them, and the ledger and ``.stats.json`` are made from all
shards as in a fresh build, so the cache is byte for byte a from-scratch build's. A part with bad rows
is never recorded (its marker names the input file's path, which is not content).

A part whose key misses but which is the earlier build's part of the same name with a few documents
removed, added or edited (a takedown: the documents are spread, so it touches nearly every part; an
edited input document) is spliced, not encoded: the documents the earlier shard has keep their token
spans, only the others are encoded, and the shard is assembled in document order
(:mod:`datakit.tokenize.trim`; each shard's document hashes are kept for this under
``reuse/ids/<key>.npy``, listed in ``reuse.json``). More than half the documents new: the part is
encoded whole. Its counts are computed from the part's texts as encoding computes them
(``files/spliced``).
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from datakit.shuffle import Dataset, ExecConfig, FileInfo, backend_capabilities, counters, list_files, small_job_config
from datakit.core import arrow_numpy as an
from datakit.core.fsio import (copy_file, is_dir, is_local, link_or_copy, read_bytes, sha256_file,
                                store_url, write_noted)
from datakit.core.layout import TOKENIZER_FILE, TokenCacheDir
from datakit.steps import reuse
from datakit.tokenize import cache as C
from datakit.tokenize import trim
from datakit.tokenize.encode import MAX_PIECE_CHARS, assemble_flat, to_pieces, token_dtype
from datakit.tokenize.engine import (CHECK_CHARS, ENGINES, EngineChoice, EngineError, ShardEncoder, choose, convert,
                                     encode_thread)
from datakit.tokenize.tokenizer import find_source_files, shared_tokenizer

__all__ = ["TokenizeResult", "tokenize_source", "is_validation", "SPLITS", "VERSION"]

logger = logging.getLogger(__name__)

# Bump when the cache contents for the same inputs change (stage implementation version).
# 2: the ledger and each shard's marker record xxh3-128 checksums of the shard's files.
# 3: the documents' hashes (reuse/ids) keep each text's byte count; the settings the step's text lineage.
# 4: a long text is cut where a whitespace run starts, so its pieces encode to its whole encoding.
VERSION = "4"
SPLITS = TokenCacheDir.SPLITS
_MAX_BAD_SAMPLES = 20


def is_validation(doc_id: str, fraction: float) -> bool:
    """Deterministic train/validation assignment from the document id alone (xxh3_64 of a salted id)."""
    if fraction <= 0:
        return False
    return xxhash.xxh3_64_intdigest(trim.SPLIT_SALT + doc_id.encode("utf-8")) < fraction * 2.0**64


@dataclass(frozen=True)
class _ShardSpec:
    """Everything a task needs, shipped to workers (small: the tokenizer is re-loaded there; the earlier
    build is its reuse keys and file hashes, a few per part)."""

    name: str
    out_dir: str
    tokenizer_path: str
    identity: dict
    validation_fraction: float
    bos: bool
    max_chars: int
    batch_bytes: int
    threads: int | None
    dtype: str
    engine: str = "auto"
    engine_check_pieces: int = 64
    engine_check_chars: int = CHECK_CHARS
    keys: dict[str, str] = field(default_factory=dict)  # input part path -> its content key (reuse)
    earlier: reuse.Earlier | None = None  # an earlier build of this cache to take shards from
    trim_from: dict[str, str] = field(default_factory=dict)  # input part path -> earlier key of its name
    text_lineage: str | None = None  # what decides an id's text besides the id (None: unknown; see trim.py)
    in_process: bool = False  # tasks run in the driver: RAYON_NUM_THREADS is not theirs to set


@dataclass
class TokenizeResult:
    """What tokenize_source built: split dirs and exact totals.

    ``splits[s]["path"]`` is relative to ``out_dir``, and ``to_dict()`` (the step's record) leaves
    ``out_dir`` out: a record that names no absolute path stays valid when the run prefix is moved or
    mirrored. ``split_dir()`` resolves a split against ``out_dir`` for callers in this process."""

    name: str
    out_dir: str
    splits: dict[str, dict]
    tokenizer: dict
    num_shards: int
    reused_shards: int
    bad_records: int
    bad_samples: list[dict] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    engine: str = "hf"
    engine_reason: str = ""
    engine_checked_pieces: int = 0
    engine_mismatches: int = 0

    def split_dir(self, split: str) -> str:
        return C.join(self.out_dir, self.splits[split]["path"])

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["out_dir"]
        return d


# --------------------------------------------------------------------------------------------- the task

def _tokenizer_for(spec: _ShardSpec):
    """The step's tokenizer, parsed once per process by content (`shared_tokenizer`: a task per shard
    would otherwise re-parse the JSON each time; each source's step reads its own copy of the same
    tokenizer); its file is read only when this process does not hold that content yet."""
    if spec.threads and not spec.in_process and "RAYON_NUM_THREADS" not in os.environ:
        os.environ["RAYON_NUM_THREADS"] = str(spec.threads)  # read when the Rust pool first starts
    tok, ident = shared_tokenizer(spec.tokenizer_path, sha256=spec.identity["sha256"])
    if ident.sha256 != spec.identity["sha256"]:
        raise RuntimeError(
            f"tokenizer {spec.tokenizer_path} changed while tokenizing (sha256 {ident.sha256}, expected "
            f"{spec.identity['sha256']}); rerun the step"
        )
    return tok


_ENGINES: dict[tuple[str, str, str], EngineChoice] = {}


_CONVERSIONS: dict[str, tuple[Any, str]] = {}


def _engine_for(spec: _ShardSpec) -> EngineChoice:
    """One engine choice per worker process and step: a failed equality check then keeps the rest of the
    step in this process on HF. The tiktoken conversion is built once per process and tokenizer (by
    content), whichever source's step uses it."""
    key = (spec.tokenizer_path, spec.identity["sha256"], spec.engine)
    if key not in _ENGINES:
        _ENGINES[key] = _choose(_tokenizer_for(spec), spec.identity["sha256"], spec.engine, spec.tokenizer_path)
    return _ENGINES[key]


def _choose(tok: Any, sha: str, engine: str, where: str) -> EngineChoice:
    """`choose` with the tiktoken conversion made once per process and tokenizer (by content): a run's
    driver plans the engine of every source's step that encodes nothing with one conversion."""
    if engine != "hf" and sha not in _CONVERSIONS:
        _CONVERSIONS[sha] = convert(tok)
    return choose(tok, engine, where=where, converted=_CONVERSIONS.get(sha))


def _encoder_threads(spec: _ShardSpec) -> int:
    """tiktoken threads: one fewer than the tokenizer's share of the CPUs, since the task's own thread
    reads, assembles and writes meanwhile (one tiktoken thread gives the most tokens per CPU-second)."""
    return max(1, (spec.threads or 1) - 1)


def _settings(spec: _ShardSpec) -> dict:
    """Everything a shard's files depend on besides its input part."""
    return {
        "version": VERSION,
        "tokenizer_sha256": spec.identity["sha256"],
        "eos_id": spec.identity["eos_id"],
        "bos_id": spec.identity["bos_id"] if spec.bos else None,
        "validation_fraction": spec.validation_fraction,
        "max_chars": spec.max_chars,
        "dtype": spec.dtype,
        **({"text_lineage": spec.text_lineage} if spec.text_lineage is not None else {}),
    }


def _fingerprint(spec: _ShardSpec, file: FileInfo) -> dict:
    """What a shard's done marker records: the settings and the input part by name and size."""
    return {**_settings(spec), "input": os.path.basename(file.path), "input_size": file.size}


def _reusable(spec: _ShardSpec, names: dict[str, str], fp: dict) -> dict | None:
    """The recorded result of a finished shard with the same fingerprint, else None."""
    found = {}
    for split in SPLITS:
        d = TokenCacheDir(spec.out_dir).split(split)
        marker = C.join(d, names["marker"])
        if not C.exists(marker):
            return None
        try:
            m = C.read_json(marker)
        except (ValueError, OSError):
            return None
        if m.get("fingerprint") != fp:
            return None
        if not (C.exists(C.join(d, names["tokens"])) and C.exists(C.join(d, names["offsets"]))):
            return None
        found[split] = m
    return found


def _require_columns(path: str, names: list[str]) -> None:
    for col in ("id", "text"):
        if col not in names:
            raise ValueError(f"{path}: missing column {col!r} (columns: {names}); expected consolidated records")


def _batches(path: str, batch_bytes: int) -> Iterator[tuple[int, pa.Array, pa.Array]]:
    """(first row number, id column, text column) chunks of about ``batch_bytes`` of text, cut by the
    texts' byte lengths (not by row count: one record batch of long documents can hold far more than
    a chunk, and a shard read as one chunk would leave nothing to overlap with encoding)."""
    with C.open_read(path) as f:
        pf = pq.ParquetFile(f)
        _require_columns(path, pf.schema_arrow.names)
        ids: list[pa.Array] = []
        texts: list[pa.Array] = []
        size = 0
        row = 0
        first = 0
        for rb in pf.iter_batches(batch_size=1024, columns=["id", "text"], use_threads=False):
            id_col, text_col = rb.column(0), rb.column(1)
            if pa.types.is_string(text_col.type) or pa.types.is_large_string(text_col.type):
                lengths = an.byte_lengths(text_col)
            else:  # wrong type: let the caller's type check report it with the file name
                lengths = np.zeros(len(text_col), dtype=np.int64)
            cum = np.cumsum(lengths, dtype=np.int64)
            start = 0
            while start < len(rb):
                base = int(cum[start - 1]) if start else 0
                # last row of this chunk: the first one at which the chunk reaches batch_bytes
                stop = min(int(np.searchsorted(cum, base + batch_bytes - size, side="left")) + 1, len(rb))
                ids.append(id_col.slice(start, stop - start))
                texts.append(text_col.slice(start, stop - start))
                size += int(cum[stop - 1]) - base
                row += stop - start
                start = stop
                if size >= batch_bytes:
                    yield first, pa.concat_arrays(ids), pa.concat_arrays(texts)
                    ids, texts, size, first = [], [], 0, row
        if ids:
            yield first, pa.concat_arrays(ids), pa.concat_arrays(texts)


def _check_types(path: str, ids: pa.Array, texts: pa.Array) -> None:
    for col, arr in (("id", ids), ("text", texts)):
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            raise ValueError(f"{path}: column {col!r} has type {arr.type}, expected string")


@dataclass
class _BadRows:
    """Rows dropped for a null id or text: every one counted, the first ``_MAX_BAD_SAMPLES`` kept."""

    count: int = 0
    samples: list[dict] = field(default_factory=list)

    def add(self, path: str, row: int, field_name: str) -> None:
        self.count += 1
        if len(self.samples) < _MAX_BAD_SAMPLES:
            self.samples.append({"file": path, "row": row, "field": field_name, "error": f"{field_name} is null"})


def _prepare(spec: _ShardSpec, path: str, first_row: int, ids: pa.Array, texts: pa.Array,
             bad: _BadRows) -> tuple:
    """Drop (and report) bad rows; return (pieces, pieces per doc, validation mask, UTF-8 bytes per doc,
    the documents' hashes: see :mod:`datakit.tokenize.trim`)."""
    _check_types(path, ids, texts)
    if ids.null_count or texts.null_count:
        id_ok = an.valid(ids)
        valid = id_ok & an.valid(texts)
        for r in np.flatnonzero(~valid):
            bad.add(path, first_row + int(r), "text" if id_ok[r] else "id")
        keep = pa.array(valid)
        ids, texts = ids.filter(keep), texts.filter(keep)
    text_list = texts.to_pylist()
    hashes = trim.doc_hashes(ids, texts)
    val_mask = trim.validation_mask(hashes[:, 0], spec.validation_fraction)
    doc_bytes = an.byte_lengths(texts)
    pieces, piece_counts = to_pieces(text_list, spec.max_chars)
    return pieces, piece_counts, val_mask, doc_bytes, hashes


class _ShardWriter:
    """Shard ``names`` of both splits being written (state: the token file writers, each split's
    document lengths for the offsets file, and its row/token/byte counts)."""

    def __init__(self, spec: _ShardSpec, dirs: dict[str, str], names: dict[str, str]) -> None:
        self.dirs, self.names = dirs, names
        self.dtype = np.dtype(spec.dtype)
        self.eos, self.bos = int(spec.identity["eos_id"]), (spec.identity["bos_id"] if spec.bos else None)
        self.writers = {s: C.NpyStreamWriter(C.join(dirs[s], names["tokens"]), self.dtype) for s in SPLITS}
        self.lengths: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
        self.counts = {s: {"rows": 0, "tokens": 0, "bytes": 0} for s in SPLITS}

    def write(self, encoded: Future, piece_counts: np.ndarray, val_mask: np.ndarray, doc_bytes: np.ndarray) -> None:
        """Assemble one encoded batch into documents (EOS, optional BOS) and append each to its split."""
        ids, piece_lens = encoded.result()
        tokens, doc_lens = assemble_flat(ids, piece_lens, piece_counts, eos_id=self.eos, bos_id=self.bos,
                                         dtype=self.dtype)
        del ids
        if not val_mask.any():
            parts = {"train": (tokens, doc_lens, doc_bytes)}
        else:
            tok_val = np.repeat(val_mask, doc_lens)
            parts = {
                "train": (tokens[~tok_val], doc_lens[~val_mask], doc_bytes[~val_mask]),
                "validation": (tokens[tok_val], doc_lens[val_mask], doc_bytes[val_mask]),
            }
        for s, (t, dl, db) in parts.items():
            self.writers[s].append(t)
            self.lengths[s].append(dl)
            self.counts[s]["rows"] += len(dl)
            self.counts[s]["tokens"] += len(t)
            self.counts[s]["bytes"] += int(db.sum())

    def close(self) -> None:
        """Write each split's offsets file and publish its tokens file."""
        for s in SPLITS:
            dl = np.concatenate(self.lengths[s]) if self.lengths[s] else np.empty(0, np.int64)
            offsets = np.concatenate([[0], np.cumsum(dl, dtype=np.int64)]).astype("<i8")
            C.write_npy_atomic(C.join(self.dirs[s], self.names["offsets"]), offsets)
            self.writers[s].close()

    def abort(self) -> None:
        for w in self.writers.values():
            w.abort()


def _encode_into(file: FileInfo, spec: _ShardSpec, encoder: ShardEncoder, out: _ShardWriter,
                 bad: _BadRows) -> np.ndarray:
    """Read, encode and write the whole part as a two-stage pipeline: while the tokenizer encodes batch
    k on its own threads (the call releases the GIL), this thread reads and splits batch k+1 and
    converts + writes batch k-1, so the Rust threads always have the next batch queued and never wait
    on Python. Two to three batches are in memory. Returns the documents' hashes (kept for trimming).
    The encoding thread is the process's kept one (``engine.encode_thread``: tiktoken is slower on a
    thread that did not use it first, and a new thread per shard never has)."""
    hashes = []
    pool = encode_thread()
    previous = None
    for first_row, ids, texts in _batches(file.path, spec.batch_bytes):
        pieces, piece_counts, val_mask, doc_bytes, h = _prepare(spec, file.path, first_row, ids, texts, bad)
        hashes.append(h)
        encoded = pool.submit(encoder.encode_flat, pieces)
        del ids, texts, pieces
        if previous is not None:
            out.write(*previous)
        previous = (encoded, piece_counts, val_mask, doc_bytes)
    if previous is not None:
        out.write(*previous)
    return np.concatenate(hashes) if hashes else np.empty((0, 3), dtype="<u8")


def _reused_result(index: int, fp: dict, done: dict) -> dict:
    """The task's result for a shard a previous build finished, from its markers."""
    return {"index": index, "input": fp["input"], "reused": True,
            "splits": {s: done[s]["counts"] for s in SPLITS}, "bad": done["train"].get("bad", 0),
            "bad_samples": done["train"].get("bad_samples", []),
            "checksums": {s: done[s].get("checksums") or {} for s in SPLITS}}


_COUNTS = ("rows", "tokens", "bytes")
_SHARD_FILES = ("tokens", "offsets")


def _shard_file(rel: str) -> tuple[str, str]:
    """(split dir, "tokens" or "offsets") of a shard's token or offsets file, relative to the cache."""
    split_dir, base = rel.rsplit("/", 1)
    return split_dir, "tokens" if base.endswith(".tokens.npy") else "offsets"


def _is_ids(rel: str) -> bool:
    return rel.startswith(trim.IDS_DIR)


def _renamed(rel: str, names: dict[str, str]) -> str:
    """An earlier build's shard file, under this build's name for the shard (same split); the unit's
    document hashes keep their name (the key's)."""
    if _is_ids(rel):
        return rel
    split_dir, kind = _shard_file(rel)
    return f"{split_dir}/{names[kind]}"


def _unit(key: str, index: int, total: int, counts: dict[str, dict]) -> reuse.Unit:
    """What reuse.json records of one shard: its four files, its documents' hashes (what a later build
    trims from) and its per-split counts."""
    names = C.shard_file_names(index, total)
    files = tuple(f"{TokenCacheDir.split_rel(s)}/{names[k]}" for s in SPLITS for k in _SHARD_FILES)
    return reuse.Unit((*files, trim.ids_rel(key)), {f"{s}/{k}": int(counts[s][k]) for s in SPLITS for k in _COUNTS})


def _write_ids(spec: _ShardSpec, key: str | None, hashes: np.ndarray) -> None:
    """A keyed shard's document hashes, written before its markers (a done shard always has them), noted
    with their digest (`fsio.write_noted`: the manifest reads none of it)."""
    if key is not None:
        write_noted(C.join(spec.out_dir, trim.ids_rel(key)), trim.to_npy_bytes(hashes))


def _marker(fp: dict, counts: dict, bad: _BadRows, sums: dict) -> dict:
    """A split's done marker for one shard."""
    return {"fingerprint": fp, "counts": counts, "bad": bad.count, "bad_samples": bad.samples, "checksums": sums}


def _write_markers(dirs: dict[str, str], names: dict[str, str], fp: dict, counts: dict[str, dict],
                   bad: _BadRows, sums: dict[str, dict]) -> None:
    """Each split's done marker for the shard, written last: a shard counts as done only once its data
    files are in place."""
    for s in SPLITS:
        write_noted(C.join(dirs[s], names["marker"]), C.json_bytes(_marker(fp, counts[s], bad, sums[s])))


def _take_markers(spec: _ShardSpec, earlier: dict[str, str], dirs: dict[str, str], names: dict[str, str],
                  fp: dict, counts: dict[str, dict], sums: dict[str, dict]) -> None:
    """A taken shard's done markers, after its data files: the earlier build's (``earlier``: per split,
    its marker's path there), linked, where they hold the very bytes this build would write (same
    settings, input part by name and size, counts and checksums: an edit takes 57 of 58 shards so), else
    written and noted (`fsio.write_noted`: the manifest does not read them back). A link costs no new
    file's write and fsync (an edit's 57 shards had written 114 markers); on an object store, where a copy
    costs what a write does, they are written."""
    local = is_local(spec.out_dir) and is_local(spec.earlier.step_dir)
    for s in SPLITS:
        want = C.json_bytes(_marker(fp, counts[s], _BadRows(), sums[s]))
        dst = C.join(dirs[s], names["marker"])
        if local and s in earlier:
            try:
                link_or_copy(earlier[s], dst)
                if read_bytes(dst) == want:  # the linked file itself is what is compared
                    continue
            except FileNotFoundError:
                pass
        write_noted(dst, want)


def _taken(spec: _ShardSpec, path: str, key: str, index: int, names: dict[str, str], fp: dict) -> dict | None:
    """The shard taken from the earlier build that recorded ``key`` (its files under this build's
    names, its markers written as encoding it writes them), or None when that build has no such shard
    or its files no longer match what it recorded."""
    unit = reuse.take(spec.earlier, key, spec.out_dir, partial(_renamed, names=names))
    if unit is None:
        return None
    if trim.ids_rel(key) not in unit.files:  # a build from before trimming: hash the part's documents
        ids, texts = _read_part(path)
        _write_ids(spec, key, trim.doc_hashes(ids, texts))
    counts = {s: {k: unit.stats[f"{s}/{k}"] for k in _COUNTS} for s in SPLITS}
    sums: dict[str, dict] = {s: {} for s in SPLITS}
    markers: dict[str, str] = {}  # per split, the earlier build's marker of this shard (beside its tokens)
    for rel in unit.files:  # take() checked each file against these recorded hashes
        if _is_ids(rel):
            continue
        split_dir, kind = _shard_file(rel)
        split = next(s for s in SPLITS if TokenCacheDir.split_rel(s) == split_dir)
        sums[split][kind] = spec.earlier.hashes[rel]
        if kind == "tokens":
            markers[split] = C.join(spec.earlier.step_dir, rel[: -len(".tokens.npy")] + ".json")
    dirs = {s: TokenCacheDir(spec.out_dir).split(s) for s in SPLITS}
    _take_markers(spec, markers, dirs, names, fp, counts, sums)
    return {"index": index, "input": fp["input"], "reused": True, "splits": counts, "bad": 0, "bad_samples": [],
            "checksums": sums}


def _read_part(path: str, columns: tuple[str, ...] = ("id", "text")) -> tuple[pa.Array, ...]:
    """A part's id and text columns (or ``columns`` of them), whole: what trimming reads of it (no
    encoding)."""
    with C.open_read(path) as f:
        pf = pq.ParquetFile(f)  # not pq.read_table: its dataset layer costs a worker 0.5 CPU-s of imports
        _require_columns(path, pf.schema_arrow.names)
        table = pf.read(columns=list(columns), use_threads=False)
    return tuple(an.combined(table.column(c)) for c in columns)


def _earlier_file(earlier: reuse.Earlier, rel: str | None) -> bytes | None:
    """An earlier build's file, if it is still what that build recorded in its outputs manifest."""
    if rel is None or rel not in earlier.hashes:
        return None
    try:
        data = read_bytes(C.join(earlier.step_dir, rel))
    except FileNotFoundError:
        return None
    return data if xxhash.xxh3_128_hexdigest(data) == earlier.hashes[rel] else None


def _earlier_rel(earlier: reuse.Earlier, key: str, split: str, kind: str) -> str | None:
    """The earlier unit ``key``'s ``kind`` file ("tokens" or "offsets") of ``split``, relative to its cache."""
    return next((r for r in earlier.keys[key].files
                 if not _is_ids(r) and _shard_file(r) == (TokenCacheDir.split_rel(split), kind)), None)


def _earlier_splits(earlier: reuse.Earlier, key: str) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """Per split, the earlier unit ``key``'s shard (tokens, offsets); None when a file is gone or damaged
    or a shard's offsets do not fit its tokens."""
    out = {}
    for s in SPLITS:
        arrays = []
        for kind in _SHARD_FILES:
            data = _earlier_file(earlier, _earlier_rel(earlier, key, s, kind))
            if data is None:
                return None
            arrays.append(trim.from_npy_bytes(data))
        tokens, offsets = arrays
        if int(offsets[-1]) != len(tokens):
            return None
        out[s] = (tokens, offsets)
    return out


def _shard_encoder(spec: _ShardSpec) -> ShardEncoder:
    """A shard's encoder: the step's engine, checked against HF as the spec says."""
    return ShardEncoder(_engine_for(spec), threads=_encoder_threads(spec), min_pieces=spec.engine_check_pieces,
                        check_chars=spec.engine_check_chars)


def _encode_fresh(spec: _ShardSpec, texts: list[str]) -> tuple[np.ndarray, np.ndarray, dict]:
    """The documents ``texts`` encoded as a shard encodes them (pieces, EOS, optional BOS): (their tokens,
    their offsets, the encoder's record)."""
    encoder = _shard_encoder(spec)
    pieces, piece_counts = to_pieces(texts, spec.max_chars)
    ids, piece_lens = encoder.encode_flat(pieces)
    tokens, doc_lens = assemble_flat(ids, piece_lens, piece_counts, eos_id=int(spec.identity["eos_id"]),
                                     bos_id=spec.identity["bos_id"] if spec.bos else None, dtype=spec.dtype)
    return tokens, np.concatenate([[0], np.cumsum(doc_lens, dtype=np.int64)]), encoder.record()


def _select(tokens: np.ndarray, offsets: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Documents ``docs`` (indices, in order) of a flat (tokens, offsets) pair, as another such pair."""
    pieces = [tokens[offsets[d]:offsets[d + 1]] for d in docs.tolist()]
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    return (np.concatenate(pieces) if pieces else tokens[:0].copy()), np.concatenate([[0], np.cumsum(lengths)])


def _spliced(spec: _ShardSpec, path: str, key: str | None, names: dict[str, str], fp: dict) -> dict | None:
    """The shard built from the earlier build's shard of the part of the same name
    (datakit/tokenize/trim.py): its documents' tokens taken from there, the documents it lacks (added,
    or edited) encoded. None (encode the whole part) when more than half the documents are new, the part
    has bad rows, or the earlier files are not what that build recorded. Its counts are computed as
    encoding computes them. A part whose documents the earlier one all has by id is cut without reading
    its texts (`_cut`), when the step's text lineage says an id decides its text."""
    earlier_ids = _earlier_file(spec.earlier, trim.ids_rel(spec.trim_from[path]))
    if earlier_ids is None:
        return None
    earlier_ids = trim.from_npy_bytes(earlier_ids)
    cut = _cut(spec, path, (key, names, fp), earlier_ids) if spec.text_lineage is not None else None
    if cut is not None:
        return cut
    ids, texts = _read_part(path)
    _check_types(path, ids, texts)
    if ids.null_count or texts.null_count:
        return None
    hashes = trim.doc_hashes(ids, texts)
    rows = trim.split_rows(earlier_ids, hashes, spec.validation_fraction)
    if rows is None or sum(int((r < 0).sum()) for r in rows.values()) > len(hashes) // 2:
        return None
    earlier = _earlier_holding(spec, path, rows)
    if earlier is None:
        return None
    in_split = _in_split(hashes, spec)
    fresh_rows = {s: np.flatnonzero(in_split[s])[rows[s] < 0] for s in SPLITS}
    new_rows = np.sort(np.concatenate([fresh_rows[s] for s in SPLITS]))
    fresh = None
    if len(new_rows):
        # scalar reads, not take(pa.array(...)): any list- or numpy-to-Arrow conversion imports pandas
        fresh = _encode_fresh(spec, [texts[i].as_py() for i in new_rows.tolist()])
    mine = {s: _select(fresh[0], fresh[1], np.searchsorted(new_rows, fresh_rows[s])) if fresh is not None else None
            for s in SPLITS}
    return _write_spliced(spec, (key, names, fp), (spec.trim_from[path], earlier), rows, mine, hashes, in_split,
                          fresh[2] if fresh else None)


def _earlier_holding(spec: _ShardSpec, path: str, rows: dict[str, np.ndarray]
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """The earlier shard of ``path``'s part (`_earlier_splits`), read only once the rows to take are
    known, when every row taken exists in its split; else None."""
    earlier = _earlier_splits(spec.earlier, spec.trim_from[path])
    if earlier is None or any(len(earlier[s][1]) - 1 <= int(rows[s].max(initial=-1)) for s in SPLITS):
        return None
    return earlier


def _cut(spec: _ShardSpec, path: str, shard: tuple[str | None, dict[str, str], dict], earlier_ids: np.ndarray
         ) -> dict | None:
    """The shard of a part whose every document the earlier part has by id (a takedown's part), cut from
    the earlier shard reading only the part's ids: the texts, the earlier build's byte counts and hashes
    are the earlier documents'. Sound because `_trim_sources` pairs only shards made with the same
    settings, the text lineage among them (`Graph.text_lineage`: no step changed a text under its id
    differently), so an id the earlier part had has the same text now. None: not such a part."""
    (ids,) = _read_part(path, ("id",))
    if ids.null_count or not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)):
        return None
    found = trim.id_rows(earlier_ids, trim.id_hashes(ids), spec.validation_fraction)
    earlier = _earlier_holding(spec, path, found[0]) if found is not None else None
    if earlier is None:
        return None
    rows, pos = found
    hashes = earlier_ids[pos]
    return _write_spliced(spec, shard, (spec.trim_from[path], earlier), rows, {s: None for s in SPLITS}, hashes,
                          _in_split(hashes, spec), None)


def _whole(rows: np.ndarray, n: int) -> bool:
    """``rows`` are all ``n`` rows of the earlier split, in order (nothing removed, nothing moved)."""
    return len(rows) == n and bool((rows == np.arange(n)).all())


def _linked_split(spec: _ShardSpec, earlier_key: str, split: str, split_dir: str, names: dict[str, str]
                  ) -> dict[str, str] | None:
    """The earlier unit's token and offsets files of ``split``, taken under this shard's names
    (`reuse.take_file`: the very bytes splicing would write, same documents and dtypes), and their
    checksums; None where that is not a local link (an object store's copy costs what a write does) or a
    file is gone or no longer what the earlier build recorded."""
    if not (is_local(spec.out_dir) and is_local(spec.earlier.step_dir)):
        return None
    sums = {}
    for kind in _SHARD_FILES:
        rel = _earlier_rel(spec.earlier, earlier_key, split, kind)
        if rel is None or not reuse.take_file(spec.earlier, rel, C.join(split_dir, names[kind])):
            return None
        sums[kind] = spec.earlier.hashes[rel]
    return sums


def _in_split(hashes: np.ndarray, spec: _ShardSpec) -> dict[str, np.ndarray]:
    """Per split, which of the documents (their `trim.doc_hashes` rows) it holds."""
    val = trim.validation_mask(hashes[:, 0], spec.validation_fraction)
    return {"train": ~val, "validation": val}


def _write_spliced(spec: _ShardSpec, shard: tuple[str | None, dict[str, str], dict],
                   earlier: tuple[str, dict[str, tuple[np.ndarray, np.ndarray]]], rows: dict[str, np.ndarray],
                   mine: dict[str, tuple[np.ndarray, np.ndarray] | None], hashes: np.ndarray,
                   in_split: dict[str, np.ndarray], engine: dict | None) -> dict:
    """Each split's shard (``shard``: its key, file names and fingerprint) from the earlier shard's
    ``rows`` and the split's freshly encoded documents (``mine``, None: none), then its document hashes,
    markers and counters: the task's result. ``earlier``: the earlier unit's key and its shard (per
    split, tokens and offsets). A split that keeps every earlier document in order and adds none is the
    earlier split's files, linked (`_linked_split`), not written again."""
    key, names, fp = shard
    dirs = {s: TokenCacheDir(spec.out_dir).split(s) for s in SPLITS}
    none = (np.empty(0, np.dtype(spec.dtype)), np.zeros(1, np.int64))
    counts, sums = {}, {}
    for s in SPLITS:
        tokens, offsets = earlier[1][s]
        untouched = (mine[s] is None and _whole(rows[s], len(offsets) - 1)
                     and tokens.dtype == np.dtype(spec.dtype) and offsets.dtype == np.dtype("<i8"))
        sums[s] = _linked_split(spec, earlier[0], s, dirs[s], names) if untouched else None
        if sums[s] is None:
            tokens, offsets = trim.splice(tokens, offsets, rows[s], *(mine[s] or none))
            sums[s] = {"tokens": C.write_npy_atomic(C.join(dirs[s], names["tokens"]),
                                                    np.asarray(tokens, dtype=np.dtype(spec.dtype))),
                       "offsets": C.write_npy_atomic(C.join(dirs[s], names["offsets"]), offsets)}
        counts[s] = {"rows": len(offsets) - 1, "tokens": len(tokens), "bytes": int(hashes[in_split[s], 2].sum())}
    _write_ids(spec, key, hashes)
    _write_markers(dirs, names, fp, counts, _BadRows(), sums)
    _count_shard(counts, 0)
    return {"input": fp["input"], "reused": False, "spliced": True, "splits": counts, "bad": 0,
            "bad_samples": [], "checksums": sums,
            **({"engine": engine} if engine is not None else {})}


def _shard_counters(counts: dict[str, dict], n_bad: int) -> dict[str, int]:
    """The step counters one shard adds."""
    out = {"tokenize/docs": sum(c["rows"] for c in counts.values()),
           "tokenize/tokens": sum(c["tokens"] for c in counts.values()),
           "tokenize/bytes": sum(c["bytes"] for c in counts.values())}
    return {**out, "tokenize/bad_records": n_bad} if n_bad else out


def _count_shard(counts: dict[str, dict], n_bad: int) -> None:
    for k, v in _shard_counters(counts, n_bad).items():
        counters.increment(k, v)


def _done_here(spec: _ShardSpec, files: list[FileInfo]) -> tuple[list[dict | None], dict[str, int]]:
    """Each shard finished already (a resumed build) or taken from the earlier build, here in the driver
    (markers read, or a link and a hash check: cheaper than a task, so an edit of one part of many starts
    no worker pool for the others), else None (left to its task: cut or encoded); and the counters
    their tasks would have added."""
    results: list[dict | None] = []
    added: dict[str, int] = {}
    for index, file in enumerate(files):
        names, fp, key = C.shard_file_names(index, len(files)), _fingerprint(spec, file), spec.keys.get(file.path)
        done = _reusable(spec, names, fp)
        if done is not None:
            results.append({**_reused_result(index, fp, done), "key": key})
            counts = {"tokenize/shards_reused": 1}
        else:
            taken = _taken(spec, file.path, key, index, names, fp) if key is not None else None
            results.append(None if taken is None else {**taken, "key": key})
            counts = {} if taken is None else _shard_counters(taken["splits"], 0)
        for k, v in counts.items():
            added[k] = added.get(k, 0) + v
    return results, added


def tokenize_shard(file: FileInfo, index: int, total: int, spec: _ShardSpec) -> dict:
    """Tokenize one input part into shard ``index`` of both splits (cut from the earlier build's shard
    when only documents were removed, else encoded); returns its counts."""
    names = C.shard_file_names(index, total)
    fp = _fingerprint(spec, file)
    key = spec.keys.get(file.path)
    spliced = _spliced(spec, file.path, key, names, fp) if file.path in spec.trim_from else None
    if spliced is not None:
        return {**spliced, "index": index, "key": key}

    encoder = _shard_encoder(spec)
    dirs = {s: TokenCacheDir(spec.out_dir).split(s) for s in SPLITS}
    out = _ShardWriter(spec, dirs, names)
    bad = _BadRows()
    try:
        hashes = _encode_into(file, spec, encoder, out, bad)
        out.close()
    except BaseException:
        out.abort()
        raise
    if not bad.count:
        _write_ids(spec, key, hashes)
    sums = {s: C.shard_checksums(dirs[s], names) for s in SPLITS}
    _write_markers(dirs, names, fp, out.counts, bad, sums)
    _count_shard(out.counts, bad.count)
    return {"index": index, "input": fp["input"], "reused": False, "splits": out.counts, "bad": bad.count,
            "bad_samples": bad.samples, "checksums": sums, "engine": encoder.record(), "key": key}


def _shard_task(job: tuple[FileInfo, int, int], spec: _ShardSpec) -> dict:
    """One task: (the part, its shard index, the shard count)."""
    file, index, total = job
    return tokenize_shard(file, index, total, spec)


# --------------------------------------------------------------------------------------------- driver


def _default_threads(exec_config: ExecConfig | None, n_files: int) -> int:
    cpus = os.cpu_count() or 1
    cfg = exec_config or ExecConfig()
    workers = 1 if backend_capabilities(cfg.backend).in_process else (cfg.max_workers or cpus)
    return max(1, cpus // max(1, min(workers, n_files)))


def _run_shards(spec: _ShardSpec, files: list[str], exec_config: ExecConfig | None, threads: int | None,
                batch_bytes: int | None) -> tuple[list[dict], dict[str, int]]:
    """Every shard's result in shard order, and the counters: shards finished or taken here, the rest
    on the engine, one task per part; a few parts (an edit's) run in this process, where the pool would
    cost more to start than they do (`small_job_config`)."""
    infos = list_files(files)
    done, run_counters = _done_here(spec, infos)
    todo = [(f, i, len(files)) for i, (f, d) in enumerate(zip(infos, done)) if d is None]
    if todo:
        engine = small_job_config(exec_config, sum(f.size for f, _, _ in todo))
        spec = _task_threads(spec, engine, len(todo), threads, batch_bytes)
        run = (Dataset.from_shards([[t] for t in todo], labels=[f.path for f, _, _ in todo])
               .map(partial(_shard_task, spec=spec)).run(engine))
        done += run.items
        for k, v in run.counters.items():
            run_counters[k] = run_counters.get(k, 0) + v
    return _shard_results(spec.name, [d for d in done if d is not None], len(files)), run_counters


def _task_threads(spec: _ShardSpec, engine: ExecConfig | None, n_tasks: int, threads: int | None,
                  batch_bytes: int | None) -> _ShardSpec:
    """The spec with the tokenizer threads and batch size for ``n_tasks`` tasks on ``engine`` (the CPUs
    shared by the tasks running at once; the bytes never depend on either), unless the caller gave them.
    Tasks in this process leave its environment alone (a worker pool started later inherits it)."""
    in_process = backend_capabilities((engine or ExecConfig()).backend).in_process
    threads = threads or _default_threads(engine, n_tasks)
    batch_bytes = batch_bytes or max(1 << 20, min(8 << 20, threads * (512 << 10)))
    return replace(spec, threads=threads, batch_bytes=int(batch_bytes), in_process=in_process)


def _ledger(name: str, split: str, spec: _ShardSpec, shard_results: list[dict], total: int,
            finished: bool) -> dict:
    shards = []
    for r in shard_results:
        names = C.shard_file_names(r["index"], total)
        c = r["splits"][split]
        sums = (r.get("checksums") or {}).get(split) or {}
        shards.append({"index": r["index"], "input": r["input"], "tokens_file": names["tokens"],
                       "offsets_file": names["offsets"], "rows": c["rows"], "tokens": c["tokens"],
                       "bytes": c["bytes"], "tokens_xxh3_128": sums.get("tokens"),
                       "offsets_xxh3_128": sums.get("offsets")})
    return {
        "format": C.CACHE_FORMAT,
        "version": C.CACHE_VERSION,
        "stage_version": VERSION,
        "finished": finished,
        "name": name,
        "split": split,
        "sources": [name],
        "dtype": np.dtype(spec.dtype).name,
        "vocab_size": spec.identity["vocab_size"],
        "tokenizer": dict(spec.identity),
        "tokenizer_file": TokenCacheDir.TOKENIZER_FROM_SPLIT,
        "bos": spec.bos,
        "validation_fraction": spec.validation_fraction,
        "max_chars": spec.max_chars,
        "num_shards": total,
        "shards": shards,
        "total_docs": sum(s["rows"] for s in shards),
        "total_tokens": sum(s["tokens"] for s in shards),
        "total_bytes": sum(s["bytes"] for s in shards),
        "bad_records": sum(r["bad"] for r in shard_results),
    }


def _clear_foreign_files(split_dir: str, total: int) -> None:
    """Remove shard files of another shard count and stray temporaries: they would never be read, but a
    ledger-less directory full of stale shards is confusing to inspect."""
    keep = set()
    for i in range(total):
        keep.update(C.shard_file_names(i, total).values())
    for n in C.list_names(split_dir):
        if (n.startswith(TokenCacheDir.SHARD_PREFIX) and n not in keep) or n.startswith(".tmp-"):
            C.remove(C.join(split_dir, n))


def tokenize_source(
    name: str,
    input_dir: str,
    out_dir: str,
    tokenizer_path: str,
    *,
    validation_fraction: float = 0.01,
    bos: bool = False,
    exec_config: ExecConfig | None = None,
    threads: int | None = None,
    batch_bytes: int | None = None,
    max_chars: int = MAX_PIECE_CHARS,
    engine: str = "auto",
    engine_check_pieces: int = 64,
    engine_check_chars: int = CHECK_CHARS,
    earlier: str | None = None,
    text_lineage: str | None = None,
) -> TokenizeResult:
    """Tokenize consolidated source ``name`` (its main documents, ``<input_dir>/outputs/main/*.parquet``)
    into the train and validation split dirs of ``TokenCacheDir(out_dir)`` (see
    :mod:`datakit.tokenize.cache`); the result's split paths are relative to ``out_dir``.

    threads: tokenizer (Rust) threads per worker; default cpu_count // concurrently running tasks.
    batch_bytes: text per encode call; default 512 KiB per tokenizer thread, within [1, 8] MiB. Smaller
    batches leave the tokenizer idle less at the start and end of each shard (those steps cannot overlap
    with encoding); larger ones balance many threads better.
    engine: auto | hf | tiktoken, see :mod:`datakit.tokenize.engine`; the cache bytes are the same
    whichever runs. HF re-encodes, to prove tiktoken's ids equal HF's, the first ``engine_check_chars``
    characters of every shard (at least one piece), its first two short non-ASCII pieces, and at least
    ``engine_check_pieces`` pieces per worker process (its first pieces): see
    :class:`datakit.tokenize.engine.ShardEncoder`.
    earlier: the dir of an earlier build of this cache (the step's ``ctx.earlier``): parts tokenized
    there with the same settings are taken, not encoded (module docstring). Parts are keyed when the
    input dir is a step with an outputs manifest; the keys are recorded in ``reuse.json``.
    text_lineage: what decides a document's text besides its id in the input (``Graph.text_lineage``;
    "" when an id is the content hash of its text): given, a part that only lost documents is cut from
    the earlier shard by ids alone, its texts not read (datakit/tokenize/trim.py). None: not known, so
    every document's text is hashed to prove it unchanged.
    Resumes a crashed build from its finished shards; the result equals a clean build."""
    _check_arguments(validation_fraction, max_chars, engine)
    tok, identity = shared_tokenizer(tokenizer_path)
    # forced tiktoken fails here, before any work; auto converts in the workers only (the driver's plan
    # is needed only when every shard is reused, and is made then)
    planned = _choose(tok, identity.sha256, engine, str(tokenizer_path)) if engine == "tiktoken" else None
    if bos and identity.bos_id is None:
        raise ValueError(f"bos=True but tokenizer {tokenizer_path} has no BOS token")
    files = find_source_files(input_dir)
    total = len(files)
    out_dir = out_dir.rstrip("/")
    cache_dir = TokenCacheDir(out_dir)
    tok_copy = _prepare_cache_dir(cache_dir, tokenizer_path, identity.sha256)
    spec = _ShardSpec(
        name=name, out_dir=out_dir, tokenizer_path=tok_copy, identity=identity.to_dict(),
        validation_fraction=float(validation_fraction), bos=bool(bos), max_chars=int(max_chars),
        batch_bytes=int(batch_bytes or 0), threads=threads,
        dtype=token_dtype(identity.vocab_size).str, engine=engine, engine_check_pieces=int(engine_check_pieces),
        engine_check_chars=int(engine_check_chars), text_lineage=text_lineage,
    )
    keys = _part_keys(input_dir, files, _settings(spec))
    spec = replace(spec, keys=keys, earlier=reuse.load(earlier) if keys else None)
    spec = replace(spec, trim_from=_trim_sources(spec, files))
    for s in SPLITS:
        # Un-finish first: from here on the directory is being (re)built and must not be loaded.
        C.write_json_atomic(cache_dir.ledger(s), _ledger(name, s, spec, [], total, False))
        _clear_foreign_files(cache_dir.split(s), total)

    results, run_counters = _run_shards(spec, files, exec_config, threads, batch_bytes)
    if keys:
        _record_reuse(out_dir, results, total)
    splits = _commit_splits(name, spec, cache_dir, results, total)
    if planned is None and not any("engine" in r for r in results):
        planned = _choose(tok, identity.sha256, engine, str(tokenizer_path))
    engine_record = _engine_summary(name, planned, results)
    return TokenizeResult(
        name=name, out_dir=out_dir, splits=splits, tokenizer=identity.to_dict(), num_shards=total,
        reused_shards=sum(1 for r in results if r["reused"]), bad_records=sum(r["bad"] for r in results),
        bad_samples=[b for r in results for b in r["bad_samples"]][:_MAX_BAD_SAMPLES],
        counters={**run_counters, **_file_counters(results)}, **engine_record,
    )


def _file_counters(results: list[dict]) -> dict[str, int]:
    """How each shard was made: taken (or resumed), cut from an earlier shard, or encoded."""
    reused = sum(1 for r in results if r["reused"])
    spliced = sum(1 for r in results if r.get("spliced"))
    return {"files/reused": reused, "files/spliced": spliced, "files/computed": len(results) - reused - spliced}


def _check_arguments(validation_fraction: float, max_chars: int, engine: str) -> None:
    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    if max_chars < 16:
        raise ValueError(f"max_chars must be >= 16, got {max_chars}")
    if engine not in ENGINES:
        raise EngineError(f"tokenize.engine must be one of {', '.join(ENGINES)}, got {engine!r}")


def _shard_results(name: str, items: list[dict], total: int) -> list[dict]:
    """The tasks' results in shard order, one per shard."""
    results = sorted(items, key=lambda r: r["index"])
    if [r["index"] for r in results] != list(range(total)):
        raise RuntimeError(f"tokenize {name}: expected results for shards 0..{total - 1}, got "
                           f"{[r['index'] for r in results]}")
    return results


def _record_reuse(out_dir: str, results: list[dict], total: int) -> None:
    """reuse.json for the next build: each keyed shard's files and counts (not a shard with bad rows,
    whose marker names its input's path)."""
    reuse.write(out_dir, {r["key"]: _unit(r["key"], r["index"], total, r["splits"]) for r in results
                          if r["key"] is not None and not r["bad"]})


def _part_keys(input_dir: str, files: list[str], settings: dict) -> dict[str, str]:
    """Each input part's content key (its xxh3-128 as the input step recorded it, and ``settings``);
    a part the input dir has no record of gets none (it is always encoded)."""
    root = store_url(input_dir).rstrip("/") + "/"
    recorded = reuse.output_hashes(input_dir)
    keys = {}
    for path in files:
        digest = recorded.get(path[len(root):]) if path.startswith(root) else None
        if digest is not None:
            keys[path] = reuse.content_key("tokenize-shard", settings, digest)
    return keys


def _trim_sources(spec: _ShardSpec, files: list[str]) -> dict[str, str]:
    """For each keyed part whose key the earlier build lacks: the key of that build's part of the same
    name, when it was made with these settings and kept its documents' hashes. A takedown changes a
    part only by removing documents: such a part is then cut from the earlier shard, not encoded."""
    earlier = spec.earlier
    missing = [p for p in files if spec.keys.get(p) is not None and spec.keys[p] not in earlier.keys] if earlier else []
    if not missing:
        return {}
    split_dir = TokenCacheDir(earlier.step_dir).split(SPLITS[0])
    try:
        ledger = C.read_json(C.join(split_dir, C.LEDGER_FILE))
        total, index_of = int(ledger["num_shards"]), {s["input"]: int(s["index"]) for s in ledger["shards"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    key_of = {f: k for k, u in earlier.keys.items() if trim.ids_rel(k) in u.files for f in u.files}
    found = {}
    for path in missing:
        index = index_of.get(os.path.basename(path))
        names = C.shard_file_names(index, total) if index is not None else None
        key = key_of.get(f"{TokenCacheDir.split_rel(SPLITS[0])}/{names['tokens']}") if names else None
        if key is not None and _earlier_settings(C.join(split_dir, names["marker"])) == _settings(spec):
            found[path] = key
    return found


def _earlier_settings(marker: str) -> dict | None:
    """The settings an earlier shard was made with, from its marker's fingerprint."""
    try:
        fp = dict(C.read_json(marker)["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {k: v for k, v in fp.items() if k not in ("input", "input_size")}


def _prepare_cache_dir(cache_dir: TokenCacheDir, tokenizer_path: str, sha256: str) -> str:
    """Make the split dirs and copy the tokenizer in (kept when the copy there has the same sha256);
    returns the copy's path, which the workers load, so the cache and its tokens always agree."""
    for s in SPLITS:
        C.makedirs(cache_dir.split(s))
    tok_copy = cache_dir.tokenizer
    if not C.exists(tok_copy) or sha256_file(tok_copy) != sha256:
        copy_file(_tokenizer_file(tokenizer_path), tok_copy)
    return tok_copy


def _commit_splits(name: str, spec: _ShardSpec, cache_dir: TokenCacheDir, results: list[dict],
                   total: int) -> dict[str, dict]:
    """Write each split's stats and then its finished ledger (the commit point); returns the result's
    per-split records."""
    splits = {}
    for s in SPLITS:
        ledger = _ledger(name, s, spec, results, total, True)
        stats = {k: ledger[k] for k in ("total_tokens", "total_docs", "total_bytes")}
        C.write_json_atomic(cache_dir.stats(s), stats)
        C.write_json_atomic(cache_dir.ledger(s), ledger)  # commit point
        splits[s] = {"path": TokenCacheDir.split_rel(s), "docs": ledger["total_docs"], "tokens": ledger["total_tokens"],
                     "bytes": ledger["total_bytes"], "shards": total}
    return splits


def _engine_summary(name: str, planned: EngineChoice | None, results: list[dict]) -> dict:
    """The step's engine record from its shards': tiktoken only if every encoded shard ran it to the end;
    a fallback's reason wins over the plan's. Logged, since a fallback costs speed but never bytes."""
    shards = [r["engine"] for r in results if "engine" in r]
    if not shards:
        engine = "tiktoken" if planned.encoding is not None else "hf"
        record = {"engine": engine, "engine_reason": f"{planned.reason} (no shard encoded: all reused)",
                  "engine_checked_pieces": 0, "engine_mismatches": 0}
    else:
        fell_back = [s for s in shards if s["engine_mismatches"]]
        record = {
            "engine": "tiktoken" if all(s["engine"] == "tiktoken" for s in shards) else "hf",
            "engine_reason": (fell_back or shards)[0]["engine_reason"],
            "engine_checked_pieces": sum(s["engine_checked_pieces"] for s in shards),
            "engine_mismatches": sum(s["engine_mismatches"] for s in shards),
        }
    log = logger.warning if record["engine_mismatches"] else logger.info
    log("tokenize %s: engine %s (%s); %d pieces checked against HF, %d mismatched", name, record["engine"],
        record["engine_reason"], record["engine_checked_pieces"], record["engine_mismatches"])
    return record


def _tokenizer_file(path_or_url: str) -> str:
    if is_dir(path_or_url):
        return path_or_url.rstrip("/") + "/" + TOKENIZER_FILE
    return path_or_url
