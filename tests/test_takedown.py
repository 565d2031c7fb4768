"""Takedowns on real text: documents listed by id, URL or domain (inline or in a file) are removed from
every source's final documents; a new takedown on a built prefix rebuilds only the takedown step, rewrites
only the files holding a listed document and equals a from-scratch build with the takedown; a malformed
takedown file fails naming its line."""

from __future__ import annotations

import hashlib
import json
import os
import re

import duckdb
import pytest

from datakit import pipeline
from datakit.quality.takedown import TakedownConfig, TakedownFileError, Takedowns, parse_file

LICENSES = ("Apache-2.0", "GPL-3", "LGPL-2.1", "MPL-2.0", "Artistic", "GPL-2")


def _web(tmp_path) -> str:
    """Paragraphs of Debian's license texts as web pages of several sites, over eight files."""
    d = tmp_path / "web"
    d.mkdir()
    docs = []
    for name in LICENSES:
        with open(f"/usr/share/common-licenses/{name}", encoding="utf-8") as f:
            paras = [" ".join(p.split()) for p in f.read().split("\n\n") if len(p.split()) > 12]
        site = {"Apache-2.0": "apache.org", "MPL-2.0": "www.mozilla.org", "Artistic": "perl.example.co.uk"}.get(
            name, "www.gnu.org")
        docs += [{"id": f"{name}-{i}", "text": p, "url": f"https://{site}/{name}/{i}"} for i, p in enumerate(paras)]
    for k in range(8):
        (d / f"part{k}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs[k::8]))
    return str(d)


def _manifest(tmp_path, prefix: str, takedown: dict | None) -> object:
    data = {"prefix": str(tmp_path / prefix),
            "sources": [{"name": "web", "uri": _web(tmp_path) if not (tmp_path / "web").exists() else
                         str(tmp_path / "web"), "format": "jsonl", "id_field": "id"}],
            "normalize": {"target_shard_bytes": 8_000}, "dedup": {"fuzzy": False}, "pii": {},
            "tokenize": {"vocab_size": 300}}
    if takedown is not None:
        data["takedown"] = takedown
    return pipeline.manifest_from_dict(data)


def _until_tokenize(m) -> list[str]:
    return [s.name for s in pipeline.build_steps(m) if s.stage not in ("tokenizer", "tokenize", "train")]


def _step(summary, name: str) -> dict:
    return next(s for s in summary.to_dict()["steps"] if s["name"] == name)


def _files(summary, name: str) -> dict[str, str]:
    d = _step(summary, name)["output"]
    out = {}
    for root, _dirs, names in os.walk(os.path.join(d, "outputs")):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.relpath(os.path.join(root, n), d)] = hashlib.sha256(f.read()).hexdigest()
    assert out
    return out


def test_a_new_takedown_rewrites_only_the_files_holding_it_and_equals_a_rebuild(tmp_path):
    before = _manifest(tmp_path, "inc", {"ids": ["GPL-3-5"]})
    assert pipeline.run(before, workers=2, only=_until_tokenize(before)).ok
    listing = tmp_path / "takedowns.txt"
    listing.write_text("# requests of 2026-11\nurl https://apache.org/Apache-2.0/3\n"
                       "id GPL-3-5   # by the id the page had in its input\n")
    after = _manifest(tmp_path, "inc", {"file": str(listing)})
    s = pipeline.run(after, workers=2, only=_until_tokenize(after))
    assert s.ok
    take = _step(s, "takedown-web")
    removed = duckdb.execute("select detail from read_parquet(?)",
                             [os.path.join(take["output"], "outputs/removed/*.parquet")]).fetchall()
    assert sorted(r[0] for r in removed)[1] == "url https://apache.org/Apache-2.0/3"
    assert sorted(r[0] for r in removed)[0].startswith("id GPL-3-5") and len(removed) == 2
    # One more listed document: its file is rewritten, the rest are taken; every step before is reused whole.
    c = _step(s, "takedown-web")["counters"]
    assert c["files/computed"] == 1 and c["files/reused"] > 3, c
    assert {st["name"] for st in s.to_dict()["steps"] if st["status"] == "succeeded"} == {"takedown-web"}
    kept = duckdb.execute("select count(*) from read_parquet(?) where url = 'https://apache.org/Apache-2.0/3' "
                          "or source_id = 'GPL-3-5'",
                          [os.path.join(_step(s, "takedown-web")["output"], "outputs/main/*.parquet")]).fetchone()[0]
    assert kept == 0
    from datakit.report.text import format_summary

    text = format_summary(s.to_dict(), str(tmp_path / "inc"))
    assert re.search(r"incremental: 1 rebuilt steps took \d+ of \d+ files from their earlier builds; computed: "
                     r"takedown-web 1/\d+", " ".join(text.split())), text
    assert s.to_dict()["data"]["reuse"]["takedown-web"]["computed"] == 1
    fresh = _manifest(tmp_path, "fresh", {"file": str(listing)})
    f = pipeline.run(fresh, workers=1, only=_until_tokenize(fresh))
    assert f.ok
    for name in ("takedown-web", "consolidate-web", "pii-web"):
        assert _files(s, name) == _files(f, name), name
    # A file holding no listed document is its input's bytes (linked), so later steps know it unchanged.
    pii, take = (_files(f, name) for name in ("pii-web", "takedown-web"))
    same = [rel for rel, digest in take.items() if rel.startswith("outputs/main/") and pii.get(rel) == digest]
    mains = len([r for r in take if r.startswith("outputs/main/")])
    assert mains - 2 <= len(same) < mains  # the two listed documents' files are rewritten, the rest linked


def test_domains_and_the_summary_reason(tmp_path):
    m = _manifest(tmp_path, "p", {"domains": ["mozilla.org", "https://perl.example.co.uk/x"], "ids": ["Apache-2.0-0"]})
    s = pipeline.run(m, workers=1, only=_until_tokenize(m))
    assert s.ok
    c = _step(s, "takedown-web")["counters"]
    assert c["docs_in"] == c["docs_out"] + c["removed/takedown"]
    details = [r[0] for r in duckdb.execute("select detail from read_parquet(?)", [os.path.join(
        _step(s, "takedown-web")["output"], "outputs/removed/*.parquet")]).fetchall()]
    mozilla, perl = (sum(d == f"domain {x}" for d in details) for x in ("mozilla.org", "example.co.uk"))
    assert mozilla > 5 and perl > 5 and len(details) == mozilla + perl + 1
    assert s.to_dict()["data"]["sources"]["web"]["removed"]["takedown"] == c["removed/takedown"]


def test_a_malformed_takedown_file_fails_naming_its_line(tmp_path):
    with pytest.raises(TakedownFileError, match=r"t\.txt:2: expected '<kind> <value>'"):
        parse_file(b"domain example.com\nexample.org\n", "t.txt")
    with pytest.raises(TakedownFileError, match="t.txt:1"):
        parse_file(b"host example.com\n", "t.txt")
    assert parse_file(b"# c\n\nurl https://a.b/c # x\n", "t.txt")["url"] == {"https://a.b/c"}


def test_the_column_wise_lookup_finds_exactly_what_matching_each_document_finds(tmp_path):
    """`Takedowns.rows` looks ids up in Arrow and runs `match` on candidates only; on real pages with ids
    as strings or integers, nulls, URLs with surrounding spaces and domains it finds, row for row and
    reason for reason, what `match` finds on every document."""
    import pyarrow as pa

    web = _web(tmp_path)
    docs = [json.loads(line) for k in range(8) for line in open(os.path.join(web, f"part{k}.jsonl"))]
    n = len(docs)
    urls = [("  " + d["url"] + "\n") if i % 7 == 0 else (None if i % 11 == 0 else d["url"]) for i, d in enumerate(docs)]
    base = {"id": pa.array([d["id"] for d in docs]), "url": pa.array(urls)}
    listed = TakedownConfig(ids=(docs[3]["id"], docs[40]["id"], "17", "18"), urls=(docs[14]["url"], docs[15]["url"]),
                            domains=("mozilla.org",))
    for source_id in (pa.array([f"src-{i}" if i % 5 else None for i in range(n)]), pa.array(range(n), pa.int64()),
                      pa.array([float(i) for i in range(n)])):
        table = pa.table({**base, "source_id": source_id})
        for cfg in (listed, TakedownConfig(ids=listed.ids)):
            lists = Takedowns.of(cfg)
            want = [(i, d["id"], why) for i, d in enumerate(table.to_pylist()) if (why := lists.match(d)) is not None]
            assert lists.rows(table) == want
            assert len(want) >= (3 if cfg.urls else 2)


def test_a_takedown_reads_each_column_of_a_file_once(tmp_path, monkeypatch):
    """A file's task reads the id columns for its reuse key and, only when the file is rewritten, the
    other columns (before: the id columns, then the whole file again); an untouched file is read no
    further. The table so assembled is the one a whole read gives, schema and metadata included."""
    import pyarrow.parquet as pq

    from datakit.stages import transform

    m = _manifest(tmp_path, "p", {"ids": ["GPL-3-5", "Apache-2.0-3"], "urls": ["https://www.gnu.org/GPL-2/4"]})
    only = _until_tokenize(m)
    assert pipeline.run(m, workers=1, only=[n for n in only if not n.startswith("takedown")]).ok
    reads: list[tuple[str, tuple]] = []
    real = transform.read_table
    monkeypatch.setattr(transform, "read_table",
                        lambda p, columns=None: reads.append((p, tuple(columns or ()))) or real(p, columns=columns))
    s = pipeline.run(m, backend="inline", only=only)
    assert s.ok
    c = _step(s, "takedown-web")["counters"]
    inputs = sorted({p for p, _ in reads})
    assert len(inputs) == c["files/computed"] + c["files/reused"] > 3
    run_reads = list(reads)  # what the run read (the checks below read through the same function)
    rewritten = [p for p in inputs if len([cols for q, cols in run_reads if q == p]) > 1]
    assert len(rewritten) == 3 and c["removed/takedown"] == 3  # the listed documents' files, and only them
    for path in inputs:
        asked = [cols for p, cols in run_reads if p == path]
        flat = [col for cols in asked for col in cols]
        assert len(flat) == len(set(flat)), (path, asked)  # no column read twice
        assert set(asked[0]) <= {"id", "source_id", "url"}
        columns = transform.FileColumns(path)
        columns.read(["id", "source_id"])
        whole = pq.read_table(path)
        assert columns.table().equals(whole, check_metadata=True)
        assert transform.table_bytes(columns.table()) == transform.table_bytes(whole)


def test_the_takedown_step_hashes_what_it_writes_without_reading_it_back(tmp_path, monkeypatch):
    """Its workers record each published file's digest (`fsio.write_noted`), so its outputs manifest
    reads none of them back, and records the same digests a read gives."""
    from datakit.core import fsio
    from datakit.steps.verify import read_manifest

    m = _manifest(tmp_path, "p", {"ids": ["GPL-3-5", "Apache-2.0-3"]})
    only = _until_tokenize(m)
    assert pipeline.run(m, workers=1, only=[n for n in only if not n.startswith("takedown")]).ok
    reads: list[str] = []
    real = fsio.xxh3_file
    monkeypatch.setattr(fsio, "xxh3_file", lambda p: reads.append(p) or real(p))
    s = pipeline.run(m, backend="inline", only=only)
    assert s.ok
    out = _step(s, "takedown-web")["output"]
    files = read_manifest(out)
    before = {f.path: f.xxh3_128 for f in read_manifest(_step(s, "pii-web")["output"])}
    # what its workers published: every removed file, and the main files that lost a document (the
    # others are links to the input's files)
    published = [os.path.join(out, f.path) for f in files if f.path.startswith("outputs/removed/")
                 or (f.path.startswith("outputs/main/") and before[f.path] != f.xxh3_128)]
    removed_files = [f for f in files if f.path.startswith("outputs/removed/")]
    assert len(published) > len(removed_files) > 3 and not set(published) & set(reads)
    assert all(f.xxh3_128 == real(os.path.join(out, f.path)) for f in files)


def test_the_token_shards_a_takedown_cuts_are_not_read_back_for_the_manifest(tmp_path, monkeypatch):
    """A takedown's token shards are cut from the earlier ones by the tasks, which note each file's
    digest: the tokenize step's manifest reads none of its shard, ids or marker files back."""
    m = _manifest(tmp_path, "p", {"ids": ["GPL-3-5", "Apache-2.0-3"]})
    names = [s.name for s in pipeline.build_steps(m) if s.stage != "train"]
    before = _manifest(tmp_path, "p", None)
    assert pipeline.run(before, workers=1, only=[s.name for s in pipeline.build_steps(before) if s.stage != "train"]).ok
    # every shard's files: the cut ones' noted by their tasks, the taken ones' linked from the earlier build
    tok = _tokenize_reading_no_shard_back(monkeypatch, m, names, "inline", 1, min_shard_files=40)
    assert tok["counters"]["files/spliced"] == 2 and tok["counters"]["files/reused"] > 3, tok["counters"]


def _tokenize_reading_no_shard_back(monkeypatch, m, names: list[str], backend: str, workers: int,
                                    min_shard_files: int) -> dict:
    """Run ``names`` of ``m``, hashing files through a spy: tokenize-web's record, after checking that its
    manifest read none of its shard, ids or marker files back and records the digests a read gives."""
    from datakit.core import fsio
    from datakit.steps.verify import read_manifest

    reads: list[str] = []
    real = fsio.xxh3_file
    monkeypatch.setattr(fsio, "xxh3_file", lambda p: reads.append(p) or real(p))
    s = pipeline.run(m, backend=backend, workers=workers, only=names)
    assert s.ok
    tok = _step(s, "tokenize-web")
    files = read_manifest(tok["output"])
    shards = [f for f in files if f.path.endswith((".npy", ".json")) and "/" in f.path and "ledger" not in f.path
              and "stats" not in f.path]
    assert len(shards) > min_shard_files
    assert not {os.path.join(tok["output"], f.path) for f in shards} & set(reads)
    assert all(f.xxh3_128 == real(os.path.join(tok["output"], f.path)) for f in files)
    return tok


@pytest.mark.parametrize("backend", ["inline", "local"])
def test_a_token_cache_encoded_fresh_is_not_read_back_for_the_manifest(tmp_path, monkeypatch, backend):
    """Encoded shards are hashed where they are written (`cache.write_npy_atomic` from the array,
    `cache.shard_checksums` for the streamed tokens, `fsio.write_noted` for ids and markers) and noted in
    `publish_log`, which carries the notes back from worker processes with each task's result: the
    tokenize step's manifest reads none of its shard, ids or marker files back, and records the digests a
    read gives."""
    m = _manifest(tmp_path, "p", None)
    names = [s.name for s in pipeline.build_steps(m) if s.stage != "train"]
    assert pipeline.run(m, workers=2, only=[n for n in names if not n.startswith("tokenize-")]).ok
    tok = _tokenize_reading_no_shard_back(monkeypatch, m, names, backend, 2, min_shard_files=20)
    assert tok["counters"]["files/computed"] > 3, tok["counters"]
