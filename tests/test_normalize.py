"""Tests for datakit.normalize: cleaning rules, and normalize_source end to end on the real engine.

Every format round-trips real content generated here (jsonl/.jsonl.zst, parquet, stdlib sources as text,
HTML pages, .warc.gz). Outputs are checked as a downstream reader would: every file sorted by id, ids
are the hash of the text, one main and one dups part per unit of input, no id kept twice, counts add
up, and the bytes do not depend on the number of workers.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sysconfig
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash
import zstandard

from datakit.normalize import (
    NormalizeConfig, NormalizeError, NormalizeResult, SchemaConflictError, clean_record, compact_whitespace,
    normalize_source,
)
from datakit.core.documents import content_id
from datakit.core.listing import common_root
from datakit.manifest import SourceSpec
from datakit.core.layout import parse_unit_part_name
from datakit.normalize.plan import direct_units, file_refs, pack_shards, read_plan
from datakit.normalize.units import Piece, estimated_text, plan_units
from datakit.shuffle import ExecConfig, FileInfo, list_files
from datakit.sources.readers import RawRecord, Reject

from test_readers import PAGE, sample_warc_records

LOCAL2 = ExecConfig(backend="local", max_workers=2)


def raw(fields: dict, line: int = 1, url=None) -> RawRecord:
    return RawRecord(fields, 0, "f.jsonl", line, line, 0, f"f.jsonl:{line}", url, 0, json.dumps(fields, default=repr))


def write_jsonl(path: Path, rows: list, compress: bool = False) -> Path:
    data = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if compress else data)
    return path


def read_dir(out: Path, rels: list[str]) -> list[pa.Table]:
    return [pq.read_table(out / r) for r in rels]


def all_rows(out: Path, rels: list[str]) -> list[dict]:
    return [row for t in read_dir(out, rels) for row in t.to_pylist()]


def digest_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def check_invariants(out: Path, res: NormalizeResult) -> None:
    c = res.counters
    assert c["records_in"] == c["records_out"] + c["dups"] + c["empty_dropped"] + c["rejects"]
    names = [Path(m).name for m in res.main_files]
    assert len(names) == res.num_shards and names == sorted(names)
    assert all(parse_unit_part_name(n) for n in names)
    assert res.main_files == [f"outputs/main/{n}" for n in names]
    assert res.dups_files == [f"outputs/dups/{n}" for n in names]
    assert sorted(p.name for p in (out / "outputs" / "main").iterdir()) == names
    n_main = n_dups = 0
    kept: set[str] = set()
    for m, d in zip(res.main_files, res.dups_files):
        for rel in (m, d):
            pf = pq.ParquetFile(out / rel)
            assert list(pf.schema_arrow.names) == list(res.columns)
            if pf.metadata.num_row_groups:
                assert pf.metadata.row_group(0).column(0).compression == "ZSTD"
            t = pf.read()
            ids = t.column("id").to_pylist()
            assert ids == sorted(ids), f"{rel} is not sorted by id"
            assert all(content_id(x) == i_ for x, i_ in zip(t.column("text").to_pylist(), ids))
        main_ids = pq.read_table(out / m, columns=["id"]).column("id").to_pylist()
        dup_ids = pq.read_table(out / d, columns=["id"]).column("id").to_pylist()
        assert len(set(main_ids)) == len(main_ids)
        assert not kept & set(main_ids), f"{m} keeps an id another part keeps"
        kept |= set(main_ids)
        n_main += len(main_ids)
        n_dups += len(dup_ids)
    # every copy in dups is of an id some part keeps (the first copy by file order and position)
    assert {i for d in res.dups_files for i in pq.read_table(out / d, columns=["id"]).column("id").to_pylist()} <= kept
    assert (n_main, n_dups) == (c["records_out"], c["dups"])
    rejects = pq.read_table(out / res.rejects_files[0])
    assert rejects.num_rows == c["rejects"]


# ------------------------------------------------------------------------------------------------ cleaning




def src(name: str, fmt: str = "jsonl", **kw) -> SourceSpec:
    """A source as the manifest gives it (normalize reads its name, format and fields, never its uri)."""
    return SourceSpec(name=name, uri="in", format=fmt, **kw)


SPEC = src("src")
CFG = NormalizeConfig()


@pytest.mark.parametrize("fields,kind", [
    ({"other": 1}, "empty_missing_field"),
    ({"text": None}, "empty_null"),
    ({"text": ""}, "empty_blank"),
    ({"text": "   "}, "empty_blank"),
    ({"text": "\xa0\xa0\n\xa0"}, "empty_blank"),
    ({"text": "\u3000\t\r\n\u2028"}, "empty_blank"),
])
def test_blank_variants_are_dropped_and_counted(fields, kind):
    stats = Counter()
    assert clean_record(raw(fields), SPEC, CFG, stats) is None
    assert stats[kind] == 1 and stats["empty_dropped"] == 1


def test_wrong_type_is_a_reject_bytes_are_decoded():
    stats = Counter()
    rej = clean_record(raw({"text": 42}, line=7), SPEC, CFG, stats)
    assert isinstance(rej, Reject) and rej.reason == "wrong_type" and rej.line == 7
    assert "int" in rej.detail and rej.excerpt == '{"text": 42}'
    assert isinstance(clean_record(raw({"text": ["a"]}), SPEC, CFG, stats), Reject)
    item = clean_record(raw({"text": b"caf\xc3\xa9 \xff"}), SPEC, CFG, stats)
    assert item[3]["text"] == "caf\xe9 \ufffd" and stats["decode_replacements"] == 1
    rej = clean_record(raw({"text": "x" * 11}), SPEC, NormalizeConfig(max_record_chars=10), stats)
    assert rej.reason == "oversized"


def test_whitespace_runs_capped_and_id_recomputed():
    text = "before" + " " * 500 + "after"
    stats = Counter()
    doc_id, _, _, row = clean_record(raw({"text": text}), SPEC, CFG, stats)
    assert row["text"] == "before" + " " * 128 + "after"
    assert doc_id == row["id"] == xxhash.xxh3_128_hexdigest(row["text"].encode())
    assert doc_id != content_id(text) and len(doc_id) == 32
    assert stats["whitespace_compacted"] == 1
    # the first characters of the run are kept, whatever they are
    assert compact_whitespace("a" + "\n" * 3 + "\xa0" * 300 + "b", 4) == ("a\n\n\n\xa0b", 1)
    assert compact_whitespace("x" + " " * 128 + "y", 128) == ("x" + " " * 128 + "y", 0)
    assert compact_whitespace(" " * 129 + "y" + "\t" * 200, 128) == (" " * 128 + "y" + "\t" * 128, 2)
    # non-ASCII and mixed runs go through the same path (the byte-level pre-check must not miss them)
    for run in ("\u3000" * 300, "\xa0" * 129, " \n" * 100, "\u2028\t" * 70):
        stats = Counter()
        _, _, _, row = clean_record(raw({"text": "x" + run + "y\u00e9"}), SPEC, CFG, stats)
        assert row["text"] == "x" + run[:128] + "y\u00e9" and stats["whitespace_compacted"] == 1
    # separators (0x1C-0x1F) are whitespace and control characters: screened, and their run still capped
    stats = Counter()
    _, _, _, row = clean_record(raw({"text": "x" * 3000 + "\x1c" * 200 + "y"}), SPEC, CFG, stats)
    assert row["text"] == "x" * 3000 + "\x1c" * 128 + "y" and stats["whitespace_compacted"] == 1
    assert stats["control_chars"] == 200
    # the byte-level pre-check knows every whitespace character's bytes (none lies above WS_LAST), and
    # text in other scripts no longer looks like a run
    from datakit.normalize import clean as C

    assert max(c for c in range(0x110000) if chr(c).isspace()) == C.WS_LAST
    assert not C._may_have_long_run(("日本語" * 100 + "Привет" * 50).encode(), None, 128)
    stats = Counter()
    _, _, _, row = clean_record(raw({"text": "\u00e9" * 500 + " " * 128 + "z"}), SPEC, CFG, stats)
    assert row["text"] == "\u00e9" * 500 + " " * 128 + "z" and stats["whitespace_compacted"] == 0


def test_fields_mapping_extras_bare_and_collisions():
    fields = {"content": "hello", "doc": 17, "id": "orig", "source": "web", "url": "http://u", "lang": "en"}
    spec = src("src", text_field="content", id_field="doc")
    _, _, _, row = clean_record(raw(fields), spec, CFG, Counter())
    assert row == {"id": content_id("hello"), "text": "hello", "source": "src", "source_id": "17",
                   "url": "http://u", "orig_id": "orig", "orig_source": "web", "lang": "en"}
    _, _, _, row = clean_record(raw(fields), src("src", text_field="content", bare=True),
                                CFG, Counter())
    assert row == {"id": content_id("hello"), "text": "hello", "source": "src", "source_id": "f.jsonl:1",
                   "url": "http://u"}
    rej = clean_record(raw({"text": "x", "doc": {"a": 1}}), src("s", id_field="doc"), CFG,
                       Counter())
    assert rej.reason == "wrong_type" and "'doc'" in rej.detail


def test_planning_helpers():
    assert common_root(["/a/b/c/x.jsonl", "/a/b/d/y.jsonl"]) == "/a/b"
    assert common_root(["/a/b/x.jsonl"]) == "/a/b"
    assert common_root(["gs://bk/p/x", "gs://bk/p/q/y"]) == "gs://bk/p"
    files = [FileInfo("/d/b.jsonl", 5, "b.jsonl"), FileInfo("/d/.git/x.jsonl", 1, ".git/x.jsonl"),
             FileInfo("/d/a.jsonl", 7, "a.jsonl"), FileInfo("/d/sub/.tmp.jsonl", 1, "sub/.tmp.jsonl")]
    refs, hidden = file_refs(files)
    assert [(r.index, r.rel, r.size) for r in refs] == [(0, "a.jsonl", 7), (1, "b.jsonl", 5)]
    assert hidden == 2
    with pytest.raises(ValueError, match="not under the source root"):
        file_refs(files, root="/elsewhere")
    # estimated text: compressed files count 4x their size (the units' byte target); never the worker count
    mib = 2**20
    assert estimated_text("/d/a.jsonl", 150 * mib) == 150 * mib
    assert estimated_text("/d/a.jsonl.zst", 40 * mib) == 160 * mib
    units = [(r, s) for r, s in zip(range(6), [10, 10, 10, 50, 1, 1])]
    assert pack_shards(units, 25, 100) == [[0, 1], [2], [3], [4, 5]]
    assert pack_shards(units, 1000, 2) == [[0, 1], [2, 3], [4, 5]]


def test_units_are_stable_when_files_come_and_go():
    """The unit rule (units.py): a file added, removed or resized within its power of two changes its
    own unit only (and, through the byte cap, the ones up to the next boundary chosen by name); the
    other units keep their members and their names."""
    refs = file_refs([FileInfo(f"/d/f{i:04d}.txt", 1000 + 37 * (i % 11), f"f{i:04d}.txt") for i in range(600)])[0]
    target = 40_000

    def units(rs):
        return {u.names[0]: tuple(r.rel for r in u.refs)
                for u in plan_units([Piece(r, r.size) for r in rs], target, part_bytes=target)}

    before = units(refs)
    assert 15 < len(before) < 100  # about target / 2 to target of text per unit
    assert all(len(m) for m in before.values())
    for change in ("add", "remove", "resize"):
        rs = list(refs)
        if change == "add":
            rs.insert(300, FileInfo("/d/f0299b.txt", 1500, "f0299b.txt"))
            rs = file_refs([FileInfo(r.path, r.size, r.rel) for r in rs])[0]
        elif change == "remove":
            rs = file_refs([FileInfo(r.path, r.size, r.rel) for r in rs if r.rel != "f0300.txt"])[0]
        else:
            rs = file_refs([FileInfo(r.path, r.size + (3 if r.rel == "f0300.txt" else 0), r.rel) for r in rs])[0]
        after = units(rs)
        changed = [n for n in after if before.get(n) != after[n]]
        # a file added or removed changes its unit's members; an edit changes its content only
        assert (1 if change != "resize" else 0) <= len(changed) <= 3, (change, changed)
        assert len(set(before) - set(after)) <= 3


# ------------------------------------------------------------------------------------------------ jsonl end to end


def jsonl_source(root: Path) -> list[FileInfo]:
    rows_a = [{"text": f"doc {i} " + "words " * (i % 5), "meta": {"i": i}, "score": None} for i in range(300)]
    rows_a += [{"text": "the same text twice", "n": 1}, {"text": None}, {"text": ""}, {"text": "   "},
               {"text": "\xa0\xa0\n\xa0"}, {"no_text": "x"}, '{"text": "broken', {"text": 5},
               {"text": "spaces" + " " * 500 + "end"}]
    rows_b = [{"text": "the same text twice", "n": 2}, {"text": "doc 3 " + "words " * 3}]
    rows_b += [{"text": f"b doc {i}", "score": 0.5 * i, "tag": "b"} for i in range(300)]
    write_jsonl(root / "in" / "a.jsonl", rows_a)
    write_jsonl(root / "in" / "b.jsonl.zst", rows_b, compress=True)
    write_jsonl(root / "in" / ".hidden" / "c.jsonl", [{"text": "never read"}])
    return list_files(str(root / "in"))


def test_jsonl_end_to_end(tmp_path):
    files = jsonl_source(tmp_path)
    assert [Path(f.path).name for f in files] == ["a.jsonl", "b.jsonl.zst"]
    out = tmp_path / "out"
    cfg = NormalizeConfig(target_shard_bytes=4096, reject_fraction=0.5)
    res = normalize_source(src("web"), files=files, out_dir=str(out), cfg=cfg, exec_config=LOCAL2)
    c = res.counters
    assert c["records_in"] == 309 + 302
    assert (c["empty_dropped"], c["empty_missing_field"], c["empty_null"], c["empty_blank"]) == (5, 1, 1, 3)
    assert c["rejects"] == 2 and res.rejects_by_reason == {"malformed_json": 1, "wrong_type": 1}
    assert c["dups"] == 2  # "the same text twice" and "doc 3 words words words "
    assert c["whitespace_compacted"] == 1
    assert c["records_out"] == 611 - 5 - 2 - 2
    assert res.num_shards > 1
    check_invariants(out, res)

    main = all_rows(out, res.main_files)
    dups = all_rows(out, res.dups_files)
    by_text = {r["text"]: r for r in main}
    # first copy by (file, line) wins; the other is in dups with the same id
    assert by_text["the same text twice"]["source_id"] == "a.jsonl:301"
    assert by_text["the same text twice"]["n"] == 1
    assert sorted(d["source_id"] for d in dups) == ["b.jsonl.zst:1", "b.jsonl.zst:2"]
    assert by_text["spaces" + " " * 128 + "end"]["id"] == content_id("spaces" + " " * 128 + "end")
    # schema drift unified: score null in a.jsonl, double in b; meta only in a; tag only in b
    assert res.columns == {"id": "string", "text": "string", "source": "string", "source_id": "string",
                           "url": "string", "meta": "struct<i: int64>", "n": "int64", "score": "double",
                           "tag": "string"}
    assert by_text["b doc 4"]["score"] == 2.0 and by_text["b doc 4"]["meta"] is None
    assert by_text["doc 7 words words "]["meta"] == {"i": 7}
    assert all(r["source"] == "web" for r in main)
    rejects = pq.read_table(out / res.rejects_files[0]).to_pylist()
    assert [(r["file"], r["line"], r["reason"]) for r in rejects] == [
        ("a.jsonl", 307, "malformed_json"), ("a.jsonl", 308, "wrong_type")]
    assert rejects[0]["excerpt"] == '{"text": "broken'
    assert sorted(p.name for p in (out / "outputs" / "rejects").iterdir()) == ["part-00000-of-00001.parquet"]
    # JSON round trip of the typed result
    again = NormalizeResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert again == res
    with pytest.raises(ValueError, match="schema_version"):
        NormalizeResult.from_dict({**res.to_dict(), "schema_version": 99})


def test_one_vs_two_workers_byte_identical(tmp_path):
    files = jsonl_source(tmp_path)
    cfg = NormalizeConfig(target_shard_bytes=4096, reject_fraction=0.5, input_shard_bytes=2048)
    digests = []
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        normalize_source(src("web"), files=files, out_dir=str(out), cfg=cfg,
                         exec_config=ExecConfig(backend="local", max_workers=workers))
        digests.append(digest_tree(out))
    assert digests[0] == digests[1]
    assert len(digests[0]) > 4
    # a rerun into the same directory rewrites the same bytes (stale outputs are cleared first)
    normalize_source(src("web"), files=files, out_dir=str(tmp_path / "out1"), cfg=cfg,
                     exec_config=LOCAL2)
    assert digest_tree(tmp_path / "out1") == digests[0]


def test_direct_and_shuffled_parts_are_the_same_bytes(tmp_path):
    """Units written by the task that reads them (no shuffle) and units sent through the shuffle give
    the same files: within-unit dups, rejects, drifting types, several id-range parts per unit."""
    files = jsonl_source(tmp_path)
    write_jsonl(tmp_path / "in" / "c.jsonl", [{"text": f"doc {i} " + "words " * (i % 5), "score": 1} for i in range(40)]
                + [{"text": "c twice"}, {"text": "c twice", "n": 3}, "[1, 2]"])
    files = list_files(str(tmp_path / "in"))
    cfg = NormalizeConfig(part_bytes=2048, reject_fraction=0.5, inline_bytes=0)
    refs, _ = file_refs(files)
    units = read_plan(src("web"), refs, cfg).units
    assert len(units) >= 1 and sum(u.parts for u in units) > len(units)
    inline, pool = ExecConfig(backend="inline"), ExecConfig(backend="local", max_workers=len(units) + 1)
    assert direct_units(units, cfg, inline) == list(range(len(units)))
    assert direct_units(units, cfg, pool) == []  # fewer units than workers: the shuffle spreads the writing
    digests = []
    for name, engine in (("direct", inline), ("shuffled", pool)):
        res = normalize_source(src("web"), files=files, out_dir=str(tmp_path / name), cfg=cfg, exec_config=engine)
        assert res.counters["dups"] >= 3 and res.counters["rejects"] == 3
        check_invariants(tmp_path / name, res)
        digests.append(digest_tree(tmp_path / name))
    assert digests[0] == digests[1]


def test_truncated_zst_is_a_reject_and_nothing_else_is_lost(tmp_path):
    rows = [{"text": f"line {i} " + "filler text " * 20} for i in range(5000)]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    comp = zstandard.ZstdCompressor().compress(data)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "cut.jsonl.zst").write_bytes(comp[: len(comp) // 2])
    out = tmp_path / "out"
    res = normalize_source(src("cut"), files=list_files(str(tmp_path / "in")), out_dir=str(out),
                           cfg=NormalizeConfig(reject_fraction=0.01), exec_config=LOCAL2)
    c = res.counters
    assert c["rejects"] == 1 and res.rejects_by_reason == {"truncated_file": 1}
    kept = c["records_out"]
    assert 100 < kept < 5000
    texts = sorted(r["text"] for r in all_rows(out, res.main_files))
    assert texts == sorted(r["text"] for r in rows[:kept])
    rej = pq.read_table(out / res.rejects_files[0]).to_pylist()[0]
    assert rej["line"] == kept + 1 and rej["file"] == "cut.jsonl.zst"
    check_invariants(out, res)


def test_rejects_over_fraction_fail_with_pointer_to_rejects_file(tmp_path):
    rows = [{"text": f"ok {i}"} for i in range(95)] + ['{"broken'] * 5
    write_jsonl(tmp_path / "in" / "x.jsonl", rows)
    files = list_files(str(tmp_path / "in"))
    out = tmp_path / "out"
    with pytest.raises(NormalizeError) as info:
        normalize_source(src("bad"), files=files, out_dir=str(out), exec_config=LOCAL2)
    msg = str(info.value)
    assert "5 of 100 records rejected" in msg and "malformed_json: 5" in msg
    assert str(out / "outputs/rejects/part-00000-of-00001.parquet") in msg
    assert info.value.result.counters["records_out"] == 95
    lines = pq.read_table(out / "outputs/rejects/part-00000-of-00001.parquet").column("line").to_pylist()
    assert lines == [96, 97, 98, 99, 100]
    # within the fraction it passes; strict fails on a single reject
    res = normalize_source(src("bad"), files=files, out_dir=str(out),
                           cfg=NormalizeConfig(reject_fraction=0.05), exec_config=LOCAL2)
    assert res.counters["rejects"] == 5
    write_jsonl(tmp_path / "in" / "x.jsonl", [{"text": f"ok {i}"} for i in range(999)] + ['{"broken'])
    with pytest.raises(NormalizeError, match="strict"):
        normalize_source(src("bad"), files=list_files(str(tmp_path / "in")), out_dir=str(out),
                         cfg=NormalizeConfig(strict=True), exec_config=LOCAL2)


def test_all_dropped_suggests_the_text_field(tmp_path):
    write_jsonl(tmp_path / "in" / "x.jsonl", [{"content": f"t {i}", "meta": 1} for i in range(20)])
    with pytest.raises(NormalizeError) as info:
        normalize_source(src("wrong"), files=list_files(str(tmp_path / "in")),
                         out_dir=str(tmp_path / "out"), exec_config=LOCAL2)
    msg = str(info.value)
    assert "all 20 records were dropped" in msg and "text_field 'text'" in msg
    assert "content (20)" in msg and "meta (20)" in msg
    res = normalize_source(src("right", text_field="content"), files=list_files(str(tmp_path / "in")),
                           out_dir=str(tmp_path / "out"), exec_config=LOCAL2)
    assert res.counters["records_out"] == 20


def test_type_conflict_names_both_files_and_column(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": f"a {i}", "year": 2000 + i} for i in range(5)])
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"text": f"b {i}", "year": "MMXX"} for i in range(5)])
    for shards in (1, 64):  # conflict inside one unit, and across units
        with pytest.raises(SchemaConflictError) as info:
            normalize_source(src("drift"), files=list_files(str(tmp_path / "in")),
                             out_dir=str(tmp_path / "out"), exec_config=LOCAL2,
                             cfg=NormalizeConfig(target_shard_bytes=max(1, 400 // shards)))
        msg = str(info.value)
        assert "'year'" in msg and "a.jsonl:" in msg and "b.jsonl:" in msg
        assert "int64" in msg and "string" in msg
    # bare keeps only the core columns, so the conflict is gone
    res = normalize_source(src("drift", bare=True), files=list_files(str(tmp_path / "in")),
                           out_dir=str(tmp_path / "out"), exec_config=LOCAL2)
    assert list(res.columns) == ["id", "text", "source", "source_id", "url"]


def test_lone_surrogates_are_replaced_and_counted_everywhere(tmp_path):
    lines = ['{"text": "a \\ud800 b", "meta": {"k": "x \\udfff"}, "doc": "id-\\ud801"}',
             '{"text": "emoji \\ud83d\\ude00 pair is fine", "meta": {"k": "y"}, "doc": "2"}']
    write_jsonl(tmp_path / "in" / "s.jsonl", lines)
    out = tmp_path / "out"
    res = normalize_source(src("sur", id_field="doc"), files=list_files(str(tmp_path / "in")),
                           out_dir=str(out), exec_config=LOCAL2)
    assert res.counters["decode_replacements"] == 3
    rows = {r["source_id"]: r for r in all_rows(out, res.main_files)}
    assert rows["id-\ufffd"]["text"] == "a \ufffd b" and rows["id-\ufffd"]["meta"] == {"k": "x \ufffd"}
    assert rows["2"]["text"] == "emoji \U0001f600 pair is fine"


def test_random_bytes_spelled_as_json_escapes_are_rejected_as_binary(tmp_path):
    """Random bytes inside a JSON string are garbage however they are spelled: one code point a byte
    (about a quarter control characters, no U+FFFD) or lone surrogates (Python's surrogateescape). Both
    are `binary` rejects with file and line; good records around them and a stray control stay."""
    import random

    blob = random.Random(3).randbytes(3000)
    rows = [{"text": f"good document {i} with ordinary words"} for i in range(300)]
    rows[100] = {"text": blob.decode("latin-1")}
    rows[200] = {"text": blob.decode("utf-8", "surrogateescape")}
    rows[250] = {"text": "a bell \x07 and a NUL \x00 inside real prose"}
    write_jsonl(tmp_path / "in" / "mixed.jsonl", rows)
    out = tmp_path / "out"
    res = normalize_source(src("mixed"), files=list_files(str(tmp_path / "in")), out_dir=str(out),
                           exec_config=LOCAL2)
    assert res.rejects_by_reason == {"binary": 2} and res.counters["records_out"] == 298
    rejects = pq.read_table(out / res.rejects_files[0]).to_pylist()
    assert [(r["file"], r["line"], r["reason"]) for r in rejects] == [("mixed.jsonl", 101, "binary"),
                                                                        ("mixed.jsonl", 201, "binary")]
    assert "control_fraction 0.1" in rejects[0]["detail"] and "binary_fraction 0.3" in rejects[1]["detail"]
    assert res.counters["control_chars"] == 2 and res.counters["decode_replacements"] == 0
    check_invariants(out, res)


def test_control_fraction_bounds_control_characters_alone():
    text = "abcdefghi\x01"  # 10% controls: at the bound, kept and counted
    stats = Counter()
    assert clean_record(raw({"text": text}), SPEC, CFG, stats)[3]["text"] == text and stats["control_chars"] == 1
    rej = clean_record(raw({"text": text}, line=4), SPEC, NormalizeConfig(control_fraction=0.05), Counter())
    assert isinstance(rej, Reject) and rej.reason == "binary" and rej.line == 4
    fifth = "abcdefgh\x01\x01"  # 20%: a reject by default, kept when control_fraction is off (1)
    assert isinstance(clean_record(raw({"text": fifth}), SPEC, CFG, Counter()), Reject)
    assert clean_record(raw({"text": fifth}), SPEC, NormalizeConfig(control_fraction=1), Counter())[3]["text"] == fifth
    with pytest.raises(ValueError, match="control_fraction"):
        NormalizeConfig(control_fraction=1.5)


def test_dedup_none_keeps_every_copy(tmp_path):
    write_jsonl(tmp_path / "in" / "x.jsonl", [{"text": "same"}] * 3 + [{"text": "other"}])
    out = tmp_path / "out"
    res = normalize_source(src("keep", dedup="none"), files=list_files(str(tmp_path / "in")),
                           out_dir=str(out), exec_config=LOCAL2)
    assert (res.counters["records_out"], res.counters["dups"]) == (4, 0)
    rows = all_rows(out, res.main_files)
    assert [r["source_id"] for r in rows if r["text"] == "same"] == ["x.jsonl:1", "x.jsonl:2", "x.jsonl:3"]


# ------------------------------------------------------------------------------------------------ other formats


def test_parquet_row_group_split_drift_and_conflict(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    n = 400
    pq.write_table(pa.table({"body": [f"first {i} " + "pad " * 30 for i in range(n)], "key": list(range(n)),
                             "note": pa.nulls(n, pa.null())}), d / "a.parquet", row_group_size=50)
    pq.write_table(pa.table({"body": [f"second {i}" for i in range(50)] + ["first 3 " + "pad " * 30],
                             "key": list(range(1000, 1051)), "note": ["x"] * 51}), d / "b.parquet")
    files = list_files(str(d))
    out = tmp_path / "out"
    cfg = NormalizeConfig(input_shard_bytes=8192, target_shard_bytes=16384)
    res = normalize_source(src("pq", "parquet", text_field="body", id_field="key"), files=files,
                           out_dir=str(out), cfg=cfg, exec_config=LOCAL2)
    check_invariants(out, res)
    assert res.counters["records_in"] == 451 and res.counters["dups"] == 1
    assert res.columns["note"] == "string"  # null-typed in a.parquet, string in b.parquet
    rows = {r["source_id"]: r for r in all_rows(out, res.main_files)}
    assert rows["3"]["text"].startswith("first 3") and rows["1000"]["note"] == "x" and rows["5"]["note"] is None
    dup = all_rows(out, res.dups_files)[0]
    assert dup["source_id"] == "1050"
    # bare reads only the needed columns
    res_bare = normalize_source(src("pq", "parquet", text_field="body", bare=True), files=files,
                                out_dir=str(tmp_path / "bare"), cfg=cfg, exec_config=LOCAL2)
    assert list(res_bare.columns) == ["id", "text", "source", "source_id", "url"]
    assert all_rows(tmp_path / "bare", res_bare.main_files)[0]["source_id"].split(":")[0] in ("a.parquet",
                                                                                             "b.parquet")
    # a real conflict is found from the footers, before any work, naming both files
    pq.write_table(pa.table({"body": ["c"], "key": [1], "note": [3]}), d / "c.parquet")
    with pytest.raises(SchemaConflictError, match=r"'note'.*b\.parquet.*c\.parquet"):
        normalize_source(src("pq", "parquet", text_field="body"), files=list_files(str(d)),
                         out_dir=str(out), cfg=cfg, exec_config=LOCAL2)


def test_text_source_code_round_trip(tmp_path):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = list_files(str(stdlib / "json" / "*.py"))
    assert len(files) >= 3
    out = tmp_path / "out"
    res = normalize_source(src("code", "text"), files=files, out_dir=str(out), exec_config=LOCAL2)
    check_invariants(out, res)
    rows = {r["source_id"]: r for r in all_rows(out, res.main_files)}
    assert set(rows) == {Path(f.path).name for f in files}
    for f in files:
        expect, _ = compact_whitespace(Path(f.path).read_text(encoding="utf-8"), 128)
        assert rows[Path(f.path).name]["text"] == expect
    with pytest.raises(ValueError, match="text_field"):
        normalize_source(src("code", "text", text_field="body"), files=files, out_dir=str(out))


def test_html_pages_end_to_end(tmp_path):
    d = tmp_path / "site"
    (d / "blog").mkdir(parents=True)
    (d / "index.html").write_text(PAGE.format(body="Welcome to the index page of the site. " * 4))
    (d / "blog" / "post.html").write_text(PAGE.format(body="A blog post about normalizing text. " * 4)
                                          .replace("https://example.org/page", "https://example.org/post"))
    (d / "blog" / "copy.html").write_text(PAGE.format(body="A blog post about normalizing text. " * 4))
    (d / "empty.html").write_text("<html><head><title>Nothing</title></head><body></body></html>")
    out = tmp_path / "out"
    res = normalize_source(src("site", "html"), files=list_files(str(d)), out_dir=str(out),
                           exec_config=LOCAL2)
    check_invariants(out, res)
    c = res.counters
    assert (c["records_in"], c["records_out"], c["dups"], c["empty_dropped"]) == (4, 2, 1, 1)
    rows = {r["source_id"]: r for r in all_rows(out, res.main_files)}
    assert set(rows) == {"blog/copy.html", "index.html"}  # copy.html sorts before post.html: first copy
    assert rows["index.html"]["title"] == "A test page"
    assert rows["index.html"]["url"] == "https://example.org/page"
    assert "Welcome to the index page" in rows["index.html"]["text"]
    assert all_rows(out, res.dups_files)[0]["source_id"] == "blog/post.html"
    assert res.columns["title"] == "string"


def test_warc_end_to_end(tmp_path):
    d = tmp_path / "crawl"
    d.mkdir()
    records = sample_warc_records()
    (d / "00.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in records))
    members = [gzip.compress(r) for r in records[1:3]] + [gzip.compress(records[6])]
    (d / "01.warc.gz").write_bytes(b"".join(members))  # page 6 again: a duplicate across files
    out = tmp_path / "out"
    res = normalize_source(src("cc", "warc"), files=list_files(str(d)), out_dir=str(out),
                           exec_config=LOCAL2)
    check_invariants(out, res)
    c = res.counters
    assert (c["records_in"], c["records_out"], c["dups"], c["warc_non_html_skipped"]) == (6, 5, 1, 2)
    rows = {r["url"]: r for r in all_rows(out, res.main_files)}
    assert set(rows) == {f"http://example.com/{i}" for i in (0, 3, 4, 5, 6)}
    assert rows["http://example.com/0"]["source_id"] == "<urn:uuid:00000000-0000-0000-0000-000000000000>"
    assert rows["http://example.com/0"]["title"] == "Page 0"
    assert "Content of page 6." in rows["http://example.com/6"]["text"]
    (dup,) = all_rows(out, res.dups_files)
    assert dup["url"] == "http://example.com/6" and dup["id"] == rows["http://example.com/6"]["id"]


def test_no_records_and_no_files_fail_clearly(tmp_path):
    d = tmp_path / "crawl"
    d.mkdir()
    (d / "x.warc.gz").write_bytes(gzip.compress(sample_warc_records()[2]))  # JSON only
    with pytest.raises(NormalizeError, match="no HTML response records"):
        normalize_source(src("cc", "warc"), files=list_files(str(d)), out_dir=str(tmp_path / "out"),
                         exec_config=LOCAL2)
    with pytest.raises(NormalizeError, match="no input files"):
        normalize_source(src("cc", "warc"), files=[FileInfo(str(d / ".x.warc.gz"), 1, ".x.warc.gz")],
                         out_dir=str(tmp_path / "out"))
    with pytest.raises(ValueError, match="unknown format"):
        normalize_source(src("cc", "csv"), files=list_files(str(d)), out_dir=str(tmp_path / "out"))


# ------------------------------------------------------------------------------------------------ writer internals


def test_build_table_sees_fields_that_appear_after_the_first_row():
    from datakit.normalize.schema import build_table

    rows = [{"id": "a", "text": "x", "source": "s", "source_id": None, "url": None},
            {"id": "b", "text": "y", "source": "s", "source_id": None, "url": None, "late": 3}]
    t = build_table(rows, [(0, 1), (0, 2)], None)
    assert t.column_names == ["id", "text", "source", "source_id", "url", "late"]
    assert t.column("late").to_pylist() == [None, 3]


def test_shard_writer_widens_schema_within_a_shard(tmp_path):
    from datakit.normalize.schema import ConflictFound
    from datakit.normalize.write import ShardParquet

    def row(i, **extra):
        return {"id": f"{i:032x}", "text": f"t{i}", "source": "s", "source_id": None, "url": None, **extra}

    examples = {}
    w = ShardParquet(str(tmp_path / "p.parquet"), None, examples)
    w.write([row(0, a=None), row(1, a=None)], [(0, 1), (0, 2)])  # a: null
    w.write([row(2, a=1), row(3)], [(0, 3), (0, 4)])  # a: int64, widened
    w.write([row(4, a=2.5, b={"k": 1})], [(1, 1)])  # a: double, b appears
    schema = w.close()
    assert str(schema.field("a").type) == "double" and schema.names[-2:] == ["a", "b"]
    pf = pq.ParquetFile(tmp_path / "p.parquet")
    assert pf.metadata.num_row_groups == 3
    assert pf.read().column("a").to_pylist() == [None, None, 1.0, None, 2.5]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    # a real conflict across batches names one example location of each type
    w = ShardParquet(str(tmp_path / "q.parquet"), None, {})
    w.write([row(0, a=1)], [(0, 7)])
    with pytest.raises(ConflictFound) as info:
        w.write([row(1, a="x")], [(2, 9)])
    w.abort()
    c = info.value.conflict
    assert (c.column, c.a, c.b) == ("a", ("int64", 0, 7), ("string", 2, 9))
    assert not (tmp_path / "q.parquet").exists()


def test_clear_outputs_removes_earlier_outputs_and_unit_records_only(tmp_path):
    from datakit.normalize.pipeline import _clear_outputs

    out = tmp_path / "step"
    for rel in ("outputs/main/unit-00000000000000aa.parquet", "outputs/dups/unit-00000000000000aa.parquet",
                "outputs/rejects/part-00000-of-00001.parquet", "units/main/unit-00000000000000bb.parquet",
                "units/rejects/unit-00000000000000bb.parquet", "keep-me.json"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("x")
    _clear_outputs(str(out))
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert left == ["keep-me.json"]


def test_byte_level_suspect_check_equals_the_character_regex():
    """clean_record screens texts by their UTF-8 bytes; that must flag exactly the texts the character
    class flags: every code point below 0x100, the neighbours of U+FFFD, and random mixtures. The same
    one-pass translation stands for the whitespace-run pre-check on every text it does not flag."""
    import random

    from datakit.normalize import clean as C

    def suspect(text: str) -> bool:
        data = text.encode()
        classes = data.translate(C._CLASSES)
        flagged = C._maybe_suspect(data, classes)
        if not flagged:
            for n in range(1, 4):
                assert (b" " * n in classes) == (b" " * n in data.translate(C._MAYBE_WS)), repr(text)
        return flagged

    singles = [chr(c) for c in range(0x100)] + [chr(c) for c in range(0xFFF0, 0x10000)] + ["\U0001F600", "é", "日"]
    for ch in singles:
        for text in (ch, "abc" + ch, ch + "日本 text", "Ünïcödé " + ch + " ok"):
            assert suspect(text) == (C._SUSPECT.search(text) is not None), repr(text)
    rng = random.Random(0)
    pool = "ab \n\t\r\x0b\x0c" + "".join(singles[:40]) + "\x7f\x80\x9f\xa0\xc2\xef\ufffd\ufffc\uffbd日本語é"
    for _ in range(20000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))
        assert suspect(text) == (C._SUSPECT.search(text) is not None), repr(text)
