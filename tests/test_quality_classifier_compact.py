"""datakit.classify.compact's vectorised reading against a plain per-document reading of fastText's
predict, on synthetic compact models (written here byte by byte, no fastText needed) and text built to
hit every path of the numpy tokenizer and vocabulary tables: words of 8/9/32/33/257 bytes, words at the
end of the buffer, unknown and label-like tokens, "</s>", NUL and the other separators, control bytes that
are not separators, multi-byte characters cut by max_chars, texts that run into each other without a
separator, nulls, sliced and chunked arrays, batches. The fast means must also equal the exact word
sequence's (``Scorer._means_exact``) bit for bit."""

from __future__ import annotations

import collections
import math
import random
import re
import struct
import subprocess
import sys
import sysconfig
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datakit.classify import compact
from datakit.classify.compact import Scorer
from datakit.core.fasttext_format import MAGIC, VERSION, fnv1a
from datakit.stages.quality_classifier import score_file
from datakit.stages.transform import REMOVED_VALUE_SCHEMA, table_bytes, transform_file

LABELS = [b"__label__hq", b"__label__lq"]


def _write_model(path, words: list[bytes], s: np.ndarray, word_ngrams: int, bucket: int) -> None:
    """A compact (dimension 1) supervised softmax fastText model file: vocabulary ``words`` then the two
    labels, input rows ``s`` (len(words) + bucket), output rows [1] (positive), [-0.5]."""
    out = [struct.pack("<ii", MAGIC, VERSION),
           struct.pack("<12id", 1, 5, 1, 1, 5, word_ngrams, 3, 3, bucket, 0, 0, 100, 1e-4),
           struct.pack("<iiiqq", len(words) + 2, len(words), 2, 1000, -1)]
    out += [w + b"\0" + struct.pack("<qb", 1, 0) for w in words]
    out += [w + b"\0" + struct.pack("<qb", 1, 1) for w in LABELS]
    out += [struct.pack("<?qq", False, len(s), 1), s.astype(np.float32).tobytes()]
    out += [struct.pack("<?qq", False, 2, 1), np.array([1.0, -0.5], np.float32).tobytes()]
    with open(path, "wb") as f:
        f.write(b"".join(out))


def _hash(word: bytes) -> int:
    h = 2166136261
    for b in word:
        h = ((h ^ (b if b < 128 else b | 0xFFFFFF00)) * 16777619) & 0xFFFFFFFF
    return h


def _reference(text: str | None, max_chars: int, vocab: dict[bytes, int], s: np.ndarray, nwords: int,
               word_ngrams: int, bucket: int) -> float:
    """fastText's predict P(__label__hq) for one text, one word at a time."""
    ids, hashes = [], []
    for tok in re.split(rb"[ \t\n\v\f\r\0]+", (text or "")[:max_chars].encode()):
        i = vocab.get(tok, -1)
        if not tok or (i < 0 and tok.startswith(b"__label__")):
            continue
        if tok == b"</s>":
            break
        ids.append(i)
        hashes.append(_hash(tok))
    ids.append(vocab[b"</s>"])
    hashes.append(_hash(b"</s>"))
    total, count = 0.0, 0
    for i in ids:
        if i >= 0:
            total, count = total + float(s[i]), count + 1
    for n in range(1, word_ngrams):
        part = 0.0
        for j in range(len(ids) - n):
            h = hashes[j] | (0xFFFFFFFF00000000 if hashes[j] >= 2**31 else 0)
            for k in range(1, n + 1):
                h = (h * 116049371 + (hashes[j + k] | (0xFFFFFFFF00000000 if hashes[j + k] >= 2**31 else 0))) % 2**64
            part, count = part + float(s[nwords + h % bucket]), count + 1
        total += part
    p = 1.0 / (1.0 + math.exp(-(total / count) * 1.5))
    return min(max(p + 1e-5, 0.0), 1.0)


def _vocabulary(rng: random.Random) -> list[bytes]:
    letters = "abcdefghijklmnopqrstuvwxyz_0123456789é日"
    words = {"".join(rng.choice(letters) for _ in range(rng.choice([1, 2, 3, 5, 7, 8, 9, 12, 16, 17, 24, 31, 32, 33,
                                                                      40, 70])))
             for _ in range(1500)}
    words = sorted(words) + ["a" * 8, "b" * 9, "c" * 32, "d" * 33, "e" * 257, "naïve", "café"]
    return [w.encode() for w in words]


def _texts(words: list[bytes], rng: random.Random) -> list[str | None]:
    vocab = [w.decode() for w in words]
    texts: list[str | None] = ["", " ", "\n", None, "a" * 8, "b" * 9, "c" * 32, "d" * 33, "e" * 257, "e" * 258,
                               "a", "</s>", "x </s> y", "__label__hq", "__label__hqz " + vocab[3], "__label_ x",
                               "tab\tsep\x00nul\rcr\vvt\ffeed\x1cfs x\x01y\x7f", "naïve café 日本語" * 5, "😀" * 9 + " z"]
    seps = [" ", "  ", "\t", "\n", "\x00", "\r\n", "\x0b", "\x0c", " \x1c "]
    for _ in range(400):
        out = []
        for _ in range(rng.randint(0, 40)):
            r = rng.random()
            out.append(rng.choice(vocab) if r < 0.6 else rng.choice(vocab) + rng.choice(vocab) if r < 0.7 else
                       rng.choice(vocab)[:rng.randint(1, 9)] if r < 0.8 else
                       rng.choice(["</s>", "__label__hq", "__label__x" + rng.choice(vocab), "\x01"]) if r < 0.85 else
                       "".join(rng.choice("xyz日é") for _ in range(rng.randint(1, 45))))
            out.append(rng.choice(seps))
        text = "".join(out)
        texts.append(text.strip() if rng.random() < 0.4 else text)  # texts that run into the next one
    return texts


@pytest.mark.parametrize("word_ngrams,bucket", [(1, 0), (2, 97), (3, 1009)])
def test_compact_scores_are_a_per_word_reading_of_fasttext_and_the_fast_means_are_exact(
        tmp_path, monkeypatch, word_ngrams, bucket):
    rng = random.Random(word_ngrams)
    words = _vocabulary(rng) + [b"</s>", b"has space", b"a" * 8]  # a word no token equals; a repeat: first id
    s = np.array([rng.gauss(0, 1) for _ in range(len(words) + bucket)], np.float32).astype(np.float64)
    path = str(tmp_path / "m.bin")
    _write_model(path, words, s, word_ngrams, bucket)
    scorer = Scorer(path, "__label__hq")
    vocab: dict[bytes, int] = {}
    for i, w in enumerate(words):
        vocab.setdefault(w, i)
    texts = _texts(words, rng)
    with_nulls = pa.array(["x y"] * 3 + texts + [None, "z"], pa.large_string()).slice(3, len(texts))
    for max_chars in (20_000, 50, 7, 0):
        want = np.array([_reference(t, max_chars, vocab, s, len(words), word_ngrams, bucket) for t in texts])
        got = scorer.score(texts, max_chars)
        assert np.abs(got - want).max() < 1e-12
        for same in (scorer.score(with_nulls, max_chars), scorer.score(pa.array(texts, pa.string()), max_chars),
                     scorer.score(pa.chunked_array([pa.array(texts[:7]), pa.array(texts[7:])]), max_chars)):
            assert np.array_equal(same.view(np.uint64), got.view(np.uint64))
        scorer.finite = False  # the exact word sequence, "</s>" inserted, n-grams across texts weighted 0
        exact = scorer.score(texts, max_chars)
        scorer.finite = True
        assert np.array_equal(exact.view(np.uint64), got.view(np.uint64))
    monkeypatch.setattr(compact, "_BATCH_BYTES", 512)  # many batches: array slices with an offset
    batched = scorer.score(texts, 300)
    monkeypatch.undo()
    assert np.array_equal(batched.view(np.uint64), scorer.score(texts, 300).view(np.uint64))


def test_a_model_with_a_non_finite_row_scores_through_the_exact_sequence(tmp_path):
    words = [b"</s>", b"good", b"bad"]
    s = np.array([0.5, 1.0, -1.0] + [np.inf] + [0.25] * 6)
    path = str(tmp_path / "m.bin")
    _write_model(path, words, s, 2, 7)
    scorer = Scorer(path, "__label__hq")
    assert not scorer.finite
    got = scorer.score(["good bad", "bad good good", ""], 100)
    assert got.dtype == np.float64 and len(got) == 3


def test_fnv1a_hashes_a_sliced_array_window():
    tokens = [b"a", "naïve".encode(), b"x" * 300, b"</s>", b"\xff\x80"]
    arr = pa.array([b"skip"] + tokens, pa.large_binary()).slice(1)
    assert fnv1a(arr).tolist() == np.array([_hash(t) for t in tokens], np.uint32).view(np.int32).tolist()
    assert fnv1a(pa.array(tokens, pa.binary())).tolist() == fnv1a(arr).tolist()


_SCORE_A_FILE = """
import sys
from functools import partial
import pyarrow.parquet as pq
from datakit.stages.quality_classifier import score_file
from datakit.stages.transform import REMOVED_VALUE_SCHEMA, transform_file
model, src, dst, removed = sys.argv[1:]
fn = partial(score_file, model_path=model, sha="sha", max_chars=44)
transform_file(src, dst, removed, fn, REMOVED_VALUE_SCHEMA, batch_bytes=40)  # batches of 2 rows
print("pandas" in sys.modules, pq.read_table(dst).column("quality_score").to_pylist())
"""


def test_a_qscore_worker_scores_and_writes_a_file_without_importing_pandas(tmp_path):
    """pyarrow's pa.array, pa.scalar and to_numpy import pandas on first use (about 50 MB of a worker's
    memory): the qscore task's path (read the file in batches, score, write each batch and the empty
    removed file) avoids them, through a null text, a cut text and long words in and out of the
    vocabulary."""
    words = [b"</s>", b"good", b"bad", b"x" * 40]
    _write_model(tmp_path / "m.bin", words, np.array([0.5, 1.0, -1.0, 2.0] + [0.25] * 7), 2, 7)
    texts = ["good bad", None, "bad bad good", "x" * 40 + " good", "y" * 40 + " bad", "good", "naïve café"]
    src, dst = tmp_path / "docs.parquet", tmp_path / "out.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}), src)
    out = subprocess.run([sys.executable, "-c", _SCORE_A_FILE, str(tmp_path / "m.bin"), str(src), str(dst),
                          str(tmp_path / "removed.parquet")], capture_output=True, text=True, check=True).stdout
    imported, scores = out.split(" ", 1)
    assert imported == "False"
    assert scores.strip() == str(Scorer(str(tmp_path / "m.bin"), "__label__hq").score(texts, 44).tolist())


def _real_texts() -> list[str]:
    """Real text of this machine: the standard library's modules, cut into documents of 1-40 lines."""
    rng, out = random.Random(7), []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:60]:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        while lines:
            n = rng.randint(1, 40)
            out.append("".join(lines[:n]))
            lines = lines[n:]
    return out


def test_a_file_scored_in_batches_equals_the_file_scored_whole(tmp_path):
    """qscore reads a file in record batches and writes each as a row group (`transform_file` with
    batch_bytes): the rows, their order and every score's bits are the whole file's, and the scores are
    the scorer's on the whole column. The input is written as the stages write theirs (`table_bytes`: a
    dictionary page of text, pages of 1,024 rows); an empty file gives an empty scored file."""
    texts = _real_texts()
    counts = collections.Counter(w for t in texts for w in t.split())
    words = [b"</s>"] + [w.encode() for w, _ in counts.most_common(3000)]
    rng = np.random.default_rng(0)
    _write_model(tmp_path / "m.bin", words, rng.normal(0, 1, len(words) + 1009).astype(np.float32), 2, 1009)
    ids = [f"{i:06d}" for i in range(len(texts))]
    src = tmp_path / "docs.parquet"
    src.write_bytes(table_bytes(pa.table({"id": ids, "text": texts})))
    fn = partial(score_file, model_path=str(tmp_path / "m.bin"), sha="sha", max_chars=2000)
    outputs = {}
    for label, batch in (("whole", None), ("batches", 64 << 10)):
        dst, removed = tmp_path / f"{label}.parquet", tmp_path / f"{label}-removed.parquet"
        stats = transform_file(str(src), str(dst), str(removed), fn, REMOVED_VALUE_SCHEMA, batch)
        assert stats == {"docs_in": len(texts), "docs_out": len(texts), "removed": 0}
        assert pq.read_table(removed).num_rows == 0
        outputs[label] = (pq.read_table(dst), pq.ParquetFile(dst).metadata.num_row_groups)
    (whole, groups), (batched, batch_groups) = outputs["whole"], outputs["batches"]
    assert len(texts) > 1500 and groups == 1 and batch_groups > 20
    assert batched.column("id").to_pylist() == ids and batched.column("text").to_pylist() == texts
    scores = batched.column("quality_score").to_numpy()
    assert np.array_equal(scores.view(np.uint64), whole.column("quality_score").to_numpy().view(np.uint64))
    want = Scorer(str(tmp_path / "m.bin"), "__label__hq").score(texts, 2000)
    assert np.array_equal(scores.view(np.uint64), want.view(np.uint64)) and 0.05 < scores.mean() < 0.95
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}), empty)
    assert transform_file(str(empty), str(tmp_path / "e.parquet"), str(tmp_path / "e-removed.parquet"), fn,
                          REMOVED_VALUE_SCHEMA, 64 << 10) == {"docs_in": 0, "docs_out": 0, "removed": 0}
    got = pq.read_table(tmp_path / "e.parquet")
    assert got.num_rows == 0 and got.schema.names == ["id", "text", "quality_score"]


def test_document_counts_and_bucket_remainders_are_exact():
    """`compact._doc_counts` (np.add.reduceat over each document's run) equals np.bincount of the hits'
    documents, with empty documents; `compact._remainder` equals %. (The float sums stay np.bincount's:
    on float32 values of a wide range reduceat's sum differs from bincount's in the last bits.)"""
    rng = np.random.default_rng(7)
    nw = rng.integers(0, 5000, 60)
    nw[[0, 17, 59]] = 0
    first = np.cumsum(nw) - nw
    doc = np.repeat(np.arange(len(nw)), nw)
    hit = rng.random(len(doc)) < 0.1
    assert np.array_equal(compact._doc_counts(hit, first, nw), np.bincount(doc[hit], minlength=len(nw)))
    big = rng.integers(0, 2**64 - 1, 1000, dtype=np.uint64)
    assert np.array_equal(compact._remainder(big, np.uint64(2_000_000)), big % np.uint64(2_000_000))
