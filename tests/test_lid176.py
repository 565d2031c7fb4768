"""datakit.quality.lid176 computes lid.176's predict in numpy and Arrow (each word's summed rows kept, the
words split by Arrow). These hold it to fastText's own predict (the fasttext package, `langid.model()`)
text by text: the same label everywhere, the probability within 1e-4 (the order of float additions
differs), on real text in many languages and on the inputs where fastText's reading differs from
Python's (its six separator bytes, NUL, a no-break space inside a word, ``</s>`` and ``__label__``
tokens). Results never depend on what the cache holds or how texts are batched."""

from __future__ import annotations

import glob
import gzip
import random
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from datakit.core.fasttext_format import fnv1a_spans
from datakit.quality import langid, lid176
from system_packages import needs

STDLIB = Path(sysconfig.get_paths()["stdlib"])
EDGE = [
    "hello world this is english text",
    "Ceci est un texte en français, avec des accents.",
    "Это русский текст о погоде и о людях",
    "これは日本語のテキストです。東京は大きな都市です。",
    "这是一个中文句子，没有空格。",
    "한국어 문장입니다 그리고 또 하나",
    "a",
    "",
    "\t\t \x0b\x0c\r",  # nothing but separators: fastText predicts on </s> alone
    "__label__en foo bar __label__de",  # tokens starting __label__ are labels to fastText, not words
    "__label__",
    "x </s> dies ist deutsch und noch mehr deutsch",  # fastText stops reading at a </s> token
    "das ist</s> deutsch </s>",
    "tab\tsep\x0bvt\x0cff\x00nul\xa0nbsp text\x1cgroup here\u2003em space",
    "emoji 🙂 and ünïcödé with combining e\u0301 marks",
    "Zeichen" * 2000,  # one 14,000-character word
    "مرحبا بالعالم هذا نص عربي",
    "שלום עולם זה טקסט בעברית",
    "यह हिंदी में एक वाक्य है",
    "mixed English und Deutsch et français",
]


@pytest.fixture(scope="module")
def both():
    return langid.model(), lid176.Predictor(lid176.load(langid.model_path()))


def _fasttext(model, line: str) -> tuple[str, float]:
    labels, probs = model.predict(line, k=1)
    return (labels[0][len("__label__"):], float(probs[0])) if labels else ("", 0.0)


def _assert_same(model, lines: list[str], ours: list[tuple[str, float]]) -> None:
    for line, (label, prob) in zip(lines, ours):
        want, p = _fasttext(model, line)
        assert label == want and abs(prob - p) < 1e-4, (line[:80], label, prob, want, p)


def _texts(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        raw = gzip.decompress(Path(p).read_bytes()) if p.endswith(".gz") else Path(p).read_bytes()
        out.append(raw.decode("utf-8", "replace").replace("\n", " "))
    return out


def test_the_input_rows_are_fasttexts_exactly(both):
    """The product-quantized rows decoded from the file are the ones fastText adds, bit for bit."""
    model, ours = both
    rows = random.Random(5).sample(range(ours.m.rows.shape[0]), 500)
    for r in rows:
        assert np.array_equal(model.get_input_vector(r), ours.m.rows[r]), r
    assert len(ours.m.labels) == 176 and ours.m.labels[:3] == [lab[9:] for lab in model.get_labels()[:3]]


def test_labels_and_scores_are_fasttexts_on_edge_inputs(both):
    model, ours = both
    _assert_same(model, EDGE, ours.predict_many(EDGE))
    assert ours.predict("das ist</s> deutsch </s> und mehr") == ours.predict("das ist</s> deutsch")


def test_labels_and_scores_are_fasttexts_on_the_standard_library_and_licenses(both):
    """Always-present text: Python modules (code and docstrings, English) and Debian's license texts."""
    model, ours = both
    paths = sorted(str(p) for p in (STDLIB / "email").glob("*.py")) + sorted(glob.glob("/usr/share/common-licenses/*"))
    lines = [t for t in _texts([p for p in paths if Path(p).is_file()]) if t.strip()]
    assert len(lines) >= 30
    _assert_same(model, lines, ours.predict_many(lines))


@needs("manpages-de", "manpages-fr", "manpages-es", "manpages-ru", "manpages-ja", "debian-reference-en",
       "debian-reference-de", "debian-reference-ja", "debian-reference-zh-cn")
def test_labels_and_scores_are_fasttexts_on_man_pages_and_the_reference_in_many_languages(both):
    model, ours = both
    paths = []
    for lang in ("de", "fr", "es", "ru", "ja"):
        paths += sorted(glob.glob(f"/usr/share/man/{lang}/man1/*.gz"))[:40]
    paths += sorted(glob.glob("/usr/share/debian-reference/*.html"))[:60]
    lines = _texts(paths)
    found = ours.predict_many(lines)
    _assert_same(model, lines, found)
    assert {"de", "fr", "es", "ru", "ja", "en"} <= {label for label, _ in found}


def test_results_do_not_depend_on_the_cache_or_the_batches(both, monkeypatch):
    """A word's sum is computed alike whatever else is added with it, so one text at a time, all in one
    batch, or small batches through a cache that keeps emptying give the very same floats."""
    _, ours = both
    lines = EDGE + _texts(sorted(glob.glob("/usr/share/common-licenses/*"))[:8])
    together = lid176.Predictor(ours.m).predict_many(lines)
    alone = [lid176.Predictor(ours.m).predict(line) for line in lines]
    monkeypatch.setattr(lid176, "_CACHE_MAX", 40)
    monkeypatch.setattr(lid176, "_BATCH", 3)
    churned = lid176.Predictor(ours.m).predict_many(lines)
    assert together == alone == churned


def test_detect_many_is_detect_of_each():
    texts = EDGE + ["   \n  ", "\u00a0\u2003", "Guten Tag\nwie geht es Ihnen heute"]
    for max_chars in (None, 5, 2000):
        assert langid.detect_many(texts, max_chars) == [langid.detect(t, max_chars) for t in texts]
    assert langid.detect("   \n ") == ("", 0.0) and langid.detect("\u00a0") == ("", 0.0)


def test_language_id_imports_no_pandas():
    """Every Arrow call here is made without Python scalars (pc.equal with a str imports pandas: 0.2-0.3
    CPU-s and ~50 MB in each quality worker)."""
    import subprocess
    import sys

    code = ("import sys; from datakit.quality import langid; "
            "langid.detect_many(['das ist</s> deutsch', 'x\\ty', 'hello world']); print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_line_past_the_long_line_limit_gets_fasttexts_answer(both, monkeypatch):
    """Summed over its distinct words (memory follows its words): the same label and score."""
    model, ours = both
    lines = EDGE[:6] + _texts(sorted(glob.glob("/usr/share/common-licenses/*"))[:4])
    want = lid176.Predictor(ours.m).predict_many(lines)
    monkeypatch.setattr(lid176, "_LONG_LINE", 3)
    got = lid176.Predictor(ours.m).predict_many(lines)
    _assert_same(model, lines, got)
    assert [g[0] for g in got] == [w[0] for w in want]
    assert max(abs(g[1] - w[1]) for g, w in zip(got, want)) < 1e-9


def test_both_ngram_paths_hash_as_fnv1a_spans_of_each_ngrams_bytes():
    """The ASCII path (a level at a time over bytes) and the UTF-8 path (a character at a time) each reuse
    the shorter n-gram's hash; both must give `fnv1a_spans` of every 2..4-character n-gram's bytes of
    ``<word>``, in the order a word's rows are summed (by length, then start)."""
    words = ["a", "ab", "hello", "Zeichen", "погода", "日本語です", "🙂x🙂", "e\u0301t\u00e9", "\udc80lone", "ünï"]
    want_word, starts, lens, data = [], [], [], b""
    for n in (2, 3, 4):
        for i, w in enumerate(words):
            chars = list(f"<{w}>")
            for s in range(len(chars) - n + 1):
                piece = "".join(chars[s:s + n]).encode("utf-8", "surrogatepass")
                want_word.append(i)
                starts.append(len(data))
                lens.append(len(piece))
                data += piece
    want = fnv1a_spans(np.frombuffer(data, np.int8), np.array(starts), np.array(lens)).view(np.uint32)
    order = np.argsort(want_word, kind="stable")  # per word, by length then start
    got_word, got = lid176._utf8_ngram_hashes(words, 2, 4)
    mine = np.argsort(got_word, kind="stable")
    assert got_word[mine].tolist() == np.array(want_word)[order].tolist()
    assert got[mine].tolist() == want[order].tolist()
    m = lid176.load(langid.model_path())
    ascii_words = [w for w in words if w.isascii()]
    which, rows = lid176._ascii_ngram_rows(ascii_words, m)
    wanted = lid176._utf8_ngram_hashes(ascii_words, m.minn, m.maxn)
    kept = m.bucket_row[wanted[1] % np.uint32(m.bucket)]
    assert which.tolist() == wanted[0][kept >= 0].tolist() and rows.tolist() == kept[kept >= 0].tolist()
