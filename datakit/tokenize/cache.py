"""The token cache on disk: per-shard token arrays + offsets, a ledger, exact stats; writer and reader.

Layout of one split directory (``<cache>/train`` or ``<cache>/validation``; the names are
:class:`datakit.core.layout.TokenCacheDir`'s)::

    shard-00000-of-00004.tokens.npy    flat little-endian token ids (uint16 if the vocab fits, else uint32)
    shard-00000-of-00004.offsets.npy   int64, rows+1 entries: document d is tokens[off[d]:off[d+1]]
    shard-00000-of-00004.json          per-shard done marker: counts + the fingerprint of what made it
    .stats.json                        total_tokens, total_docs, total_bytes (UTF-8 bytes of the texts)
    ledger.json                        finished flag, per-shard and total counts, tokenizer identity

Why .npy: ``np.load(mmap_mode="r")`` maps them with no datakit code, and the training reader touches
only the pages it serves. Why a done marker per shard: a crashed build resumes from finished shards.
Why the ledger last: its ``finished`` flag is the commit point; a cache without it refuses to load.
Every file is written to a temporary name and renamed into place.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import xxhash

from datakit.core.fsio import (
    atomic_write_bytes,
    commit,
    exists,
    is_local,
    list_names,
    local_path,
    makedirs,  # noqa: F401 (the build step uses it through this module)
    open_atomic,
    note_published,
    open_read,
    read_bytes,
    remove,
    walk,  # noqa: F401 (inspection lists caches through it)
    xxh3_file,
)
from datakit.core import publish_log
from datakit.core.layout import TokenCacheDir

__all__ = [
    "CACHE_FORMAT",
    "CACHE_VERSION",
    "LEDGER_FILE",
    "STATS_FILE",
    "CacheNotReady",
    "NpyStreamWriter",
    "TokenCache",
    "open_cache",
    "read_ledger",
    "shard_file_names",
    "write_json_atomic",
    "read_json",
    "write_npy_atomic",
    "npy_size",
    "load_npy",
]

CACHE_FORMAT = "datakit.token_cache"
CACHE_VERSION = 1
LEDGER_FILE = TokenCacheDir.LEDGER
STATS_FILE = TokenCacheDir.STATS


class CacheNotReady(RuntimeError):
    """The directory is not a finished token cache (missing, being built, or crashed mid-build)."""


# ------------------------------------------------------------------------------------------- file helpers


def join(base: str, *names: str) -> str:
    return "/".join([base.rstrip("/"), *names])


def json_bytes(obj: Any) -> bytes:
    """Canonical JSON (sorted keys, fixed separators): identical content gives identical bytes."""
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def write_json_atomic(path: str, obj: Any) -> None:
    atomic_write_bytes(path, json_bytes(obj))


def read_json(path: str) -> Any:
    with open_read(path) as f:
        return json.loads(f.read())


def shard_file_names(index: int, total: int) -> dict[str, str]:
    return TokenCacheDir.shard_names(index, total)


def file_xxh3(path: str) -> str:
    """xxh3-128 (hex) of a file's bytes, streamed: the per-shard checksum the ledger keeps."""
    return xxh3_file(path)


def shard_checksums(split_dir: str, names: dict[str, str]) -> dict[str, str]:
    """Checksums of one finished shard's token and offset files (recorded in its marker and the ledger),
    so a token overwritten by another valid id, which changes no size and no count, is still caught."""
    return {kind: _just_written_xxh3(join(split_dir, names[kind])) for kind in ("tokens", "offsets")}


def _just_written_xxh3(path: str) -> str:
    """The xxh3-128 of a file this process has just written: on an object store the one its upload noted
    (`publish_log`: no download); on a local disk read, and noted with the file's stat, so that the
    step's outputs manifest does not read it a second time."""
    if not is_local(path):
        noted = publish_log.latest(path)
        return noted.xxh3_128 if noted is not None else file_xxh3(path)
    digest = file_xxh3(path)
    note_published(path, os.path.getsize(local_path(path)), digest)
    return digest


def verify_checksums(split_dir: str, ledger: dict | None = None) -> list[str]:
    """Problems (one line each, naming the file) where a split's shard files differ from the ledger's
    checksums; empty when all match. Ledgers written before checksums existed verify as empty."""
    ledger = ledger if ledger is not None else read_ledger(split_dir)
    problems = []
    for entry in ledger.get("shards", []):
        for kind in ("tokens", "offsets"):
            want, rel = entry.get(f"{kind}_xxh3_128"), entry.get(f"{kind}_file")
            if not want or not rel:
                continue
            path = join(split_dir, rel)
            if not exists(path):
                problems.append(f"{rel} is missing")
            elif file_xxh3(path) != want:
                problems.append(f"{rel} does not match its ledger checksum (content changed)")
    return problems


# ------------------------------------------------------------------------------------------- .npy writing

_NPY_HEADER_BYTES = 128  # magic(6) + version(2) + header_len(2) + dict padded with spaces + "\n"


def _npy_header(dtype: np.dtype, length: int) -> bytes:
    """A version-1.0 .npy header of fixed size, so it can be written before the length is known and
    rewritten in place at the end (the length only grows digits inside the padding)."""
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (np.dtype(dtype).str, length)
    body_len = _NPY_HEADER_BYTES - 10
    body = d.ljust(body_len - 1) + "\n"
    if len(body) != body_len:
        raise ValueError(f"npy header too long for {length} elements")
    return b"\x93NUMPY\x01\x00" + body_len.to_bytes(2, "little") + body.encode("latin1")


class NpyStreamWriter:
    """Appends 1-D arrays to a .npy file of unknown final length, published atomically on close().

    Local paths are written in place (temp name beside the target, header patched at the end, rename);
    remote URLs are staged in a local temporary file and uploaded, then moved into place."""

    def __init__(self, path: str, dtype: np.dtype) -> None:
        self.path = path
        self.dtype = _file_dtype(dtype)
        self.length = 0
        self._f: IO[bytes] | None
        # Local: a temp file beside `path`; remote: a local temp file (open_atomic), which the header
        # patched at the end needs (seekable), uploaded by `commit` in one retried PUT.
        self._f, self._tmp = open_atomic(path)
        self._f.write(_npy_header(self.dtype, 0))

    def append(self, arr: np.ndarray) -> None:
        a = np.ascontiguousarray(arr, dtype=self.dtype)
        if a.ndim != 1:
            raise ValueError(f"{self.path}: only 1-D arrays can be appended, got shape {a.shape}")
        assert self._f is not None
        self._f.write(memoryview(a).cast("B"))  # the array's own bytes: no copy as tobytes() makes
        self.length += len(a)

    def close(self) -> str:
        assert self._f is not None
        self._f.seek(0)
        self._f.write(_npy_header(self.dtype, self.length))
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        self._f = None
        commit(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
        remove(self._tmp)


def _file_dtype(dtype: Any) -> np.dtype:
    """The dtype a .npy file of ours holds: little-endian (one-byte types have no order)."""
    d = np.dtype(dtype)
    return d.newbyteorder("<") if d.itemsize > 1 else d


def npy_size(arr: np.ndarray) -> int:
    """The size of the .npy file `write_npy_atomic` writes for this 1-D array."""
    dtype = _file_dtype(arr.dtype)
    return len(_npy_header(dtype, len(arr))) + len(arr) * dtype.itemsize


def write_npy_atomic(path: str, arr: np.ndarray) -> str:
    """Write a 1-D array as a .npy file, published atomically; returns the file's xxh3-128 (what
    `file_xxh3` gives for it), never read back: on an object store the one its upload noted, on a local
    disk computed from the array in memory and noted with the file's stat (`publish_log`: the step's
    outputs manifest takes it)."""
    w = NpyStreamWriter(path, arr.dtype)
    try:
        w.append(arr)
    except BaseException:
        w.abort()
        raise
    w.close()
    noted = None if is_local(path) else publish_log.latest(path)
    if noted is not None:  # `commit` hashed the file it uploaded
        return noted.xxh3_128
    h = xxhash.xxh3_128(_npy_header(w.dtype, w.length))
    h.update(memoryview(np.ascontiguousarray(arr, dtype=w.dtype)).cast("B"))
    return note_published(path, npy_size(arr), h.hexdigest()).xxh3_128


def load_npy(path: str, mmap: bool = True) -> np.ndarray:
    """Memory-map a local .npy (copy-free, lazy); remote files are read fully into memory."""
    if is_local(path):
        return np.load(local_path(path), mmap_mode="r" if mmap else None, allow_pickle=False)
    return np.load(io.BytesIO(read_bytes(path)), allow_pickle=False)



# ------------------------------------------------------------------------------------------- reading


def read_ledger(split_dir: str) -> dict:
    """The ledger of a finished cache; raises CacheNotReady (saying why) for anything else."""
    path = join(split_dir, LEDGER_FILE)
    if not exists(path):
        if not exists(split_dir):
            raise CacheNotReady(f"token cache {split_dir!r} does not exist")
        raise CacheNotReady(
            f"token cache {split_dir!r} has no {LEDGER_FILE}: it is not a token cache, or its build has not "
            "started; run the tokenize step for it"
        )
    try:
        ledger = read_json(path)
    except (ValueError, OSError) as e:
        raise CacheNotReady(f"{path}: unreadable ledger ({e}); rebuild the cache") from e
    if ledger.get("format") != CACHE_FORMAT:
        raise CacheNotReady(f"{path}: not a datakit token cache ledger (format={ledger.get('format')!r})")
    if ledger.get("version") != CACHE_VERSION:
        raise CacheNotReady(
            f"{path}: cache format version {ledger.get('version')} is not supported (expected "
            f"{CACHE_VERSION}); rebuild the cache"
        )
    if not ledger.get("finished"):
        done = len([n for n in list_names(split_dir) if n.endswith(".json") and n.startswith(TokenCacheDir.SHARD_PREFIX)])
        raise CacheNotReady(
            f"token cache {split_dir!r} is unfinished ({done} of {ledger.get('num_shards', '?')} shards done): "
            "its build crashed or is still running; rerun the tokenize step to resume it"
        )
    return ledger


@dataclass(frozen=True)
class _Shard:
    tokens: np.ndarray
    offsets: np.ndarray


class TokenCache:
    """Read access to one finished split directory; the token stream is the shards concatenated.

    Attributes: vocab_size, dtype, total_tokens, total_docs, total_bytes, tokenizer_identity (dict with
    sha256, vocab_size, bos_id, eos_id), eos_id, num_shards, sources, ledger, path."""

    def __init__(self, split_dir: str, ledger: dict | None = None) -> None:
        self.path = split_dir.rstrip("/")
        self.ledger = ledger if ledger is not None else read_ledger(split_dir)
        lg = self.ledger
        self.dtype = np.dtype(lg["dtype"])
        self.vocab_size = int(lg["vocab_size"])
        self.tokenizer_identity = dict(lg["tokenizer"])
        self.eos_id = int(lg["tokenizer"]["eos_id"])
        self.sources = list(lg.get("sources", []))
        self.num_shards = int(lg["num_shards"])
        self.total_tokens = int(lg["total_tokens"])
        self.total_docs = int(lg["total_docs"])
        self.total_bytes = int(lg["total_bytes"])
        self._shards: list[_Shard] = []
        for entry in lg["shards"]:
            tok_path, off_path = join(self.path, entry["tokens_file"]), join(self.path, entry["offsets_file"])
            for p in (tok_path, off_path):
                if not exists(p):
                    raise CacheNotReady(f"token cache {self.path!r}: ledger lists {p!r} but it is missing")
            tokens, offsets = load_npy(tok_path), load_npy(off_path)
            if len(tokens) != entry["tokens"] or len(offsets) != entry["rows"] + 1 or tokens.dtype != self.dtype:
                raise CacheNotReady(
                    f"token cache {self.path!r}: shard {entry['index']} files disagree with the ledger "
                    f"({len(tokens)} tokens/{len(offsets) - 1} docs/{tokens.dtype} on disk, ledger says "
                    f"{entry['tokens']}/{entry['rows']}/{self.dtype}); rebuild the cache"
                )
            self._shards.append(_Shard(tokens, offsets))
        rows = [len(s.offsets) - 1 for s in self._shards]
        toks = [len(s.tokens) for s in self._shards]
        self._doc_starts = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)])
        self._tok_starts = np.concatenate([[0], np.cumsum(toks, dtype=np.int64)])

    def __repr__(self) -> str:
        return (f"TokenCache({self.path!r}, shards={self.num_shards}, docs={self.total_docs}, "
                f"tokens={self.total_tokens}, dtype={self.dtype.name})")

    def shard_tokens(self, i: int) -> np.ndarray:
        return self._shards[i].tokens

    def doc_tokens(self, i: int) -> np.ndarray:
        """Tokens of document i (global index over shards), including its EOS (and BOS if built with one)."""
        if not 0 <= i < self.total_docs:
            raise IndexError(f"document {i} out of range (cache has {self.total_docs} documents)")
        s = int(np.searchsorted(self._doc_starts, i, side="right")) - 1
        d = i - int(self._doc_starts[s])
        off = self._shards[s].offsets
        return self._shards[s].tokens[int(off[d]) : int(off[d + 1])]

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Slice [start, stop) of the whole token stream (shards concatenated), as a new array."""
        if not 0 <= start <= stop <= self.total_tokens:
            raise IndexError(f"token range [{start}, {stop}) outside [0, {self.total_tokens})")
        first = int(np.searchsorted(self._tok_starts, start, side="right")) - 1
        parts = []
        pos = start
        s = first
        while pos < stop:
            base = int(self._tok_starts[s])
            end = min(stop, int(self._tok_starts[s + 1]))
            if end > pos:
                parts.append(self._shards[s].tokens[pos - base : end - base])
            pos = max(pos, end)
            s += 1
        if len(parts) == 1:
            return np.array(parts[0])
        return np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)

    def read_into(self, out: np.ndarray, start: int) -> None:
        """Copy tokens [start, start+len(out)) of the stream into ``out`` (any integer dtype), no temporaries
        beyond the copy itself; used by the batch reader."""
        stop = start + len(out)
        if not 0 <= start <= stop <= self.total_tokens:
            raise IndexError(f"token range [{start}, {stop}) outside [0, {self.total_tokens})")
        s = int(np.searchsorted(self._tok_starts, start, side="right")) - 1
        pos = start
        while pos < stop:
            base, end = int(self._tok_starts[s]), min(stop, int(self._tok_starts[s + 1]))
            if end > pos:
                out[pos - start : end - start] = self._shards[s].tokens[pos - base : end - base]
            pos = max(pos, end)
            s += 1


def open_cache(split_dir: str) -> TokenCache:
    """Open a finished split directory; raises CacheNotReady if it is missing or unfinished."""
    return TokenCache(split_dir)
