"""Tokenize reuses per input part across builds (datakit/tokenize/tokenize_step.py, steps/reuse.py), on real
text: after one part is edited, one removed and one added, a rebuild that may take from the earlier build
encodes only the changed and new parts, and every file it writes (shards under their new names, markers,
ledgers, .stats.json, reuse.json) is byte for byte a from-scratch build's."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datakit.core.layout import DocumentsDir, part_name
from datakit.shuffle import ExecConfig
from datakit.steps import verify
from datakit.tokenize.fixtures import SCHEMA, doc_id, license_texts, stdlib_texts
from datakit.tokenize.tokenize_step import tokenize_source
from datakit.tokenize.tokenizer import train_tokenizer

INLINE = ExecConfig(backend="inline")

from trees import assert_same_tree, tree_files


def _groups() -> dict[str, list[str]]:
    """Five groups of real documents, one input part each."""
    licenses = license_texts()
    return {"json": stdlib_texts(120_000, subdir="json"), "email": stdlib_texts(120_000, subdir="email"),
            "licenses": licenses[: len(licenses) // 2], "http": stdlib_texts(120_000, subdir="http"),
            "urllib": stdlib_texts(120_000, subdir="urllib")}


def _input_step(root, parts: list[list[str | None]]) -> str:
    """A documents step dir with these parts (ids sorted, as consolidate writes them; a None text is a
    bad row) and its outputs manifest, which holds the parts' xxh3 the reuse keys are made of."""
    main = DocumentsDir(str(root)).main
    os.makedirs(main)
    for i, texts in enumerate(parts):
        rows = sorted(({"id": doc_id(t or f"bad {n}"), "text": t, "source": "mixed"} for n, t in enumerate(texts)),
                      key=lambda r: r["id"])
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), os.path.join(main, part_name(i, len(parts))))
    verify.write_manifest(str(root))
    return str(root)






@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("reuse")
    g = _groups()
    first = _input_step(root / "in1", [g["json"], g["email"], g["licenses"], g["http"]])
    tok = train_tokenizer([first], str(root / "tok"), vocab_size=600, max_bytes=300_000)["path"]
    res = tokenize_source("mixed", first, str(root / "cache1"), tok, validation_fraction=0.2, exec_config=INLINE)
    assert res.counters["files/computed"] == 4 and res.counters["files/reused"] == 0
    verify.write_manifest(res.out_dir)  # as the runner does: what reuse checks a taken file against
    return {"root": root, "groups": g, "tok": tok, "earlier": str(root / "cache1")}


def _rebuild(built, name: str, parts: list[list[str]]) -> tuple:
    """The incremental build (taking from the earlier one) and a fresh build of the same new input."""
    src = _input_step(built["root"] / f"in-{name}", parts)
    inc = tokenize_source("mixed", src, str(built["root"] / f"inc-{name}"), built["tok"], validation_fraction=0.2,
                          exec_config=INLINE, earlier=built["earlier"])
    fresh = tokenize_source("mixed", src, str(built["root"] / f"fresh-{name}"), built["tok"],
                            validation_fraction=0.2, exec_config=INLINE)
    return inc, fresh


def test_edit_remove_add_encodes_only_what_changed_and_equals_a_fresh_build(built):
    g = built["groups"]
    edited = [g["email"][0] + "\n# one edited line\n", *g["email"][1:]]
    # json stays part 0; email is edited; licenses is removed; http moves from part 3 to part 2; urllib is new
    inc, fresh = _rebuild(built, "edit", [g["json"], edited, g["http"], g["urllib"]])
    # urllib is encoded; email's shard is spliced (its one edited document encoded, the rest taken)
    assert (inc.counters["files/computed"], inc.counters["files/spliced"], inc.counters["files/reused"]) == \
        (1, 1, 2), inc.counters
    assert fresh.counters["files/computed"] == 4
    assert_same_tree(inc.out_dir, fresh.out_dir)
    assert inc.splits == fresh.splits
    # http's shard was taken (a hard link to the earlier build's file), under its new index; its done
    # marker names its new input part, so it is written, not linked
    for split in ("train", "validation"):
        old = os.path.join(built["earlier"], split, "shard-00003-of-00004.tokens.npy")
        new = os.path.join(inc.out_dir, split, "shard-00002-of-00004.tokens.npy")
        assert os.stat(old).st_ino == os.stat(new).st_ino
        marker = {p: p[: -len(".tokens.npy")] + ".json" for p in (old, new)}
        assert os.stat(marker[old]).st_ino != os.stat(marker[new]).st_ino


def test_one_edited_part_is_the_one_part_not_taken(built):
    g = built["groups"]
    edited = [*g["licenses"][:-1], g["licenses"][-1].replace("the", "THE", 1)]
    inc, fresh = _rebuild(built, "one", [g["json"], g["email"], edited, g["http"]])
    # this half of the licenses holds one text twice: its shard cannot say which copy is which, so it is
    # encoded, not spliced; either way it is the one part not taken
    assert (inc.counters["files/computed"] + inc.counters["files/spliced"], inc.counters["files/reused"]) == \
        (1, 3), inc.counters
    assert inc.counters["tokenize/docs"] == fresh.counters["tokenize/docs"]
    assert_same_tree(inc.out_dir, fresh.out_dir)
    # a taken shard under the same name and input keeps the earlier build's done markers (linked, not
    # written again); the edited part's markers are new
    for split in ("train", "validation"):
        same = [os.stat(os.path.join(d, split, f"shard-0000{i}-of-00004.json")).st_ino
                for i in range(4) for d in (built["earlier"], inc.out_dir)]
        assert [same[2 * i] == same[2 * i + 1] for i in range(4)] == [True, True, False, True], split


def test_a_changed_part_count_renames_every_taken_shard(built):
    g = built["groups"]
    inc, fresh = _rebuild(built, "count", [g["http"], g["json"], g["urllib"]])  # 4 parts -> 3, reordered
    assert inc.counters["files/computed"] == 1 and inc.counters["files/reused"] == 2, inc.counters
    assert_same_tree(inc.out_dir, fresh.out_dir)
    assert not any("of-00004" in rel for rel in tree_files(inc.out_dir))
    # the taken shards' markers name their new places, so they are written, not linked: noted with their
    # digests (`fsio.write_noted`), as every file the build wrote whole is, for the manifest to take
    from datakit.core import fsio, publish_log

    noted = {w.path: w.xxh3_128 for w in publish_log.take_under(inc.out_dir)}
    markers = [p for rel, p in tree_files(inc.out_dir).items() if rel.endswith("-of-00003.json")]
    assert len(markers) == 6 and all(noted[p] == fsio.xxh3_file(p) for p in markers)


def test_a_part_with_bad_rows_is_never_taken(built, tmp_path):
    """Its marker names the input file's path, which is not content: it is encoded on every build."""
    g = built["groups"]
    first = _input_step(tmp_path / "in1", [g["json"], [*g["email"], None]])
    res = tokenize_source("mixed", first, str(tmp_path / "c1"), built["tok"], exec_config=INLINE)
    assert res.bad_records == 1
    verify.write_manifest(res.out_dir)
    src = _input_step(tmp_path / "in2", [g["json"], [*g["email"], None]])
    inc = tokenize_source("mixed", src, str(tmp_path / "inc"), built["tok"], exec_config=INLINE, earlier=res.out_dir)
    assert inc.counters["files/computed"] == 1 and inc.counters["files/reused"] == 1, inc.counters
    fresh = tokenize_source("mixed", src, str(tmp_path / "fresh"), built["tok"], exec_config=INLINE)
    assert_same_tree(inc.out_dir, fresh.out_dir)


def test_a_damaged_earlier_shard_is_encoded_again(built, tmp_path):
    g = built["groups"]

    earlier = str(tmp_path / "earlier")
    shutil.copytree(built["earlier"], earlier)  # a copy: the other tests' earlier build stays whole
    assert "reuse.json" in os.listdir(earlier)
    victim = os.path.join(earlier, "train", "shard-00000-of-00004.tokens.npy")
    with open(victim, "r+b") as f:  # same size, one token byte changed
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0x01]))
    src = _input_step(tmp_path / "in", [g["json"], g["email"]])
    inc = tokenize_source("mixed", src, str(tmp_path / "inc"), built["tok"], validation_fraction=0.2,
                          exec_config=INLINE, earlier=earlier)
    assert inc.counters["files/computed"] == 1 and inc.counters["files/reused"] == 1, inc.counters
    fresh = tokenize_source("mixed", src, str(tmp_path / "fresh"), built["tok"], validation_fraction=0.2,
                            exec_config=INLINE)
    assert_same_tree(inc.out_dir, fresh.out_dir)
