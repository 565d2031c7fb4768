"""MosaicML streaming (MDS) shards, as ``streaming.MDSWriter`` writes them and ``StreamingDataset``
reads them: per component and split a directory of ``.mds`` shard files and an ``index.json``, one
sample per document with one column, ``tokens``, encoded ``ndarray:uint16`` (or ``uint32``).

The layout (streaming/base/format/mds/writer.py and encodings.py, format version 2)::

    shard file: uint32 sample count S | uint32[S + 1] byte offsets of the samples | config JSON | samples
    sample:     uint32 size of the one variable-size column | its encoding
    ndarray with a fixed dtype and a variable shape: one byte (ndim << 2 | shape dtype code),
                the shape in that dtype, then the values

Each cache shard is cut into MDS shards of at most ``SIZE_LIMIT`` bytes in its own task (a shard is
built in memory, so memory stays bounded by one), named after the cache shard so tasks never collide;
``index.json`` lists them in order once every task is done. The library itself is not needed to write
(it pins numpy < 2.2 and xxhash < 4, which datakit's environment cannot hold).
"""

from __future__ import annotations

import json

import numpy as np

from datakit.core.fsio import atomic_write_bytes

from .inputs import ShardRef, iter_chunks, rel

SIZE_LIMIT = 1 << 26  # MDSWriter's default size_limit
COLUMN = "tokens"
SHAPE_CODES = ((1 << 8, 0, "<u1"), (1 << 16, 1, "<u2"), (1 << 32, 2, "<u4"))


def encoding(dtype: str) -> str:
    return f"ndarray:{np.dtype(dtype).name}"


def shard_config(dtype: str) -> dict:
    """What MDSWriter puts in every shard's header and index entry (``get_config``)."""
    return {"column_encodings": [encoding(dtype)], "column_names": [COLUMN], "column_sizes": [None],
            "compression": None, "format": "mds", "hashes": [], "size_limit": SIZE_LIMIT, "version": 2}


def encode_sample(doc: np.ndarray) -> bytes:
    """One document as an MDS sample: the column's size, then a 1-D ndarray with its shape."""
    n = len(doc)
    if n == 0:
        raise ValueError("MDS cannot hold an empty array (a cache document has at least its EOS)")
    code, shape_dtype = next((c, d) for limit, c, d in SHAPE_CODES if n < limit)
    body = bytes([(1 << 2) | code]) + np.array([n], dtype=shape_dtype).tobytes() + doc.tobytes()
    return np.array([len(body)], dtype="<u4").tobytes() + body


def encode_shard(samples: list[bytes], config_data: bytes) -> bytes:
    head = 4 + 4 * (len(samples) + 1) + len(config_data)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in samples])]).astype("<u4") + head
    return np.array([len(samples)], dtype="<u4").tobytes() + offsets.tobytes() + config_data + b"".join(samples)


def _flush(samples: list[bytes], name: str, dest_dir: str, config: dict) -> dict:
    config_data = json.dumps(config, sort_keys=True).encode()
    data = encode_shard(samples, config_data)
    atomic_write_bytes(rel(dest_dir, name), data)
    return {"samples": len(samples), "raw_data": {"basename": name, "bytes": len(data), "hashes": {}},
            "zip_data": None, **config}


def write_shard(ref: ShardRef, dest_dir: str, dtype: str) -> list[dict]:
    """One cache shard -> MDS shard files ``shard.<cache shard>-<part>.mds``; their index entries."""
    config = shard_config(dtype)
    fixed = 8 + len(json.dumps(config, sort_keys=True))
    entries, samples, size = [], [], fixed
    for tokens, offsets in iter_chunks(ref, SIZE_LIMIT // 4):
        for d in range(len(offsets) - 1):
            sample = encode_sample(tokens[offsets[d]:offsets[d + 1]].astype(dtype, copy=False))
            if samples and size + len(sample) + 4 > SIZE_LIMIT:
                entries.append(_flush(samples, f"shard.{ref.index:05d}-{len(entries):03d}.mds", dest_dir, config))
                samples, size = [], fixed
            samples.append(sample)
            size += len(sample) + 4
    if samples:
        entries.append(_flush(samples, f"shard.{ref.index:05d}-{len(entries):03d}.mds", dest_dir, config))
    return entries


def write_index(dest_dir: str, entries: list[dict]) -> None:
    atomic_write_bytes(rel(dest_dir, "index.json"), json.dumps({"shards": entries, "version": 2},
                                                                sort_keys=True).encode())
