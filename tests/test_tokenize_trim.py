"""Tokenize builds a part that lost, gained or changed a few documents (a takedown, an edit) from the
earlier build's shard of the same part name, encoding only the documents that shard lacks
(datakit/tokenize/trim.py), on real text: every file of the incremental cache (shards, markers, ledgers,
.stats.json, reuse.json, the documents' hashes) is byte for byte a from-scratch build's, including for a
document whose text changed under the same id; a part with more than half its documents new is encoded
whole."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datakit.core.layout import DocumentsDir, part_name
from datakit.shuffle import ExecConfig
from datakit.steps import verify
from datakit.tokenize import trim
from datakit.tokenize.fixtures import SCHEMA, doc_id, license_texts, stdlib_texts
from datakit.tokenize.tokenize_step import is_validation, tokenize_source
from datakit.tokenize.tokenizer import train_tokenizer

INLINE = ExecConfig(backend="inline")
FRACTION = 0.2

from trees import assert_same_tree


def _docs(texts: list[str]) -> list[tuple[str, str]]:
    """The texts' paragraphs as documents (many small ones: a takedown hits a few of them), as
    consolidate writes a part: (id, text), unique and sorted by id."""
    paragraphs = {p for t in texts for p in t.split("\n\n") if p.strip()}
    return sorted((doc_id(p), p) for p in paragraphs)


def _input_step(root, parts: list[list[tuple[str, str]]]) -> str:
    """A documents step dir with these parts and its outputs manifest (the reuse keys' content)."""
    main = DocumentsDir(str(root)).main
    os.makedirs(main)
    for i, docs in enumerate(parts):
        rows = [{"id": d, "text": t, "source": "mixed"} for d, t in docs]
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), os.path.join(main, part_name(i, len(parts))))
    verify.write_manifest(str(root))
    return str(root)




def _build(root, name: str, parts, tok: str, earlier: str | None = None, text_lineage: str | None = None):
    src = _input_step(root / f"in-{name}", parts)
    res = tokenize_source("mixed", src, str(root / f"cache-{name}"), tok, validation_fraction=FRACTION,
                          exec_config=INLINE, earlier=earlier, text_lineage=text_lineage)
    verify.write_manifest(res.out_dir)  # as the runner does
    return src, res


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("trim")
    licenses = license_texts()
    parts = [_docs(stdlib_texts(30_000, subdir="json")), _docs(stdlib_texts(30_000, subdir="email")),
             _docs(licenses[: len(licenses) // 3]), _docs(stdlib_texts(30_000, subdir="http"))]
    assert all(len(p) >= 30 for p in parts), [len(p) for p in parts]
    src, res = _build(root, "first", parts, _tokenizer(root, parts))
    return {"root": root, "parts": parts, "tok": res.out_dir + "/tokenizer.json", "earlier": res.out_dir}


def _tokenizer(root, parts) -> str:
    src = _input_step(root / "tok-in", parts)
    return train_tokenizer([src], str(root / "tok"), vocab_size=600, max_bytes=200_000)["path"]


def _takedown(docs: list[tuple[str, str]], every: int) -> list[tuple[str, str]]:
    """Remove the first and last document and every ``every``-th one (both splits are hit)."""
    return [d for n, d in enumerate(docs[1:-1]) if n % every]


def _incremental_and_fresh(built, name: str, parts):
    _, inc = _build(built["root"], f"inc-{name}", parts, built["tok"], earlier=built["earlier"])
    _, fresh = _build(built["root"], f"fresh-{name}", parts, built["tok"])
    return inc, fresh


def test_a_takedown_and_an_edit_splice_the_parts_and_equal_a_fresh_build(built):
    p = built["parts"]
    removed = [d for docs in (p[0], p[1], p[3]) for d in docs if d not in _takedown(docs, 3)]
    assert {is_validation(i, FRACTION) for i, _ in removed} == {True, False}
    edited = [*p[2][:1], (doc_id(p[2][1][1] + "\nedited"), p[2][1][1] + "\nedited"), *p[2][2:]]
    parts = [_takedown(p[0], 3), _takedown(p[1], 3), sorted(edited), _takedown(p[3], 3)]
    inc, fresh = _incremental_and_fresh(built, "takedown", parts)
    assert inc.counters["files/spliced"] == 4 and inc.counters["files/computed"] == 0, inc.counters
    assert inc.counters["files/reused"] == 0
    assert fresh.counters["files/spliced"] == 0 and fresh.counters["files/computed"] == 4
    assert inc.counters["tokenize/docs"] == fresh.counters["tokenize/docs"]
    assert_same_tree(inc.out_dir, fresh.out_dir)
    assert inc.splits == fresh.splits


def test_a_spliced_build_is_spliced_from_again(built):
    """The spliced shards' own document hashes are recorded: a second takedown splices from them."""
    p = built["parts"]
    first = [_takedown(d, 3) for d in p]
    _, inc1 = _build(built["root"], "gen1", first, built["tok"], earlier=built["earlier"])
    assert inc1.counters["files/spliced"] == 4, inc1.counters
    second = [_takedown(d, 2) for d in first]
    _, inc2 = _build(built["root"], "gen2", second, built["tok"], earlier=inc1.out_dir)
    assert inc2.counters["files/spliced"] == 4, inc2.counters
    _, fresh = _build(built["root"], "gen2-fresh", second, built["tok"])
    assert_same_tree(inc2.out_dir, fresh.out_dir)


def test_a_text_edited_under_the_same_id_is_encoded_alone(built):
    """Ids alone would take the earlier tokens of the edited document; the id+text hash does not, so that
    document (and a new one) are encoded, and the shard still equals a fresh build's."""
    p = built["parts"]
    docs = _takedown(p[0], 3)
    docs[0] = (docs[0][0], docs[0][1].replace("e", "E", 1))
    added = "A paragraph no earlier build had."
    docs = sorted([*docs, (doc_id(added), added)])
    inc, fresh = _incremental_and_fresh(built, "same-id", [docs, p[1], p[2], p[3]])
    assert inc.counters["files/spliced"] == 1 and inc.counters["files/computed"] == 0, inc.counters
    assert inc.counters["files/reused"] == 3
    assert_same_tree(inc.out_dir, fresh.out_dir)


def _shard_tokens(out_dir: str, split: str = "train") -> list[np.ndarray]:
    return [np.load(p) for p in sorted(glob.glob(f"{out_dir}/{split}/*tokens*.npy"))]


def test_a_takedown_is_cut_by_ids_alone_when_the_text_lineage_says_ids_decide_texts(built):
    """With a text lineage ("": an id is its text's content hash), parts that only lost documents are cut
    from the earlier shards by their ids, equal to a fresh build. Proof that no text was read: a text
    changed under its id (what the lineage rules out) keeps its earlier tokens, where a build without a
    lineage reads the texts and encodes it anew."""
    p, root = built["parts"], built["root"]
    _, first = _build(root, "lineage-first", p, built["tok"], text_lineage="")
    taken = [_takedown(d, 3) for d in p]
    _, inc = _build(root, "lineage-inc", taken, built["tok"], earlier=first.out_dir, text_lineage="")
    _, fresh = _build(root, "lineage-fresh", taken, built["tok"], text_lineage="")
    assert inc.counters["files/spliced"] == 4 and inc.counters["files/computed"] == 0, inc.counters
    assert_same_tree(inc.out_dir, fresh.out_dir)
    forged = [[(taken[0][0][0], taken[0][0][1] + " changed"), *taken[0][1:]], *taken[1:]]
    _, trusted = _build(root, "lineage-forged", forged, built["tok"], earlier=first.out_dir, text_lineage="")
    assert trusted.counters["files/spliced"] == 4, trusted.counters
    assert all((a == b).all() for a, b in zip(_shard_tokens(trusted.out_dir), _shard_tokens(inc.out_dir)))
    _, checked = _build(root, "no-lineage-forged", forged, built["tok"], earlier=built["earlier"])
    _, forged_fresh = _build(root, "forged-fresh", forged, built["tok"])
    assert_same_tree(checked.out_dir, forged_fresh.out_dir)


def test_a_split_that_lost_nothing_is_linked_from_the_earlier_build(built):
    """A takedown of training documents only leaves every part's validation split as it was: its token and
    offsets files are the earlier build's, linked (the same file), not written again, and the cache still
    equals a fresh build byte for byte; the train split, cut, is written."""
    p = built["parts"]
    taken = [[d for n, d in enumerate(docs) if is_validation(d[0], FRACTION) or n % 3] for docs in p]
    assert all(len(t) < len(d) for t, d in zip(taken, p))
    inc, fresh = _incremental_and_fresh(built, "train-only", taken)
    assert inc.counters["files/spliced"] == 4, inc.counters
    assert_same_tree(inc.out_dir, fresh.out_dir)
    for split, linked in (("validation", True), ("train", False)):
        paths = sorted(glob.glob(f"{inc.out_dir}/{split}/*.npy"))
        assert len(paths) == 8, paths  # tokens and offsets of 4 shards
        for path in paths:
            earlier = os.path.join(built["earlier"], split, os.path.basename(path))
            assert os.path.samefile(path, earlier) is linked, path


def test_another_text_lineage_is_never_cut_from(built):
    """An earlier build under another lineage (say other PII settings): none of its shards is taken or cut."""
    p, root = built["parts"], built["root"]
    _, first = _build(root, "lineage-a", p, built["tok"], text_lineage="a")
    taken = [_takedown(d, 3) for d in p]
    _, other = _build(root, "lineage-b", taken, built["tok"], earlier=first.out_dir, text_lineage="b")
    assert other.counters["files/spliced"] == 0 and other.counters["files/computed"] == 4, other.counters
    _, same = _build(root, "lineage-b-p", p, built["tok"], earlier=first.out_dir, text_lineage="b")
    assert same.counters["files/reused"] == 0 and same.counters["files/computed"] == 4, same.counters


def test_a_part_mostly_new_is_encoded_whole(built):
    p = built["parts"]
    third = len(p[0]) // 3
    docs = sorted([*p[0][:third], *((doc_id(t + " v2"), t + " v2") for _, t in p[0][third:])])
    inc, fresh = _incremental_and_fresh(built, "mostly-new", [docs, p[1], p[2], p[3]])
    assert inc.counters["files/spliced"] == 0 and inc.counters["files/computed"] == 1, inc.counters
    assert_same_tree(inc.out_dir, fresh.out_dir)


def test_splice_takes_earlier_runs_and_fresh_documents_in_order():
    tokens = np.array([1, 1, 2, 2, 2, 3, 4, 4], dtype="<u2")
    offsets = np.array([0, 2, 5, 6, 8], dtype="<i8")
    fresh, fresh_offsets = np.array([9, 8, 8], dtype="<u2"), np.array([0, 1, 3])
    none = np.zeros(1, np.int64)
    out, off = trim.splice(tokens, offsets, np.array([0, 2, 3]), fresh[:0], none)
    assert out.tolist() == [1, 1, 3, 4, 4] and off.tolist() == [0, 2, 3, 5] and out.dtype == tokens.dtype
    out, off = trim.splice(tokens, offsets, np.array([-1, 1, -1]), fresh, fresh_offsets)
    assert out.tolist() == [9, 2, 2, 2, 8, 8] and off.tolist() == [0, 1, 4, 6]
    out, off = trim.splice(tokens, offsets, np.array([], dtype=np.int64), fresh[:0], none)
    assert out.tolist() == [] and out.dtype == tokens.dtype and off.tolist() == [0]
    with pytest.raises(ValueError, match="2 documents to encode, 1 encoded"):
        trim.splice(tokens, offsets, np.array([-1, -1]), fresh[:1], np.array([0, 1]))
    rng = np.random.default_rng(7)  # run by run equals document by document, empty documents too
    lengths = rng.integers(0, 6, 500)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype("<i8")
    tokens = rng.integers(0, 2**16, int(offsets[-1])).astype("<u2")
    for drop, add in ((0.0, 0.0), (0.01, 0.0), (0.5, 0.1), (1.0, 0.0), (0.2, 0.5)):
        rows = np.flatnonzero(rng.random(500) >= drop)
        rows = np.where(rng.random(len(rows)) < add, -1, rows)
        fresh_lens = rng.integers(0, 4, int((rows < 0).sum()))
        fresh_offsets = np.concatenate([[0], np.cumsum(fresh_lens)])
        fresh = rng.integers(0, 2**16, int(fresh_offsets[-1])).astype("<u2")
        out, off = trim.splice(tokens, offsets, rows, fresh, fresh_offsets)
        want, k = [], 0
        for r in rows.tolist():
            if r >= 0:
                want.append(tokens[offsets[r]:offsets[r + 1]])
            else:
                want.append(fresh[fresh_offsets[k]:fresh_offsets[k + 1]])
                k += 1
        assert out.tolist() == (np.concatenate(want).tolist() if want else []) and out.dtype == tokens.dtype
        assert off.tolist() == [0, *np.cumsum([len(w) for w in want]).tolist()]


def test_split_rows_maps_documents_to_their_split_rows_and_marks_new_ones():
    ids = [f"doc-{n:03d}" for n in range(40)]
    texts = [f"text {n}" for n in range(40)]
    old = trim.doc_hashes(pa.array(ids), pa.array(texts))
    val = np.array([is_validation(i, 0.3) for i in ids])
    assert val.any() and not val.all()
    assert (trim.validation_mask(old[:, 0], 0.3) == val).all()
    within = np.where(val, np.cumsum(val) - 1, np.cumsum(~val) - 1)
    keep_ids = [n for n in range(40) if n % 4]
    rows = trim.split_rows(old, old[keep_ids], 0.3)
    assert rows["train"].tolist() == [int(within[n]) for n in keep_ids if not val[n]]
    assert rows["validation"].tolist() == [int(within[n]) for n in keep_ids if val[n]]
    edited = trim.doc_hashes(pa.array(["doc-001"]), pa.array(["edited"]))  # same id, other text: new
    got = trim.split_rows(old, edited, 0.3)
    assert got["validation" if val[1] else "train"].tolist() == [-1]
    assert trim.split_rows(old[[0, 0]], old[:1], 0.3) is None  # the same hash twice: ambiguous


def test_doc_hashes_read_from_arrow_are_the_hashes_of_the_utf8_bytes():
    """The hashes come from the arrays' buffers, not from Python strings: on a sliced array, a large_string
    one and non-ASCII text they are still xxh3 of (salt, id) and (id, NUL, text) as UTF-8 bytes, then
    the text's UTF-8 byte count; `id_hashes` is the first column alone."""
    import xxhash

    with open("/usr/share/common-licenses/GPL-3", encoding="utf-8") as f:
        texts = [p for p in f.read().split("\n\n") if p.strip()][:60] + ["Grüße, 東京 — ünïcödé", ""]
    ids = [f"id-{n}-é" for n in range(len(texts))]
    want = np.array([[xxhash.xxh3_64_intdigest(trim.SPLIT_SALT + i.encode()),
                      xxhash.xxh3_64_intdigest(i.encode() + b"\x00" + t.encode()), len(t.encode())]
                     for i, t in zip(ids, texts)], dtype="<u8")
    assert (trim.doc_hashes(pa.array(ids), pa.array(texts)) == want).all()
    assert (trim.doc_hashes(pa.array(ids, pa.large_string()), pa.array(texts, pa.large_string())) == want).all()
    sliced = trim.doc_hashes(pa.array(["x"] + ids).slice(1), pa.array(["y"] + texts).slice(1))
    assert (sliced == want).all()
    assert trim.doc_hashes(pa.array([], pa.string()), pa.array([], pa.string())).shape == (0, 3)
    assert (trim.id_hashes(pa.array(["x"] + ids).slice(1)) == want[:, 0]).all()


def test_a_build_from_before_trimming_is_taken_and_its_hashes_written(built, tmp_path):
    """An earlier build that recorded no document hashes: its shards are still taken, and this build
    hashes the parts' documents itself, so its files equal a fresh build's (hashes included)."""
    import json
    import shutil

    earlier = str(tmp_path / "old")
    shutil.copytree(built["earlier"], earlier)
    shutil.rmtree(os.path.join(earlier, "reuse", "ids"))
    with open(os.path.join(earlier, "reuse.json")) as f:
        record = json.load(f)
    for unit in record["keys"].values():
        unit["files"] = [p for p in unit["files"] if not p.startswith(trim.IDS_DIR)]
    with open(os.path.join(earlier, "reuse.json"), "w") as f:
        json.dump(record, f)
    verify.write_manifest(earlier)
    _, inc = _build(tmp_path, "inc", built["parts"], built["tok"], earlier=earlier)
    assert inc.counters["files/reused"] == 4, inc.counters
    _, fresh = _build(tmp_path, "fresh", built["parts"], built["tok"])
    assert_same_tree(inc.out_dir, fresh.out_dir)
