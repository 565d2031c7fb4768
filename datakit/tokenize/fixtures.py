"""Real-text corpora in the consolidated-source layout, for tests and benchmarks.

Why here and not in tests/: the benchmark needs the same corpora, and tests must not download
anything, so both build sources from files every Debian/Python machine has (the Python standard
library's sources, /usr/share/common-licenses). The layout mimics consolidate's output:
``<dir>/outputs/main/part-NNNNN-of-NNNNN.parquet`` with columns id (sha256 hex of the text), text,
source; documents routed to parts by id and sorted by id inside each part.
"""

from __future__ import annotations

import glob
import hashlib
import os
import sysconfig
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from datakit.core.layout import DocumentsDir, part_name

__all__ = ["stdlib_texts", "license_texts", "doc_id", "write_source"]

SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string()), ("source", pa.string())])


def doc_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_texts(paths: Iterable[str], max_bytes: int | None) -> Iterator[str]:
    used = 0
    for p in paths:
        try:
            with open(p, "rb") as f:
                text = f.read().decode("utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # a few stdlib test files are deliberately not UTF-8
        if not text.strip():
            continue
        yield text
        used += len(text.encode("utf-8"))
        if max_bytes is not None and used >= max_bytes:
            return


def stdlib_texts(max_bytes: int | None = None, subdir: str = "", recursive: bool = True) -> list[str]:
    """Python standard-library .py sources (sorted by path), up to about ``max_bytes`` UTF-8 bytes."""
    root = os.path.join(sysconfig.get_paths()["stdlib"], subdir)
    pattern = os.path.join(root, "**", "*.py") if recursive else os.path.join(root, "*.py")
    paths = sorted(p for p in glob.glob(pattern, recursive=recursive) if "site-packages" not in p)
    return list(_read_texts(paths, max_bytes))


def license_texts() -> list[str]:
    """The license texts under /usr/share/common-licenses (prose rather than code); [] if absent."""
    paths = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p))
    return list(_read_texts(paths, None))


def write_source(source_dir: str, texts: Iterable[str], num_parts: int, source: str = "fixture",
                 dedupe: bool = True) -> list[str]:
    """Write texts as a consolidated source; returns the part paths. Identical texts share an id, so
    by default only the first is kept (as exact dedup would)."""
    rows: dict[str, dict] = {}
    ordered: list[dict] = []
    for t in texts:
        i = doc_id(t)
        if dedupe and i in rows:
            continue
        rows[i] = {"id": i, "text": t, "source": source}
        ordered.append(rows[i])
    parts: list[list[dict]] = [[] for _ in range(num_parts)]
    for r in ordered:
        parts[int(r["id"][:8], 16) % num_parts].append(r)
    out = DocumentsDir(source_dir).main
    os.makedirs(out, exist_ok=True)
    paths = []
    for n, part in enumerate(parts):
        part.sort(key=lambda r: r["id"])
        path = os.path.join(out, part_name(n, num_parts))
        pq.write_table(pa.Table.from_pylist(part, schema=SCHEMA), path)
        paths.append(path)
    return paths
