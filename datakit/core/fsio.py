"""Small filesystem layer: local paths fast, everything else through fsspec; atomic publishes.

Every output the engine writes goes to a temporary name first and is renamed into place, so a crash
leaves nothing a rerun would mistake for a finished file. On object stores (gs://, s3://) a write
becomes visible only when the upload completes, which gives the same guarantee.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from typing import IO, Iterator

import fsspec


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    """A local path or file:// URL as a plain filesystem path."""
    return path[len("file://") :] if path.startswith("file://") else path


def fs_for(path: str):
    fs, _ = fsspec.core.url_to_fs(path)
    return fs


def open_read(path: str) -> IO[bytes]:
    if is_local(path):
        return open(local_path(path), "rb")
    return fsspec.open(path, "rb").open()


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(local_path(path), exist_ok=True)
    else:
        fs_for(path).makedirs(path, exist_ok=True)


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(local_path(path))
    return fs_for(path).exists(path)


def tmp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".tmp-{uuid.uuid4().hex[:12]}-{tail}")


def open_atomic(path: str) -> tuple[IO[bytes], str]:
    """Open a temp file beside `path`; `commit(tmp, path)` publishes it."""
    tmp = tmp_name(path)
    if is_local(path):
        tmp = local_path(tmp)
        os.makedirs(os.path.dirname(tmp) or ".", exist_ok=True)
        return open(tmp, "wb"), tmp
    return fsspec.open(tmp, "wb").open(), tmp


def commit(tmp: str, path: str) -> None:
    if is_local(path):
        os.replace(tmp, local_path(path))
    else:
        fs_for(path).mv(tmp, path)


def discard(tmp: str) -> None:
    try:
        if is_local(tmp):
            os.unlink(tmp)
        else:
            fs_for(tmp).rm(tmp)
    except FileNotFoundError:
        pass


def stream_digest(f: IO[bytes], h, chunk_bytes: int = 1 << 20) -> str:
    """Hex digest of what is left of an open binary file, read in chunks (``h``: a fresh hashlib or
    xxhash object): one loop for every content hash the pipeline keeps."""
    while chunk := f.read(chunk_bytes):
        h.update(chunk)
    return h.hexdigest()


def sha256_file(path: str) -> str:
    """Hex sha256 of a file's bytes, streamed (local or any fsspec URL)."""
    with open_read(path) as f:
        return stream_digest(f, hashlib.sha256())


def xxh3_file(path: str) -> str:
    """Hex xxh3-128 of a file's bytes, streamed: the fast checksum of outputs and token shards."""
    import xxhash

    with open_read(path) as f:
        return stream_digest(f, xxhash.xxh3_128(), 4 << 20)


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[IO[bytes]]:
    """Write `path` through a temp file: published on success (local files fsynced first), discarded on error."""
    f, tmp = open_atomic(path)
    try:
        with f:
            yield f
            if is_local(path):
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        discard(tmp)
        raise
    commit(tmp, path)


def copy_file(src: str, dst: str) -> None:
    """Copy `src` to `dst` (local paths or fsspec URLs, in any mix), streamed and published atomically."""
    with open_read(src) as f, atomic_output(dst) as out:
        shutil.copyfileobj(f, out, 1 << 20)


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Publish `data` at `path` all at once."""
    with atomic_output(path) as f:
        f.write(data)
