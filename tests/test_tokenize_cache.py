"""tokenize_source -> token cache: round trip, exact totals, determinism, resume, refusal to load
unfinished caches, bad records, uint32 vocabularies, fsspec output."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datakit.shuffle import ExecConfig
from datakit.tokenize.cache import CacheNotReady, open_cache
from datakit.tokenize.fixtures import SCHEMA, doc_id, license_texts, stdlib_texts, write_source
from datakit.core.arrow_numpy import byte_lengths as _byte_lengths
from datakit.tokenize.tokenize_step import SPLITS, is_validation, tokenize_source
from datakit.tokenize.tokenizer import EOS_TOKEN, load_tokenizer, train_tokenizer

INLINE = ExecConfig(backend="inline")

from trees import assert_same_tree


def _special_docs() -> list[str]:
    return [
        "",  # an empty document still gets its EOS
        f"a document that mentions {EOS_TOKEN} and <|pad|> as plain text",
        "ünïcödé — 日本語のテキスト — emoji 🙂🚀 — combining é",
        "   leading and trailing whitespace\n\n\t  ",
        ("lorem ipsum dolor sit amet " * 2000) + ("x" * 23_000) + "\n" + ("tail " * 900),  # > 10k chars
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    texts = stdlib_texts(500_000, subdir="json") + stdlib_texts(400_000, subdir="email") + license_texts()[:6]
    texts += _special_docs()
    src = str(root / "src")
    write_source(src, texts, 4, source="mixed")
    tok = train_tokenizer([src], str(root / "tok"), vocab_size=700, max_bytes=400_000)
    return {"root": root, "src": src, "tok": tok["path"], "identity": tok}


@pytest.fixture(scope="module")
def built(corpus):
    out = str(corpus["root"] / "cache-inline")
    res = tokenize_source("mixed", corpus["src"], out, corpus["tok"], validation_fraction=0.2, exec_config=INLINE)
    return res


def _parquet_rows(src: str) -> list[list[dict]]:
    parts = sorted(os.listdir(os.path.join(src, "outputs", "main")))
    return [pq.read_table(os.path.join(src, "outputs", "main", p)).to_pylist() for p in parts]






def test_layout_and_ledger(built, corpus):
    assert built.num_shards == 4 and built.reused_shards == 0 and built.bad_records == 0
    for split in SPLITS:
        d = built.split_dir(split)
        names = sorted(os.listdir(d))
        assert "ledger.json" in names and ".stats.json" in names
        assert "shard-00000-of-00004.tokens.npy" in names and "shard-00003-of-00004.offsets.npy" in names
        assert not [n for n in names if n.startswith(".tmp")]
        ledger = json.load(open(os.path.join(d, "ledger.json")))
        assert ledger["finished"] is True and ledger["split"] == split and ledger["sources"] == ["mixed"]
        assert ledger["dtype"] == "uint16"
        assert ledger["tokenizer"] == {k: corpus["identity"][k] for k in ("sha256", "vocab_size", "bos_id", "eos_id")}
        assert "/" not in json.dumps([s["tokens_file"] for s in ledger["shards"]])  # relative names only
        tokens = np.load(os.path.join(d, "shard-00000-of-00004.tokens.npy"), mmap_mode="r")
        assert isinstance(tokens, np.memmap) and tokens.dtype == np.dtype("<u2")
    assert os.path.exists(os.path.join(built.out_dir, "tokenizer.json"))


def test_round_trip_every_document_decodes_to_its_text(built, corpus):
    tok, ident = load_tokenizer(corpus["tok"])
    caches = {s: open_cache(built.split_dir(s)) for s in SPLITS}
    seen = {s: 0 for s in SPLITS}
    long_docs = 0
    for part in _parquet_rows(corpus["src"]):
        for row in part:
            split = "validation" if is_validation(row["id"], 0.2) else "train"
            ids = caches[split].doc_tokens(seen[split])
            seen[split] += 1
            assert ids[-1] == ident.eos_id and ident.eos_id not in ids[:-1]
            assert tok.decode(ids[:-1].tolist(), skip_special_tokens=False) == row["text"]
            long_docs += len(row["text"]) > 10_000
    assert seen == {s: caches[s].total_docs for s in SPLITS}
    assert long_docs >= 2  # the split-at-whitespace path was exercised
    assert seen["validation"] > 0.1 * sum(seen.values())


def test_totals_match_shards_duckdb_and_numpy(built, corpus):
    glob = os.path.join(corpus["src"], "outputs", "main", "*.parquet")
    con = duckdb.connect()
    n_rows, n_bytes = con.execute(f"SELECT count(*), sum(strlen(text)) FROM read_parquet('{glob}')").fetchall()[0]
    docs = bytes_ = 0
    for split in SPLITS:
        d = built.split_dir(split)
        ledger = json.load(open(os.path.join(d, "ledger.json")))
        stats = json.load(open(os.path.join(d, ".stats.json")))
        assert stats == {k: ledger[k] for k in ("total_tokens", "total_docs", "total_bytes")}
        for k, col in (("total_docs", "rows"), ("total_tokens", "tokens"), ("total_bytes", "bytes")):
            assert ledger[k] == sum(s[col] for s in ledger["shards"])
        # NumPy recount from the files themselves
        n_tok = n_docs = n_eos = 0
        for s in ledger["shards"]:
            toks = np.load(os.path.join(d, s["tokens_file"]), mmap_mode="r")
            offs = np.load(os.path.join(d, s["offsets_file"]))
            assert offs[0] == 0 and offs[-1] == len(toks) and (np.diff(offs) >= 1).all()
            n_tok += len(toks)
            n_docs += len(offs) - 1
            n_eos += int((toks == ledger["tokenizer"]["eos_id"]).sum())
        assert (n_tok, n_docs, n_eos) == (ledger["total_tokens"], ledger["total_docs"], ledger["total_docs"])
        cache = open_cache(d)
        assert (cache.total_tokens, cache.total_docs, cache.total_bytes) == (n_tok, n_docs, ledger["total_bytes"])
        docs += ledger["total_docs"]
        bytes_ += ledger["total_bytes"]
    assert (docs, bytes_) == (n_rows, n_bytes)
    # per split, bytes equal DuckDB's sum over the documents routed there
    val_ids = [r["id"] for p in _parquet_rows(corpus["src"]) for r in p if is_validation(r["id"], 0.2)]
    con.register("val", pa.table({"id": val_ids}))
    query = f"SELECT sum(strlen(text)) FROM read_parquet('{glob}') WHERE id IN (SELECT id FROM val)"
    val_bytes = con.execute(query).fetchall()[0][0]
    assert val_bytes == open_cache(built.split_dir("validation")).total_bytes


def test_byte_identical_across_backends_and_worker_counts(built, corpus):
    out = str(corpus["root"] / "cache-local2")
    res = tokenize_source("mixed", corpus["src"], out, corpus["tok"], validation_fraction=0.2,
                          exec_config=ExecConfig(backend="local", max_workers=2))
    assert res.splits == {s: {**built.splits[s], "path": res.splits[s]["path"]} for s in SPLITS}
    assert_same_tree(built.out_dir, out)


def test_byte_identical_for_any_batch_size(built, corpus, tmp_path):
    out = str(tmp_path / "small-batches")
    tokenize_source("mixed", corpus["src"], out, corpus["tok"], validation_fraction=0.2, exec_config=INLINE,
                    batch_bytes=16 << 10, threads=1)
    assert_same_tree(built.out_dir, out)


def test_rerun_reuses_everything_and_rewrites_identical_bytes(built, corpus, tmp_path):
    out = str(tmp_path / "c")
    shutil.copytree(built.out_dir, out)
    res = tokenize_source("mixed", corpus["src"], out, corpus["tok"], validation_fraction=0.2, exec_config=INLINE)
    assert res.reused_shards == 4 and res.counters.get("tokenize/shards_reused") == 4
    assert_same_tree(built.out_dir, out)


def test_interrupted_build_refuses_to_load_then_resumes_to_equal_a_clean_build(built, corpus, tmp_path):
    src = str(tmp_path / "src")
    shutil.copytree(corpus["src"], src)
    part2 = os.path.join(src, "outputs", "main", "part-00002-of-00004.parquet")
    good = open(part2, "rb").read()
    with open(part2, "wb") as f:  # a part that cannot be read makes the build crash on shard 2
        f.write(b"PAR1 this is not parquet" + b"\0" * (len(good) - 24))
    out = str(tmp_path / "cache")
    with pytest.raises(Exception, match="part-00002-of-00004"):
        tokenize_source("mixed", src, out, corpus["tok"], validation_fraction=0.2, exec_config=INLINE)
    for split in SPLITS:
        with pytest.raises(CacheNotReady, match="unfinished"):
            open_cache(os.path.join(out, split))
        assert not [n for n in os.listdir(os.path.join(out, split)) if n.startswith(".tmp")]
        assert not os.path.exists(os.path.join(out, split, "shard-00002-of-00004.json"))
    done0 = os.path.join(out, "train", "shard-00000-of-00004.tokens.npy")
    mtime0 = os.stat(done0).st_mtime_ns
    with open(part2, "wb") as f:
        f.write(good)
    res = tokenize_source("mixed", src, out, corpus["tok"], validation_fraction=0.2, exec_config=INLINE)
    assert res.reused_shards >= 2  # 0 and 1 finished before the crash (3 too, if it ran before the retries)
    assert os.stat(done0).st_mtime_ns == mtime0
    assert_same_tree(built.out_dir, out)
    assert open_cache(os.path.join(out, "train")).total_tokens == built.splits["train"]["tokens"]


def test_changed_tokenizer_rebuilds_instead_of_reusing(built, corpus, tmp_path):
    out = str(tmp_path / "c")
    shutil.copytree(built.out_dir, out)
    tok2 = train_tokenizer([corpus["src"]], str(tmp_path / "tok2"), vocab_size=650, max_bytes=200_000)
    res = tokenize_source("mixed", corpus["src"], out, tok2["path"], validation_fraction=0.2, exec_config=INLINE)
    assert res.reused_shards == 0
    cache = open_cache(res.split_dir("train"))
    assert cache.tokenizer_identity["sha256"] == tok2["sha256"] != corpus["identity"]["sha256"]
    tok, _ = load_tokenizer(os.path.join(out, "tokenizer.json"))
    assert tok.decode(cache.doc_tokens(0)[:-1].tolist()) != ""


def test_not_a_cache_and_missing_cache(tmp_path):
    with pytest.raises(CacheNotReady, match="does not exist"):
        open_cache(str(tmp_path / "nothing"))
    with pytest.raises(CacheNotReady, match="no ledger.json"):
        open_cache(str(tmp_path))


def test_corrupted_shard_file_is_detected(built, tmp_path):
    out = str(tmp_path / "c")
    shutil.copytree(built.out_dir, out)
    victim = os.path.join(out, "train", "shard-00001-of-00004.tokens.npy")
    arr = np.load(victim)
    np.save(victim, arr[:-5])
    with pytest.raises(CacheNotReady, match="disagree with the ledger"):
        open_cache(os.path.join(out, "train"))


def test_bad_records_are_counted_reported_and_kept_out(corpus, tmp_path):
    src = tmp_path / "src" / "outputs" / "main"
    src.mkdir(parents=True)
    good = ["first good document", "second good document"]
    rows = [{"id": doc_id(good[0]), "text": good[0], "source": "s"},
            {"id": doc_id("x"), "text": None, "source": "s"},
            {"id": None, "text": "orphan text", "source": "s"},
            {"id": doc_id(good[1]), "text": good[1], "source": "s"}]
    path = src / "part-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    res = tokenize_source("s", str(tmp_path / "src"), str(tmp_path / "out"), corpus["tok"],
                          validation_fraction=0.0, exec_config=INLINE)
    assert res.bad_records == 2 and res.counters["tokenize/bad_records"] == 2
    assert [(b["row"], b["field"]) for b in res.bad_samples] == [(1, "text"), (2, "id")]
    assert all(b["file"] == str(path) for b in res.bad_samples)
    cache = open_cache(res.split_dir("train"))
    assert cache.total_docs == 2 and cache.ledger["bad_records"] == 2
    tok, _ = load_tokenizer(corpus["tok"])
    assert [tok.decode(cache.doc_tokens(i)[:-1].tolist()) for i in range(2)] == good
    assert open_cache(res.split_dir("validation")).total_docs == 0


def test_byte_lengths_read_off_offsets_for_slices_nulls_and_large_strings():
    texts = ["", "abc", "ünï", "日本語", "🙂 x"]
    for typ in (pa.string(), pa.large_string()):
        arr = pa.array(texts, type=typ)
        assert _byte_lengths(arr).tolist() == [len(t.encode()) for t in texts]
        assert _byte_lengths(arr.slice(2, 2)).tolist() == [len("ünï".encode()), len("日本語".encode())]
        assert _byte_lengths(arr.slice(5)).tolist() == []
    # a null slot whose offsets span bytes (allowed by Arrow's format) counts 0, sliced or not
    offsets = np.array([0, 2, 5, 6], dtype=np.int32)
    valid = np.packbits(np.array([1, 0, 1], dtype=np.uint8), bitorder="little")
    arr = pa.StringArray.from_buffers(3, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"abXYZc"),
                                      pa.py_buffer(valid.tobytes()), 1)
    assert _byte_lengths(arr).tolist() == [2, 0, 1]
    assert _byte_lengths(arr.slice(1)).tolist() == [0, 1]


def test_encoding_a_part_imports_no_pandas(corpus, tmp_path):
    """pyarrow imports pandas (where installed) on any to_numpy or Python-to-Arrow conversion: 0.3 CPU-s
    of every tokenize worker's fixed cost, so the step reads lengths off the buffers instead."""
    code = (f"import sys; from datakit.shuffle import ExecConfig; from datakit.tokenize.tokenize_step import tokenize_source; "
            f"tokenize_source('s', {corpus['src']!r}, {str(tmp_path / 'out')!r}, {corpus['tok']!r}, "
            f"exec_config=ExecConfig(backend='inline')); print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_missing_column_fails_naming_file_and_column(corpus, tmp_path):
    src = tmp_path / "src" / "outputs" / "main"
    src.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a"], "body": ["b"]}), src / "part-00000-of-00001.parquet")
    with pytest.raises(Exception, match=r"part-00000-of-00001.parquet: missing column 'text'"):
        tokenize_source("s", str(tmp_path / "src"), str(tmp_path / "out"), corpus["tok"], exec_config=INLINE)


def test_bad_arguments(corpus, tmp_path):
    with pytest.raises(ValueError, match="validation_fraction"):
        tokenize_source("s", corpus["src"], str(tmp_path), corpus["tok"], validation_fraction=1.0)
    with pytest.raises(FileNotFoundError, match="no parquet files"):
        tokenize_source("s", str(tmp_path / "none"), str(tmp_path / "o"), corpus["tok"])


def test_bos_option(corpus, tmp_path):
    src = str(tmp_path / "src")
    texts = stdlib_texts(60_000, subdir="json")
    write_source(src, texts, 2)
    res = tokenize_source("j", src, str(tmp_path / "out"), corpus["tok"], validation_fraction=0.0, bos=True,
                          exec_config=INLINE)
    cache = open_cache(res.split_dir("train"))
    tok, ident = load_tokenizer(corpus["tok"])
    for i in range(cache.total_docs):
        ids = cache.doc_tokens(i)
        assert ids[0] == ident.bos_id and ids[-1] == ident.eos_id
    assert cache.ledger["bos"] is True


def test_uint32_tokens_when_vocab_exceeds_uint16(corpus, tmp_path):
    tok, _ = load_tokenizer(corpus["tok"])
    tok.add_tokens([f"<extra_{i}>" for i in range(66_000)])
    big = str(tmp_path / "big.json")
    tok.save(big)
    src = str(tmp_path / "src")
    texts = ["plain text with <extra_65999> inside", "more text\n"] + stdlib_texts(30_000, subdir="json")
    write_source(src, texts, 1)
    res = tokenize_source("b", src, str(tmp_path / "out"), big, validation_fraction=0.0, exec_config=INLINE)
    cache = open_cache(res.split_dir("train"))
    assert cache.dtype == np.dtype("uint32") and cache.vocab_size > 65536
    assert np.load(os.path.join(res.split_dir("train"), "shard-00000-of-00001.tokens.npy")).dtype == np.dtype("<u4")
    tok_big, _ = load_tokenizer(big)
    decoded = {tok_big.decode(cache.doc_tokens(i)[:-1].tolist()) for i in range(cache.total_docs)}
    assert set(texts) == decoded
    assert int(cache.shard_tokens(0).max()) > 65535


def test_fsspec_output_directory(corpus):
    res = tokenize_source("m", corpus["src"], "memory://datakit-test/cache", corpus["tok"], validation_fraction=0.2,
                          exec_config=INLINE)
    cache = open_cache("memory://datakit-test/cache/train")
    local = open_cache(os.path.join(str(corpus["root"] / "cache-inline"), "train")) if os.path.exists(
        str(corpus["root"] / "cache-inline")) else None
    assert cache.total_tokens == res.splits["train"]["tokens"]
    if local is not None:
        assert cache.total_tokens == local.total_tokens
        assert np.array_equal(cache.doc_tokens(3), local.doc_tokens(3))


def test_build_killed_with_sigkill_resumes_to_equal_a_clean_build(built, corpus, tmp_path):
    """A hard kill (no cleanup code runs) mid-build: the cache refuses to load; a rerun ignores the
    partial files, reuses finished shards and produces exactly the clean build's bytes."""
    out = str(tmp_path / "cache")
    code = (
        "import sys; from datakit.shuffle import ExecConfig; "
        "from datakit.tokenize.tokenize_step import tokenize_source; "
        "tokenize_source('mixed', sys.argv[1], sys.argv[2], sys.argv[3], validation_fraction=0.2, "
        "exec_config=ExecConfig(backend='inline'), batch_bytes=64 << 10)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, corpus["src"], out, corpus["tok"]])
    marker = os.path.join(out, "validation", "shard-00000-of-00004.json")
    deadline = time.monotonic() + 120
    while not os.path.exists(marker) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the build finished before it could be killed"
    with pytest.raises(CacheNotReady, match="unfinished"):
        open_cache(os.path.join(out, "train"))
    res = tokenize_source("mixed", corpus["src"], out, corpus["tok"], validation_fraction=0.2, exec_config=INLINE)
    assert res.reused_shards >= 1
    assert_same_tree(built.out_dir, out)
