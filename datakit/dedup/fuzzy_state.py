"""What a fuzzy-dedup build keeps for the next one, so that a change costs what changed (fuzzy_incremental.py).

Under ``reuse/fuzzy/<settings digest>/`` of the step dir (the digest covers the format, the stage's
version, the shingling and bands, and how pairs are verified: any change to them starts a new state):

  state.json          the files of the build in rank order (source, name, content token, rows, rows
                      without shingles, the digest of their marks), the sources in
                      rank order, the index segments, and the excerpts of the largest clusters'
                      samples by (content token, row) (largest.SampleTexts)
  keys/<token>.npz    one file's bucket keys (rows with shingles x bands) and those rows
  seg-*/              the bucket index (key_index.py): bucket key -> (file token, row)
  pairs.npz           every candidate pair of the build: both sides as (token, row), the pair's ids (the
                      smaller first) and its true Jaccard (NaN when pairs are not verified)
  members.npz         the id of every document in a candidate pair, by (token, row)

Everything is a pure function of the build's inputs and settings except the index's segment layout (which
files share a segment), which never changes a result. Files are read only when they hash to what the
earlier build recorded in its outputs manifest; anything missing or damaged makes the next build a full
one, which is always correct.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np

from datakit.core import fsio
from datakit.steps import reuse

from . import key_index
from .key_index import Segment, State

STATE_FORMAT = 1
ROOT = "reuse/fuzzy"
PAIR_COLUMNS = ("u_tok", "u_row", "v_tok", "v_row", "ah", "al", "bh", "bl", "jaccard")
MEMBER_COLUMNS = ("tok", "row", "hi", "lo")


@dataclass(frozen=True)
class FileState:
    """One input file as the state records it."""

    source: str
    name: str
    token: int
    rows: int
    without: int          # rows without shingles (never in a bucket)
    marks: str            # digest of the file's marks (fuzzy_core.marks_digest)

    def to_dict(self) -> dict:
        return {"source": self.source, "name": self.name, "token": f"{self.token:016x}", "rows": self.rows,
                "without": self.without, "marks": self.marks}

    @classmethod
    def from_dict(cls, d: dict) -> "FileState":
        return cls(str(d["source"]), str(d["name"]), int(d["token"], 16), int(d["rows"]), int(d["without"]),
                   str(d["marks"]))


def folder_for(settings: tuple, minhash_params: dict, verify_params: dict) -> str:
    return f"{ROOT}/{reuse.content_key(STATE_FORMAT, settings, minhash_params, verify_params)}"


def keys_rel(token: int) -> str:
    return f"keys/{token:016x}.npz"


def save_npz(path: str, **arrays: np.ndarray) -> None:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    fsio.atomic_write_bytes(path, buf.getvalue())


def load_npz(path: str) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(fsio.read_bytes(path)), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def write(state: State) -> None:
    """state.json, written last: a build that stops before it leaves no state to trust."""
    body = {"format": STATE_FORMAT, "sources": state.sources, "files": [f.to_dict() for f in state.files],
            "segments": [s.to_dict() for s in state.segments],
            "samples": [[f"{tok:016x}", row, text] for (tok, row), text in sorted(state.samples.items())]}
    fsio.atomic_write_bytes(state.path("state.json"), json.dumps(body, indent=0, sort_keys=True).encode())


def load(earlier: reuse.Earlier | None, folder: str) -> State | None:
    """The earlier build's state in ``folder``, when every file it names is there as recorded (None:
    no usable state, so the build is a full one)."""
    if earlier is None:
        return None
    rel = f"{folder}/state.json"
    if not reuse.intact(earlier, rel):
        return None
    try:
        body = json.loads(fsio.read_bytes(fsio.join(earlier.step_dir, rel)))
        if body.get("format") != STATE_FORMAT:
            return None
        state = State(earlier.step_dir, folder, [str(s) for s in body["sources"]],
                      [FileState.from_dict(f) for f in body["files"]],
                      [Segment.from_dict(s) for s in body["segments"]],
                      {(int(tok, 16), int(row)): str(text) for tok, row, text in body.get("samples", [])})
    except (ValueError, KeyError, TypeError):
        return None
    needed = [keys_rel(f.token) for f in state.files] + key_index.files_of(state.segments) + ["pairs.npz", "members.npz"]
    if not all(reuse.intact(earlier, f"{folder}/{r}") for r in needed):
        return None
    return state


def carry(old: State, new: State, rels: list[str]) -> None:
    """Hard-link (or copy) these state files of the earlier build into this one."""
    for rel in rels:
        fsio.link_or_copy(old.path(rel), new.path(rel))


# ---------------------------------------------------------------- what a full build writes
@dataclass(frozen=True)
class KeysSink:
    """Where one file's bucket keys go (the state folder, absolute) under its token."""

    folder: str
    token: int

    def write(self, rows: np.ndarray, keys: np.ndarray) -> None:
        save_keys(self.folder, self.token, rows, keys)


def save_keys(folder: str, token: int, rows: np.ndarray, keys: np.ndarray) -> None:
    """One file's rows with shingles and their bucket keys, in the state folder ``folder``."""
    save_npz(fsio.join(folder, keys_rel(token)), rows=np.asarray(rows, np.int64), keys=np.asarray(keys, np.uint64))
