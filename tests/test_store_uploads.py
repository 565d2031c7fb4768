"""On an object store, a run does not download what it wrote only to hash it, nor, on a rerun, what it
checked before and nobody has written since.

Every step's outputs manifest records each output's xxh3-128, and a token cache's ledger its shards'. The
uploader hashes the bytes it sends (`core/publish_log.py`), the worker's notes travel with its task's
result, and the driver's manifest takes them. Before, the driver GET every output of every step right
after the workers had PUT it. Checked on moto's S3 server with its request log, with worker processes
(the local backend), so the notes cross a process boundary: nothing downstream reads the token
caches here (no training), so no request may GET one of them.

A rerun checks every built step's outputs by content. The objects' versions (S3's ETag) in the listing it
makes anyway say which ones are the objects whose digests were recorded (`steps/stamps.py`), so it reads
none of them; an object replaced by other bytes of the same size has a new version, is read, and its step
is rebuilt.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("s3fs", reason="the s3 extra is not installed (pip install -e '.[s3]')")
pytest.importorskip("moto", reason="moto[server] (dev extra) is not installed")

import fsspec  # noqa: E402

import datakit  # noqa: E402
from datakit.steps import verify  # noqa: E402

from helpers_s3 import S3Server, restore_env, set_env  # noqa: E402

BUCKET = "datakit-uploads"


@pytest.fixture(scope="module")
def store():
    from datakit.shuffle import backends

    srv = S3Server()
    srv.start()
    old = set_env(srv.env())
    backends._close_pools()  # workers started by earlier tests lack the store's environment
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir(BUCKET)
    yield srv
    restore_env(old)
    backends._close_pools()
    srv.stop()


def _manifest(prefix: str) -> dict:
    import sysconfig

    stdlib = sysconfig.get_paths()["stdlib"]
    return {"prefix": prefix,
            "sources": [{"name": "json", "uri": f"{stdlib}/json/*.py", "format": "text"},
                        {"name": "email", "uri": f"{stdlib}/email/*.py", "format": "text"}],
            "tokenize": {"vocab_size": 512}}


@pytest.mark.slow
def test_no_output_is_downloaded_to_be_hashed(store):
    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/out"
    store.clear_log()
    summary = datakit.run(datakit.manifest_from_dict(_manifest(prefix)), backend="local", workers=2)
    assert summary.ok, summary.to_dict()
    log = store.requests()
    bucket_path = prefix[len("s3://"):]
    caches = [s["output"] for s in summary.steps if s["name"].startswith("tokenize-")]
    assert len(caches) == 2
    npy_puts = [r for r in log if r.method == "PUT" and r.path.endswith(".npy")
                and any(r.path.startswith("/" + c[len("s3://"):]) for c in caches)]
    assert len(npy_puts) >= 4  # token and offset arrays of both splits, for each source
    npy_gets = [r.path for r in log if r.method == "GET" and r.path.endswith(".npy")
                and r.path.startswith(f"/{bucket_path}/")]
    assert npy_gets == [], f"token shards downloaded after their upload: {npy_gets[:5]}"

    # The manifests hold the digests of the bytes in the store: `verify` reads everything and agrees.
    for step in summary.steps:
        report = verify.verify_step_dir(step["output"])
        assert report.manifest and report.ok, (step["name"], report.problems)


def _data_gets(log, prefix: str) -> list[str]:
    root = "/" + prefix[len("s3://"):] + "/"
    return [r.path for r in log if r.method == "GET" and r.path.startswith(root)
            and r.path.endswith((".parquet", ".npy"))]


@pytest.mark.slow
def test_a_rerun_reads_no_unchanged_output_and_rebuilds_a_replaced_one(store):
    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/out"
    manifest = datakit.manifest_from_dict(_manifest(prefix))
    first = datakit.run(manifest, backend="local", workers=2)
    assert first.ok, first.to_dict()

    store.clear_log()
    second = datakit.run(manifest, backend="local", workers=2)
    assert second.ok and all(s["status"] == "skipped" for s in second.steps), second.to_dict()
    assert _data_gets(store.requests(), prefix) == []

    # Other bytes of the same size in one consolidated file: a new version, so it is read, found changed,
    # and the step and what follows are built again.
    step = next(s for s in first.steps if s["name"] == "consolidate-json")
    s3 = fsspec.filesystem("s3", skip_instance_cache=True, use_listings_cache=False)
    victim = sorted(p for p in s3.find(step["output"][len("s3://"):]) if p.endswith(".parquet"))[0]
    data = bytearray(s3.cat_file(victim))
    data[len(data) // 2] ^= 0xFF
    s3.pipe_file(victim, bytes(data))
    store.clear_log()
    third = datakit.run(manifest, backend="local", workers=2)
    assert third.ok, third.to_dict()
    states = {s["name"]: s["status"] for s in third.steps}
    assert states["consolidate-json"] == "succeeded" and states["normalize-json"] == "skipped", states
    assert s3.cat_file(victim) != bytes(data)
    gets = _data_gets(store.requests(), prefix)
    assert "/" + victim in gets
    assert not any("/normalize-email-" in g or "/tokenize-email-" in g for g in gets), gets


def test_a_task_ships_the_notes_of_its_own_uploads_only():
    """`publish_log` in one process: what a task noted after its mark is taken once, in order, and what is
    taken under a step dir leaves the rest (memory:// is an object store to fsio: uploads are noted)."""
    from datakit.core import fsio, publish_log

    root = f"memory://notes-{uuid.uuid4().hex[:8]}"
    fsio.atomic_write_bytes(f"{root}/before.bin", b"x")
    mark = publish_log.mark()
    fsio.atomic_write_bytes(f"{root}/step/a.bin", b"alpha")
    fsio.atomic_write_bytes(f"{root}/step/a.bin", b"ALPHA!")  # rewritten: the later note is last
    f, tmp = fsio.open_atomic(f"{root}/step/b.bin")
    with f:
        f.write(b"bravo")
    fsio.commit(tmp, f"{root}/step/b.bin")
    task = publish_log.take_since(mark)
    assert [(w.path.rsplit("/", 1)[1], w.size) for w in task] == [("a.bin", 5), ("a.bin", 6), ("b.bin", 5)]
    assert task[1].xxh3_128 == fsio.xxh3_file(f"{root}/step/a.bin")
    assert publish_log.take_since(mark) == []  # taken once
    publish_log.note_all(task)  # the driver, given the accepted attempt's result
    assert publish_log.latest(f"{root}/step/a.bin") == task[1]
    assert [w.path for w in publish_log.take_under(f"{root}/step")] == [w.path for w in task]
    assert [w.path for w in publish_log.take_under(root)] == [f"{root}/before.bin"]


@pytest.mark.slow
def test_an_edit_takes_the_unchanged_files_by_a_copy_in_the_store(store, tmp_path, monkeypatch):
    """Incremental on an object store: the rebuilt steps take the units whose inputs did not change from
    their earlier builds by the store's own copy, and no object is downloaded to be hashed: not the
    earlier build's (the stamps vouch for them by version), not the copies (their digests are the earlier
    build's), not what the run computed (its uploads were hashed as sent). The result equals a fresh build
    (up to the tokenizer, which a prefix keeps pinned while a fresh one trains on the final data). In one
    process (the inline backend), so that every hash of an object is seen."""
    import shutil
    import sysconfig

    from datakit.core import fsio

    src = tmp_path / "email"
    shutil.copytree(sysconfig.get_paths()["stdlib"] + "/email", src, ignore=shutil.ignore_patterns("_*", "mime"))
    names = sorted(p.name for p in src.glob("*.py"))
    assert len(names) >= 8

    def manifest(prefix: str) -> datakit.Manifest:
        return datakit.manifest_from_dict({
            "prefix": prefix, "sources": [{"name": "email", "uri": f"{src}/*.py", "format": "text"}],
            "normalize": {"target_shard_bytes": 16 << 10}, "tokenize": {"vocab_size": 512}})

    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/out"
    first = datakit.run(manifest(prefix), backend="inline")
    assert first.ok, first.to_dict()
    edited = src / names[len(names) // 2]
    edited.write_text(edited.read_text() + "\n# one more line\n")
    hashed: list[str] = []
    real = fsio.xxh3_file
    monkeypatch.setattr(fsio, "xxh3_file", lambda p: hashed.append(p) or real(p))
    second = datakit.run(manifest(prefix), backend="inline")
    monkeypatch.undo()
    assert second.ok, second.to_dict()
    norm = next(s for s in second.steps if s["name"] == "normalize-email")
    assert norm["counters"]["files/reused"] > 0 and norm["counters"]["files/computed"] > 0, norm["counters"]
    assert [p for p in hashed if p.startswith("s3://")] == []

    s3 = fsspec.filesystem("s3", skip_instance_cache=True, use_listings_cache=False)
    taken = 0
    for name in ("normalize-email", "consolidate-email"):
        old, new = (next(s["output"] for s in run.steps if s["name"] == name)[len("s3://"):]
                    for run in (first, second))
        assert old != new, name
        taken += sum(1 for path in s3.find(new) if (rel := path[len(new):]).startswith("/outputs/main/")
                     and s3.exists(old + rel) and s3.cat_file(old + rel) == s3.cat_file(path))
    assert taken >= 10, taken

    fresh = datakit.run(manifest(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/fresh"), backend="inline")
    for a, b in zip(second.steps, fresh.steps):
        assert a["name"] == b["name"]
        if a["name"].startswith("tokenize"):  # the one accepted difference: the first tokenizer stays pinned
            continue
        ours, theirs = (sorted(rel for p in s3.find(s["output"][len("s3://"):])
                               if (rel := p[len(s["output"]) - len("s3://"):]).endswith((".parquet", ".npy"))
                               and not rel.startswith("/reuse/")) for s in (a, b))  # reuse/: bookkeeping
        assert ours == theirs, a["name"]
        for rel in ours:
            assert s3.cat_file(a["output"][len("s3://"):] + rel) == s3.cat_file(b["output"][len("s3://"):] + rel), rel


@pytest.mark.slow
def test_a_rebuilt_step_reads_its_earlier_build_s_manifest_and_listing_once(store, tmp_path):
    """A step rebuilt after an edit reads its earlier build's outputs manifest and lists that build's dir
    once: the reuse it takes (`reuse.load`) and the digests its own manifest takes from the copies
    (`verify.write_manifest`) share one read of each (`verify.earlier_reads`). On an object store each
    is a request, a round trip per rebuilt step."""
    import shutil
    import sysconfig
    from urllib.parse import parse_qs

    src = tmp_path / "json"
    shutil.copytree(sysconfig.get_paths()["stdlib"] + "/json", src, ignore=shutil.ignore_patterns("_*"))
    m = {"prefix": f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/out",
         "sources": [{"name": "json", "uri": f"{src}/*.py", "format": "text"}],
         "normalize": {"target_shard_bytes": 8 << 10}, "tokenize": {"vocab_size": 512}}
    first = datakit.run(datakit.manifest_from_dict(m), backend="inline")
    assert first.ok, first.to_dict()
    edited = sorted(src.glob("*.py"))[1]
    edited.write_text(edited.read_text() + "\n# one more line\n")
    store.clear_log()
    second = datakit.run(datakit.manifest_from_dict(m), backend="inline")
    assert second.ok, second.to_dict()
    log = store.requests()
    earlier = {s["name"]: s["output"][len("s3://"):] for s in first.steps}
    rebuilt = [s["name"] for s in second.steps if s["status"] == "succeeded" and s["name"] in earlier
               and earlier[s["name"]] != s["output"][len("s3://"):]]
    assert {"normalize-json", "consolidate-json", "tokenize-json"} <= set(rebuilt), rebuilt
    for name in rebuilt:
        d = earlier[name]
        manifests = [r for r in log if r.method == "GET" and r.path == f"/{d}/outputs.manifest.json"]
        listings = [r for r in log if r.method == "GET" and r.path == f"/{BUCKET}"
                    and parse_qs(r.query).get("prefix", [""])[0].rstrip("/") == d[len(BUCKET) + 1:]]
        assert len(manifests) == 1 and len(listings) == 1, (name, len(manifests), len(listings))
