"""Write small normalized sources in the normalize stage's layout, for tests and benchmarks.

Same contract as the real thing: `<dir>/outputs/main/part-NNNNN-of-MMMMM.parquet`, id = the content id
of the text (`datakit.core.documents`), rows partitioned by id and sorted by id within each file, exact duplicates
inside the source removed (normalize does that), columns id, text, source, source_id.
"""

from __future__ import annotations

import os
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from datakit.core.documents import content_id
from datakit.core.layout import DocumentsDir, part_name


def write_normalized_source(
    dir_: str, name: str, texts: Sequence[str], num_files: int = 1, source_ids: Sequence[str] | None = None,
) -> dict[str, str]:
    """Write the source; returns source_id -> id for the documents kept (first copy of each text)."""
    source_ids = list(source_ids) if source_ids is not None else [str(i) for i in range(len(texts))]
    seen: dict[str, tuple[str, str]] = {}
    for sid, text in zip(source_ids, texts):
        seen.setdefault(content_id(text), (text, sid))
    shards: list[list[tuple[str, str, str]]] = [[] for _ in range(num_files)]
    for i, (text, sid) in seen.items():
        shards[int(i[:8], 16) % num_files].append((i, text, sid))
    out = DocumentsDir(dir_).main
    os.makedirs(out, exist_ok=True)
    for k, rows in enumerate(shards):
        rows.sort()
        table = pa.table({
            "id": [r[0] for r in rows],
            "text": [r[1] for r in rows],
            "source": [name] * len(rows),
            "source_id": [r[2] for r in rows],
        }, schema=pa.schema([("id", pa.string()), ("text", pa.string()), ("source", pa.string()),
                             ("source_id", pa.string())]))
        pq.write_table(table, os.path.join(out, part_name(k, num_files)), compression="zstd")
    return {sid: i for i, (_, sid) in seen.items()}
