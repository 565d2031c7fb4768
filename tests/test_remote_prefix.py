"""A whole `datakit run` against an fsspec prefix instead of a local directory.

memory:// is a real fsspec filesystem that lives inside one process, so the run uses the inline
backend; every stage then reads and writes through the same fsspec code paths s3:// or gs:// take.
The outputs must be the same bytes as the same run on local disk, and nothing may land locally.
"""

from __future__ import annotations

import sysconfig
import uuid

import fsspec
import pytest

import datakit

DATA_SUFFIXES = (".parquet", ".npy")


def _manifest(prefix: str):
    stdlib = sysconfig.get_paths()["stdlib"]
    return datakit.manifest_from_dict({
        "prefix": prefix,
        "sources": [{"name": "stdlib-json", "uri": f"{stdlib}/json/*.py", "format": "text"},
                    {"name": "stdlib-email", "uri": f"{stdlib}/email/*.py", "format": "text"}],
        "tokenize": {"vocab_size": 512},
        "train": {"steps": 8, "warmup_steps": 2, "seq_len": 64, "batch_size": 4, "d_model": 32,
                  "n_layers": 1, "n_heads": 2, "d_ff": 64, "checkpoint_every": 4},
    })


def _data_files(fs, root: str) -> dict[str, bytes]:
    """Relative path -> bytes of every parquet/npy file under one step's output."""
    base = fs._strip_protocol(root).rstrip("/")
    out = {}
    for path in fs.find(base):
        if path.endswith(DATA_SUFFIXES):
            rel = path[len(base):].lstrip("/")
            with fs.open(path, "rb") as f:
                out[rel] = f.read()
    return out


@pytest.mark.slow
def test_pipeline_on_an_fsspec_prefix_matches_local_disk(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    local = datakit.run(_manifest(str(tmp_path / "out")), backend="inline")
    remote_prefix = f"memory:///dk-{uuid.uuid4().hex[:8]}/out"
    remote = datakit.run(_manifest(remote_prefix), backend="inline")
    assert local.ok, local.to_dict()
    assert remote.ok, remote.to_dict()
    assert list(cwd.iterdir()) == []  # nothing written beside the run (e.g. a directory named "memory:")

    mem, disk = fsspec.filesystem("memory"), fsspec.filesystem("file")
    by_name = {s["name"]: s for s in local.steps}
    compared = 0
    for step in remote.steps:
        assert step["output"].startswith(remote_prefix)
        ours, theirs = _data_files(mem, step["output"]), _data_files(disk, by_name[step["name"]]["output"])
        assert sorted(ours) == sorted(theirs), step["name"]
        for rel in ours:
            assert ours[rel] == theirs[rel], f"{step['name']}: {rel} differs between memory:// and disk"
        compared += len(ours)
    assert compared > 20

    train = remote.result("train")
    train_out = next(s["output"] for s in remote.steps if s["name"] == "train")
    assert train["completed"] and train["result_path"] == "result.json"  # paths relative to the step's output
    assert all(mem.exists(f"{train_out}/{p}") for p in (*train["checkpoints"], train["plot_path"], train["result_path"]))
    assert train["final_loss"] == pytest.approx(local.result("train")["final_loss"], abs=1e-6)
    assert train["checkpoints"][-1] == "checkpoints/step-00000008.npz"
    assert local.result("train")["checkpoints"] == train["checkpoints"]


def test_memory_prefix_with_worker_processes_is_refused_before_any_work():
    with pytest.raises(ValueError, match="memory:// lives inside one process"):
        datakit.run(_manifest("memory:///refused/out"), backend="local")
    assert not fsspec.filesystem("memory").exists("/refused")


def test_events_on_an_object_store_are_a_file_per_run_never_read_back(monkeypatch):
    """An object store cannot append: each run writes its own events/<run_id>.jsonl from what it holds,
    so no event costs a download of the prefix's history; `read_events` merges the runs in time order."""
    from datakit.core import fsio
    from datakit.steps import read_events

    stdlib = sysconfig.get_paths()["stdlib"]
    prefix = f"memory:///dk-{uuid.uuid4().hex[:8]}/out"
    manifest = datakit.manifest_from_dict({
        "prefix": prefix, "sources": [{"name": "json", "uri": f"{stdlib}/json/*.py", "format": "text"}],
        "tokenize": {"vocab_size": 300}})
    reads: list[str] = []
    real = fsio.read_if_exists
    monkeypatch.setattr(fsio, "read_if_exists", lambda p: reads.append(p) or real(p))
    runs = [datakit.run(manifest, backend="inline") for _ in range(2)]
    monkeypatch.undo()
    assert all(r.ok for r in runs)
    assert [p for p in reads if "/events" in p] == []
    mem = fsspec.filesystem("memory")
    names = sorted(p.rsplit("/", 1)[1] for p in mem.find(f"{prefix[len('memory://'):]}/events"))
    assert names == sorted(f"{r.run_id}.jsonl" for r in runs)
    events = read_events(prefix)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    assert [e["run_id"] for e in events if e["event"] == "run_finished"] == [r.run_id for r in runs]
    assert not mem.exists(f"{prefix[len('memory://'):]}/events.jsonl")


def test_a_runs_event_files_on_an_object_store_roll_over_so_no_event_rewrites_the_whole_run(monkeypatch):
    """A run's event file on an object store is rewritten at each event; past `CHUNK_BYTES` it rolls over
    to <run_id>.NNNNN.jsonl, so an event's PUT is bounded (one file rewritten whole per run cost
    O(events^2) bytes), and `read_events` gives every event back in the order it was emitted."""
    from datakit.core import fsio
    from datakit.steps import events as ev
    from datakit.steps import read_events

    monkeypatch.setattr(ev, "CHUNK_BYTES", 2_000)
    puts: list[tuple[str, int]] = []
    real = fsio.atomic_write_bytes
    monkeypatch.setattr(fsio, "atomic_write_bytes", lambda p, d, **k: puts.append((p, len(d))) or real(p, d, **k))
    root = f"memory:///dk-{uuid.uuid4().hex[:8]}/out"
    log = ev.EventLog(root, "0a1b2c", write=True, on_event=None)
    for i in range(60):
        log.emit({"event": "step_log", "n": i, "message": "x" * 100})
    assert len(puts) == 60 and max(n for _, n in puts) <= 2_000
    files = list(dict.fromkeys(p for p, _ in puts))
    assert files[0].endswith("/events/0a1b2c.jsonl") and files[1].endswith("/events/0a1b2c.00001.jsonl")
    assert len(files) > 5
    assert [e["n"] for e in read_events(root)] == list(range(60))
