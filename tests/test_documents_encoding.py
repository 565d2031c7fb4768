"""Every stage that writes documents encodes them one way (`datakit.core.documents.parquet_options`): zstd,
no dictionary for the columns unique per document (id, text), no min/max statistics for text. Checked
on the files a real pipeline wrote (normalize, quality, consolidate, line dedup, PII, takedown), read
back with pyarrow's own metadata, so a stage that writes with other options (a dictionary tried on
text costs CPU in every writer and a page every reader decodes first) fails here."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pyarrow.parquet as pq

from datakit import pipeline
from datakit.core.documents import UNIQUE_COLUMNS

LICENSES = ("Apache-2.0", "GPL-3", "GPL-2", "LGPL-2.1", "MPL-2.0", "BSD", "Artistic")
DICTIONARY = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}


def _manifest(tmp_path: Path) -> object:
    web = tmp_path / "web"
    web.mkdir()
    docs = []
    for name in LICENSES:
        paras = [" ".join(p.split()) for p in Path(f"/usr/share/common-licenses/{name}").read_text().split("\n\n")
                 if len(p.split()) > 12]
        docs += [{"id": f"{name}-{i}", "text": p, "url": f"https://www.gnu.org/{name}/{i}"} for i, p in enumerate(paras)]
    for k in range(4):
        (web / f"part{k}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs[k::4]))
    (tmp_path / "takedown.txt").write_text("id GPL-3-5\nid Apache-2.0-3\n")
    return pipeline.manifest_from_dict({
        "prefix": str(tmp_path / "prefix"), "backend": "inline",
        "sources": [{"name": "web", "uri": str(web), "format": "jsonl", "id_field": "id"}],
        "normalize": {"target_shard_bytes": 20_000}, "quality": {}, "dedup": {"exact": True, "fuzzy": True},
        "line_dedup": {}, "pii": {}, "takedown": {"file": str(tmp_path / "takedown.txt")},
        "tokenize": {"vocab_size": 300}})


def test_every_documents_file_of_every_stage_is_encoded_alike(tmp_path):
    m = _manifest(tmp_path)
    steps = [s for s in pipeline.build_steps(m) if s.stage not in ("tokenizer", "tokenize", "train")]
    summary = pipeline.run(m, only=[s.name for s in steps])
    assert summary.ok, summary.to_dict()["steps"]
    stages = set()
    for step in summary.to_dict()["steps"]:
        files = sorted(glob.glob(os.path.join(step["output"], "outputs", "main", "*.parquet")))
        for path in files:
            meta = pq.ParquetFile(path).metadata
            names = meta.schema.to_arrow_schema().names
            for g in range(meta.num_row_groups):
                for c in range(meta.num_columns):
                    col = meta.row_group(g).column(c)
                    name = col.path_in_schema
                    assert col.compression == "ZSTD", (path, name)
                    dictionary = bool(DICTIONARY & set(col.encodings))
                    assert dictionary == (name not in UNIQUE_COLUMNS), (path, name, col.encodings)
                    assert (col.statistics is None) == (name == "text"), (path, name)
            assert {"id", "text"} <= set(names)
        if files:
            stages.add(step["name"].rsplit("-", 1)[0])
    assert {"normalize", "quality", "consolidate", "linededup", "pii", "takedown"} <= stages, stages
