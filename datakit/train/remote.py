"""Training into a remote directory (s3://, gs://, any fsspec URL) through a local mirror.

The loop writes with plain file APIs (an appended metrics.jsonl, checkpoints renamed into place) that
object stores do not offer, and writing them per step over the network would stall training. So a
remote out_dir is mirrored: before training, the newest remote checkpoint and metrics.jsonl are copied
down (all a resume needs); every checkpoint is published as soon as it is written, metrics.jsonl with
it, and checkpoints pruned locally are deleted remotely; at the end loss.png and then result.json (the
completion record, last) follow, with paths that name the remote files. A preempted run loses at most
the steps since its last checkpoint, exactly as it would on local disk.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from typing import Any

from datakit.core.fsio import atomic_write_bytes, copy_file, exists, fs_for
from datakit.train.checkpoint import checkpoint_step
from datakit.train.loop import result_json

FILES = ("metrics.jsonl", "loss.png", "result.json")


class RemoteMirror:
    """A local working directory standing in for a remote training out_dir (state: what is published)."""

    def __init__(self, remote: str) -> None:
        self.remote = remote.rstrip("/")
        self.local = tempfile.mkdtemp(prefix="datakit-train-")
        self.fs = fs_for(self.remote)
        self.published: set[str] = set()

    def _remote_checkpoints(self) -> list[str]:
        d = f"{self.remote}/checkpoints"
        if not self.fs.exists(d):
            return []
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(d, detail=False)]
        return sorted(n for n in names if checkpoint_step(n) is not None)

    def pull(self) -> None:
        """Copy down what a resume reads: the newest checkpoint and the metrics so far."""
        names = self._remote_checkpoints()
        self.published = set(names)
        if names:
            os.makedirs(os.path.join(self.local, "checkpoints"), exist_ok=True)
            newest = max(names, key=checkpoint_step)
            copy_file(f"{self.remote}/checkpoints/{newest}", os.path.join(self.local, "checkpoints", newest))
        if exists(f"{self.remote}/metrics.jsonl"):
            copy_file(f"{self.remote}/metrics.jsonl", os.path.join(self.local, "metrics.jsonl"))

    def on_checkpoint(self, kept: list[str]) -> None:
        """Publish new checkpoints (then the metrics that lead up to them) and drop pruned ones."""
        kept_names = {os.path.basename(p): p for p in kept}
        for name, path in sorted(kept_names.items()):
            if name not in self.published:
                copy_file(path, f"{self.remote}/checkpoints/{name}")
                self.published.add(name)
        metrics = os.path.join(self.local, "metrics.jsonl")
        if os.path.exists(metrics):
            copy_file(metrics, f"{self.remote}/metrics.jsonl")
        for name in sorted(self.published - set(kept_names)):
            try:
                self.fs.rm(f"{self.remote}/checkpoints/{name}")
            except FileNotFoundError:
                pass
            self.published.discard(name)

    def remote_path(self, path: str) -> str:
        rel = os.path.relpath(path, self.local)
        return f"{self.remote}/{rel}"

    def finish(self, result: Any) -> Any:
        """Publish the run's last files and return the result with remote paths (result.json last)."""
        for name in FILES[:-1]:
            path = os.path.join(self.local, name)
            if os.path.exists(path):
                copy_file(path, f"{self.remote}/{name}")
        remote = dataclasses.replace(
            result,
            metrics_path=self.remote_path(result.metrics_path),
            plot_path=self.remote_path(result.plot_path),
            result_path=self.remote_path(result.result_path),
            checkpoints=[self.remote_path(p) for p in result.checkpoints],
        )
        atomic_write_bytes(remote.result_path, result_json(remote).encode("utf-8"))
        return remote

    def cleanup(self) -> None:
        shutil.rmtree(self.local, ignore_errors=True)
