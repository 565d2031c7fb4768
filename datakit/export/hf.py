"""Hugging Face ``datasets`` directories, as ``Dataset.save_to_disk`` lays them out and
``datasets.load_from_disk`` reads them: per component and split a directory of Arrow IPC *stream* files
(``data-NNNNN-of-MMMMM.arrow``, one per cache shard) with ``state.json`` (the file list) and
``dataset_info.json`` (the features: ``input_ids``, a list of token ids, one row per document; spelled
``Sequence``, which every `datasets` release reads, 2.x included).

Each cache shard becomes one Arrow file in its own task, written in record batches of whole documents,
so memory stays bounded by one batch; the lists are built from the cache's offsets without a copy of
the tokens beyond the batch itself.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from datakit.core.fsio import atomic_output, atomic_write_bytes

from .inputs import ShardRef, iter_chunks, rel

BATCH_TOKENS = 1 << 22
COLUMN = "input_ids"


def value_type(dtype: np.dtype) -> pa.DataType:
    return pa.from_numpy_dtype(np.dtype(dtype).newbyteorder("="))


def data_file(index: int, total: int) -> str:
    return f"data-{index:05d}-of-{total:05d}.arrow"


def write_shard(ref: ShardRef, total: int, dest_dir: str, dtype: str) -> dict:
    """One cache shard -> one Arrow stream file of ``input_ids`` rows (documents, EOS included)."""
    schema = pa.schema([pa.field(COLUMN, pa.list_(value_type(np.dtype(dtype))))])
    name = data_file(ref.index, total)
    with atomic_output(rel(dest_dir, name)) as out, pa.ipc.new_stream(out, schema) as writer:
        for tokens, offsets in iter_chunks(ref, BATCH_TOKENS):
            values = pa.array(tokens.astype(dtype, copy=False))
            lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
            writer.write_batch(pa.record_batch([lists], schema=schema))
    return {"file": name, "docs": ref.docs, "tokens": ref.tokens}


def write_metadata(dest_dir: str, files: list[str], dtype: str, fingerprint: str) -> None:
    """``state.json`` and ``dataset_info.json``: what ``load_from_disk`` needs besides the data files."""
    state = {"_data_files": [{"filename": f} for f in files], "_fingerprint": fingerprint,
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
             "_output_all_columns": False, "_split": None}
    features = {COLUMN: {"feature": {"dtype": np.dtype(dtype).name, "_type": "Value"}, "_type": "Sequence"}}
    info = {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}
    atomic_write_bytes(rel(dest_dir, "state.json"), json.dumps(state, indent=2, sort_keys=True).encode())
    atomic_write_bytes(rel(dest_dir, "dataset_info.json"), json.dumps(info, indent=2, sort_keys=True).encode())
