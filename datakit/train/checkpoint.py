"""Atomic training checkpoints: one ``step-XXXXXXXX.npz`` file per checkpoint.

A checkpoint holds every leaf of the training state (params, optimizer moments, skip counter) under
its tree path, plus a JSON metadata record (step = data position, config fingerprint, ...). It is
written to a temp file in the same directory, fsynced, then renamed: a reader (or a resume after a
crash) sees either the whole checkpoint or none of it, never a torn one. A single file (rather than a
directory of arrays) keeps that rename a single atomic operation.

Restoring needs a *template* state of the same structure (a freshly initialized one): leaves are
matched by path and checked for shape and dtype, so a checkpoint from a different model fails with
the first mismatching parameter named instead of a silent broadcast.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from typing import Any

import jax
import numpy as np

_NAME_RE = re.compile(r"^step-(\d{8})\.npz$")
_META_KEY = "__meta__"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not match the run (names file and leaf)."""


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint file name (``step-00000040.npz`` -> 40); None for anything else."""
    m = _NAME_RE.match(name)
    return int(m.group(1)) if m else None


def checkpoint_path(ckpt_dir: str, step: int) -> str:
    return os.path.join(ckpt_dir, f"step-{step:08d}.npz")


def leaf_name(path: tuple) -> str:
    """Stable '/'-joined name of a tree path: params/layers/wq, opt_state/1/mu/embed, ..."""
    parts = []
    for entry in path:
        for attr in ("key", "name", "idx"):
            if hasattr(entry, attr):
                parts.append(str(getattr(entry, attr)))
                break
        else:
            parts.append(str(entry))
    return "/".join(parts)


def save_checkpoint(ckpt_dir: str, step: int, state: Any, meta: dict[str, Any]) -> str:
    """Write ``state`` (any pytree of arrays) and ``meta`` atomically; returns the final path."""
    os.makedirs(ckpt_dir, exist_ok=True)
    leaves = jax.tree_util.tree_flatten_with_path(jax.device_get(state))[0]
    arrays: dict[str, np.ndarray] = {}
    for path, leaf in leaves:
        name = leaf_name(path)
        if name in arrays or name == _META_KEY:
            raise CheckpointError(f"duplicate leaf name {name!r} in training state")
        arrays[name] = np.asarray(leaf)
    meta = dict(meta, step=int(step))
    arrays[_META_KEY] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    final = checkpoint_path(ckpt_dir, step)
    fd, tmp = tempfile.mkstemp(prefix=f".step-{step:08d}.", suffix=".tmp", dir=ckpt_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(ckpt_dir)
    return final


def list_checkpoints(ckpt_dir: str) -> list[tuple[int, str]]:
    """Complete checkpoints (temp files ignored), ascending by step."""
    if not os.path.isdir(ckpt_dir):
        return []
    found = []
    for name in os.listdir(ckpt_dir):
        m = _NAME_RE.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(ckpt_dir, name)))
    return sorted(found)


def latest_checkpoint(ckpt_dir: str) -> str | None:
    found = list_checkpoints(ckpt_dir)
    return found[-1][1] if found else None


def read_meta(path: str) -> dict[str, Any]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(bytes(z[_META_KEY]).decode())
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: unreadable checkpoint ({e})") from e


def load_checkpoint(path: str, template: Any) -> tuple[Any, dict[str, Any]]:
    """Restore a state shaped like ``template`` (arrays or ShapeDtypeStructs) as host numpy leaves,
    plus the metadata."""
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"{path}: unreadable checkpoint ({e})") from e
    with z:
        if _META_KEY not in z.files:
            raise CheckpointError(f"{path}: no metadata record; not a datakit checkpoint")
        meta = json.loads(bytes(z[_META_KEY]).decode())
        paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
        expected = {leaf_name(p) for p, _ in paths_leaves}
        extra = sorted(set(z.files) - expected - {_META_KEY})
        if extra:
            raise CheckpointError(
                f"{path}: checkpoint has parameter(s) the model does not: {', '.join(extra[:5])}"
            )
        out = []
        for p, leaf in paths_leaves:
            name = leaf_name(p)
            if name not in z.files:
                raise CheckpointError(f"{path}: checkpoint lacks {name!r} (model/optimizer changed?)")
            arr = z[name]
            # template leaves may be arrays or jax.ShapeDtypeStruct (no allocation needed)
            want_shape = tuple(leaf.shape) if hasattr(leaf, "shape") else tuple(np.shape(leaf))
            want_dtype = np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
            if arr.shape != want_shape or arr.dtype != want_dtype:
                raise CheckpointError(
                    f"{path}: {name} is {arr.dtype}{list(arr.shape)} in the checkpoint but the "
                    f"model expects {want_dtype}{list(want_shape)}"
                )
            out.append(arr)
    return jax.tree_util.tree_unflatten(treedef, out), meta


def prune_checkpoints(ckpt_dir: str, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` checkpoints (and stale temp files); returns removed paths."""
    removed = []
    found = list_checkpoints(ckpt_dir)
    for _, path in found[: max(len(found) - keep, 0)]:
        os.unlink(path)
        removed.append(path)
    for name in os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else []:
        if name.startswith(".step-") and name.endswith(".tmp"):
            # A temp file from a crashed writer; it can never become a checkpoint.
            try:
                os.unlink(os.path.join(ckpt_dir, name))
            except FileNotFoundError:
                pass
    return removed


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
