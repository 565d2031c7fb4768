"""Training into a remote directory (s3://, gs://, any fsspec URL) through a local mirror.

The loop writes with plain file APIs (an appended metrics.jsonl, checkpoints renamed into place) that
object stores do not offer, and writing them per step over the network would stall training. So a
remote out_dir is mirrored: before training, the newest remote checkpoint and metrics.jsonl are copied
down (all a resume needs); every checkpoint is published as soon as it is written, metrics.jsonl with
it, and checkpoints pruned locally are deleted remotely; at the end loss.png and then result.json (the
completion record, last) follow. The result names its files relative to the out_dir (``TrainDir``),
so the local and the remote result.json are the same bytes. A preempted run loses at most the steps
since its last checkpoint, exactly as it would on local disk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from datakit.core.fsio import copy_file, exists, list_names, remove
from datakit.core.layout import TrainDir, join
from datakit.train.checkpoint import checkpoint_step

FILES = (TrainDir.METRICS, TrainDir.PLOT, TrainDir.RESULT)  # published in this order: result.json last


class RemoteMirror:
    """A local working directory standing in for a remote training out_dir (state: what is published)."""

    def __init__(self, remote: str) -> None:
        self.remote = remote.rstrip("/")
        self.local = tempfile.mkdtemp(prefix="datakit-train-")
        self.published: set[str] = set()
        self._remote_dir = TrainDir(self.remote)
        self._local_dir = TrainDir(self.local)

    def _remote_checkpoints(self) -> list[str]:
        return [n for n in list_names(self._remote_dir.checkpoints) if checkpoint_step(n) is not None]

    def pull(self) -> None:
        """Copy down what a resume reads: the newest checkpoint and the metrics so far."""
        names = self._remote_checkpoints()
        self.published = set(names)
        if names:
            os.makedirs(self._local_dir.checkpoints, exist_ok=True)
            newest = max(names, key=checkpoint_step)
            copy_file(join(self._remote_dir.checkpoints, newest), join(self._local_dir.checkpoints, newest))
        if exists(self._remote_dir.metrics):
            copy_file(self._remote_dir.metrics, self._local_dir.metrics)

    def on_checkpoint(self, kept: list[str]) -> None:
        """Publish new checkpoints (then the metrics that lead up to them) and drop pruned ones."""
        kept_names = {os.path.basename(p): p for p in kept}
        for name, path in sorted(kept_names.items()):
            if name not in self.published:
                copy_file(path, join(self._remote_dir.checkpoints, name))
                self.published.add(name)
        if os.path.exists(self._local_dir.metrics):
            copy_file(self._local_dir.metrics, self._remote_dir.metrics)
        for name in sorted(self.published - set(kept_names)):
            remove(join(self._remote_dir.checkpoints, name))
            self.published.discard(name)

    def finish(self, result: Any) -> Any:
        """Publish the run's last files, result.json last (the completion record); the result's paths
        are relative, so it holds for the remote directory as it is."""
        for name in FILES:
            path = join(self.local, name)
            if os.path.exists(path):
                copy_file(path, join(self.remote, name))
        return result

    def cleanup(self) -> None:
        shutil.rmtree(self.local, ignore_errors=True)
