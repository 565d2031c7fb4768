"""Shingling, MinHash signatures, LSH bands and parameters (pure functions, no engine)."""

from __future__ import annotations

import itertools
import os
import random
import re
import sysconfig
from math import floor

import numpy as np
import pytest

from datakit.dedup import (
    DedupConfig,
    band_buckets,
    buckets_for_texts,
    candidate_probability,
    effective_threshold,
    jaccard,
    lsh_params,
    minhash_params,
    normalize_text,
    shingle_hashes,
    shingle_set,
    signatures,
)
from datakit.dedup.minhash import permutations
from datakit.dedup.shingles import word_tokens

WORD5 = {"ngram": 5, "unit": "word"}  # shingle_hashes keyword arguments
CHAR5 = {"ngram": 5, "unit": "char"}


def stdlib_words() -> list[str]:
    """A vocabulary from the Python standard library's own source (no digits, so no folding)."""
    src = open(os.path.join(sysconfig.get_paths()["stdlib"], "argparse.py"), encoding="utf-8").read()
    return sorted(set(re.findall(r"\b[a-z]{3,12}\b", src)))


def random_text(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    vocab = stdlib_words()
    return " ".join(rng.choice(vocab) for _ in range(n_words))


def stdlib_docs(n: int = 40, size: int = 3000) -> list[str]:
    src = open(os.path.join(sysconfig.get_paths()["stdlib"], "argparse.py"), encoding="utf-8").read()
    return [src[i : i + size] for i in range(0, n * 700, 700)]


# ---------------------------------------------------------------- normalization and shingles
def test_normalization_folds_case_punctuation_digits_and_spacing():
    text = "Hello,  World! It's 2024 \u2014 \u201cquoted\u201d\t\nend"
    assert normalize_text(text) == "hello world its 0000 quoted end"
    same = ["Page 3 of 10: the END.", "page 4 of 12 -- The end", "PAGE 7 OF 99 the\u00a0end!!"]
    sets = [shingle_set(t, 3, "word") for t in same]
    assert all(np.array_equal(sets[0], s) for s in sets[1:])
    assert not np.array_equal(sets[0], shingle_set("page 3 of 10 the start", 3, "word"))


def test_non_ascii_text_is_normalized_too():
    expect = "\u00e9cole fran\u00e7aise \u0438\u0432\u0430\u043d"
    assert normalize_text("\u00c9COLE Fran\u00e7aise, \u0418\u0432\u0430\u043d!") == expect
    a = shingle_set("\u00c9cole fran\u00e7aise de Paris, \u00e9t\u00e9 2023", 2, "word")
    b = shingle_set("\u00e9cole FRAN\u00c7AISE de paris \u00e9t\u00e9 1999", 2, "word")
    assert np.array_equal(a, b)


def test_char_stream_is_the_normalized_text():
    from datakit.dedup.hashing import mix64

    docs = stdlib_docs(5) + ["", "  ", "One", "a  b\n\nc"]
    _, chars = word_tokens(docs, with_chars=True)
    for i, d in enumerate(docs):
        norm = normalize_text(d)
        codes = np.frombuffer(norm.encode("utf-32-le"), "<u4").astype(np.uint64)
        expect = mix64(codes ^ np.uint64(0x14057B7EF767814F))
        assert np.array_equal(chars.values[chars.offsets[i] : chars.offsets[i + 1]], expect), i


@pytest.mark.parametrize("cfg", [WORD5, CHAR5, {"ngram": 1, "unit": "word"}, {"ngram": 13, "unit": "word"}])
def test_batch_shingles_equal_single_doc_shingles(cfg):
    docs = stdlib_docs(12) + ["", "short text", "x"]
    random.Random(1).shuffle(docs)
    batch = shingle_hashes(docs, **cfg)
    for i, d in enumerate(docs):
        single = shingle_hashes([d], **cfg)
        assert np.array_equal(batch.values[batch.offsets[i] : batch.offsets[i + 1]], single.values)


def test_shingle_counts():
    text = "one two three four five six seven"
    assert len(shingle_hashes([text], 5, "word").values) == 3
    assert len(shingle_hashes([text], 7, "word").values) == 1
    # fewer words than n: one shingle of everything; no words: none
    sh = shingle_hashes(["one two", "", "!!! ...", "one two"], 5, "word")
    assert list(np.diff(sh.offsets)) == [1, 0, 0, 1]
    assert sh.values[0] == sh.values[1]
    assert len(shingle_hashes(["abcdefg"], **CHAR5).values) == 3
    # order matters inside a shingle
    assert not np.array_equal(shingle_set("a b c", 3, "word"), shingle_set("c b a", 3, "word"))


def test_text_cap_limits_what_counts():
    head = random_text(200, 1)
    cfg = {"ngram": 5, "unit": "word", "max_chars": len(head)}
    assert np.array_equal(shingle_set(head, **cfg), shingle_set(head + " " + random_text(500, 2), **cfg))


def test_jaccard():
    a, b = np.array([1, 2, 3, 4], np.uint64), np.array([3, 4, 5], np.uint64)
    assert jaccard(a, b) == pytest.approx(2 / 5)
    assert jaccard(a, a) == 1.0
    assert jaccard(np.array([], np.uint64), np.array([], np.uint64)) == 0.0


# ---------------------------------------------------------------- signatures
def test_signatures_equal_brute_force_minimum():
    docs = stdlib_docs(30) + ["", "tiny"]
    sh = shingle_hashes(docs, **WORD5)
    sig, has = signatures(sh, 64, 7)
    a, b = permutations(7, 64)
    for i in range(len(docs)):
        vals = sh.values[sh.offsets[i] : sh.offsets[i + 1]]
        if len(vals) == 0:
            assert not has[i]
            continue
        assert has[i]
        x = (vals >> np.uint64(32)).astype(np.uint32)
        assert np.array_equal(sig[i], (a[:, None] * x[None, :] + b[:, None]).min(axis=1))


def test_signatures_are_deterministic_and_independent_of_batching():
    docs = stdlib_docs(20)
    cfg = minhash_params(DedupConfig())
    whole, _ = buckets_for_texts(docs, cfg)
    again, _ = buckets_for_texts(docs, minhash_params(DedupConfig()))
    assert np.array_equal(whole, again)
    pieces = np.concatenate([buckets_for_texts(docs[i : i + 3], cfg)[0] for i in range(0, len(docs), 3)])
    assert np.array_equal(whole, pieces)
    other_seed, _ = buckets_for_texts(docs, minhash_params(DedupConfig(seed=43)))
    assert not (whole == other_seed).any()
    assert whole.shape == (20, 14)


def test_pinned_hash_values():
    """Hashes are part of the attribute file format; a change here must bump SHINGLE/MINHASH_FORMAT."""
    sh = shingle_hashes(["The quick brown fox jumps over the lazy dog"], **WORD5)
    sig, _ = signatures(sh, 4, 42)
    bk = band_buckets(sig, 2, 2)
    assert [int(x) for x in sh.values] == PINNED_SHINGLES
    assert [int(x) for x in bk[0]] == PINNED_BUCKETS


PINNED_SHINGLES = [
    9562957382854586236, 3681623561370472538, 11662856011304304124,
    15222514178933039576, 1097128926833940326,
]
PINNED_BUCKETS = [17544801563742648058, 13942553899024034923]


def test_equal_minhash_fraction_tracks_jaccard_prefix_reversed_suffix():
    """Peer case: text = prefix + reversed rest; the estimate stays within 0.2 of true Jaccard."""
    text = random_text(600, 3)
    cfg = CHAR5
    base = shingle_set(text, **cfg)
    sig0, _ = signatures(shingle_hashes([text], **cfg), 112, 42)
    for pct in range(0, 100, 5):
        end = floor(len(text) * pct / 100)
        variant = text[:end] + text[len(text) - 1 : end : -1]
        sig1, _ = signatures(shingle_hashes([variant], **cfg), 112, 42)
        est = float((sig0[0] == sig1[0]).mean())
        true = jaccard(base, shingle_set(variant, **cfg))
        assert abs(est - true) < 0.2, (pct, est, true)


@pytest.mark.parametrize("cfg,seed,perms", [
    ({"ngram": 5, "unit": "char"}, 42, 112),
    ({"ngram": 10, "unit": "char"}, 32768, 64),
])
def test_equal_minhash_fraction_tracks_jaccard_pairs(cfg, seed, perms):
    """Peer case: all pairs of five short documents, char n-grams. (The peer used ~20 permutations,
    where a 0.2 deviation is a 2-sigma event for some pair; 64+ make the bound a real check.)"""
    docs = ["A test string", "A different test string", "A different object",
            "The quick brown fox jumps over the lazy dog", "The quick black cat jumps over the lazy dog"]
    sig, _ = signatures(shingle_hashes(docs, **cfg), perms, seed)
    for i, j in itertools.combinations(range(len(docs)), 2):
        est = float((sig[i] == sig[j]).mean())
        true = jaccard(shingle_set(docs[i], **cfg), shingle_set(docs[j], **cfg))
        assert abs(est - true) < 0.2, (docs[i], docs[j], est, true)


def test_estimate_is_unbiased_over_many_pairs():
    rng = random.Random(5)
    errs = []
    for k in range(40):
        x = random_text(300, 100 + k)
        words = x.split()
        for _ in range(rng.randrange(5, 60)):
            words[rng.randrange(len(words))] = "zzz" + str(rng.randrange(9)).replace("0", "")
        y = " ".join(words)
        s = signatures(shingle_hashes([x, y], **WORD5), 256, 11)[0]
        errs.append(float((s[0] == s[1]).mean()) - jaccard(shingle_set(x, **WORD5), shingle_set(y, **WORD5)))
    assert abs(float(np.mean(errs))) < 0.02
    assert float(np.std(errs)) < 0.05  # binomial sd at 256 perms is at most 0.031


# ---------------------------------------------------------------- bands and parameters
def test_band_buckets_collide_exactly_when_a_band_is_equal():
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2**32, size=(3, 12), dtype=np.uint64).astype(np.uint32)
    sig[1, 4:8] = sig[0, 4:8]  # band 1 (rows 4..7) equal
    sig[2, 0:4] = sig[0, 4:8]  # same values but in band 0: must NOT collide with band 1
    bk = band_buckets(sig, 3, 4)
    assert bk[0, 1] == bk[1, 1]
    assert bk[0, 0] != bk[1, 0] and bk[0, 2] != bk[1, 2]
    assert bk[2, 0] != bk[0, 1]


def test_lsh_params_match_datasketch_and_default_threshold():
    from datasketch import MinHashLSH

    for threshold, perms in [(0.72, 112), (0.8, 112), (0.5, 128), (0.9, 256)]:
        lsh = MinHashLSH(threshold=threshold, num_perm=perms)
        assert lsh_params(threshold, perms) == (lsh.b, lsh.r)
    assert effective_threshold(14, 8) == pytest.approx(0.719, abs=0.005)
    assert candidate_probability(0.9, 14, 8) > 0.99
    assert candidate_probability(0.3, 14, 8) < 0.001
    assert DedupConfig(threshold=0.8).lsh() == lsh_params(0.8, 112)
    params = minhash_params(DedupConfig(threshold=0.8))
    assert (params["bands"], params["rows"], params["num_perms"]) == (*lsh_params(0.8, 112), 112)


@pytest.mark.parametrize("kw,msg", [
    ({"bands": 20, "rows": 8}, "exceeds num_perms"),
    ({"ngram_unit": "token"}, "word' or 'char"),
    ({"ngram": 0}, "positive"),
    ({"seed": -1}, "seed"),
])
def test_config_validation(kw, msg):
    with pytest.raises(ValueError, match=msg):
        minhash_params(DedupConfig(**kw))


def test_minhash_params_are_the_recorded_format():
    """minhash_params(cfg) is written into every minhash attribute file and attrs.json: its keys, their
    order and the derived values are part of the format (bands x rows resolved from a threshold)."""
    import unicodedata

    assert minhash_params(DedupConfig()) == {
        "ngram": 5, "ngram_unit": "word", "num_perms": 112, "bands": 14, "rows": 8, "seed": 42,
        "max_text_chars": 500_000, "punctuation": "split", "shingle_format": 1, "minhash_format": 1,
        "unicode_version": unicodedata.unidata_version,
    }
    assert list(minhash_params(DedupConfig(threshold=0.8, exact=False, verify=False))) == list(
        minhash_params(DedupConfig()))


def test_word_hash_depends_on_the_word_not_its_position():
    tok = word_tokens(["ab ba ab", "xx ab"])
    v = tok.values
    assert v[0] == v[2] == v[4] and v[0] != v[1] and v[3] != v[0]
    long_a, long_b = "q" * 3000 + "a", "q" * 3000 + "b"  # long words differ by their last letter only
    t = word_tokens([long_a, long_b, long_a])
    assert t.values[0] == t.values[2] != t.values[1]


def test_characters_above_the_lookup_table_are_letters():
    rare = "\U00030000\U00030001"  # CJK extension G, above the class table
    assert normalize_text(f"x {rare}!") == f"x {rare}"
    a = shingle_hashes([f"one {rare} two"], 3, "word").values
    b = shingle_hashes([f"one {rare}, two"], 3, "word").values
    c = shingle_hashes(["one \U00030000\U00030002 two"], 3, "word").values
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_non_string_text_is_rejected():
    with pytest.raises(TypeError, match="text must be a string, got int"):
        shingle_hashes(["fine", 3], **WORD5)
    # None is an empty document (no shingles), not an error
    assert list(np.diff(shingle_hashes([None, "a b c d e f"], **WORD5).offsets)) == [0, 2]


# ---------------------------------------------------------------- punctuation as a word boundary
def test_punctuation_splits_words_by_default_and_drop_keeps_the_first_format():
    code = "result = os.path.join(base, name)  # see self.items[0]"
    assert normalize_text(code, punctuation="split") == "result os path join base name see self items 0"
    assert normalize_text(code) == "result ospathjoinbase name see selfitems0"
    assert len(shingle_set(code, 1, "word")) == 10 and len(shingle_set(code, 1, "word", punctuation="drop")) == 5
    assert minhash_params(DedupConfig())["punctuation"] == "split"
    with pytest.raises(ValueError, match="split' or 'drop"):
        shingle_hashes([code], 5, punctuation="keep")
    # format characters (soft hyphen, zero-width joiner) are still deleted, never a boundary
    assert normalize_text("co\u00adoperate zero\u200dwidth", punctuation="split") == "cooperate zerowidth"


@pytest.mark.parametrize("punctuation", ["split", "drop"])
def test_batch_shingles_equal_single_doc_shingles_for_both_punctuation_modes(punctuation):
    cfg = {"ngram": 5, "unit": "word", "punctuation": punctuation}
    docs = stdlib_docs(8) + ["", "a.b,c;d", "x"]
    batch = shingle_hashes(docs, **cfg)
    for i, d in enumerate(docs):
        assert np.array_equal(batch.values[batch.offsets[i] : batch.offsets[i + 1]], shingle_hashes([d], **cfg).values)
    toks = word_tokens(["a.b,c;d"], punctuation="split")
    assert len(toks.values) == 4


def test_edited_code_keeps_a_higher_jaccard_when_punctuation_splits_words():
    """Why splitting is the default: the same 3% word edits spoil fewer 5-grams of code when dotted names
    and calls are several words, so the copy stays where 14 x 8 LSH bands find it (the issue's recall gap)."""
    src = open(os.path.join(sysconfig.get_paths()["stdlib"], "argparse.py"), encoding="utf-8").read()
    docs = [src[i : i + 6000] for i in range(0, 60000, 6000)]
    rng = random.Random(3)
    gains = []
    for d in docs:
        words = d.split()
        for _ in range(round(0.03 * len(words))):
            words[rng.randrange(len(words))] = rng.choice(["alpha", "beta", "gamma"])
        copy = " ".join(words)
        j = {p: jaccard(shingle_set(d, 5, punctuation=p), shingle_set(copy, 5, punctuation=p))
             for p in ("split", "drop")}
        gains.append(j["split"] - j["drop"])
    assert min(gains) > 0
    assert candidate_probability(0.78, 14, 8) - candidate_probability(0.75, 14, 8) > 0.1


def test_candidate_threshold_inverts_the_s_curve():
    from datakit.dedup.lsh_params import candidate_threshold

    for bands, rows in [(14, 8), (9, 13), (20, 5)]:
        for p in (0.1, 0.5, 0.9):
            assert candidate_probability(candidate_threshold(bands, rows, p), bands, rows) == pytest.approx(p)
    assert candidate_threshold(14, 8) == pytest.approx(0.685, abs=0.001)
    with pytest.raises(ValueError):
        candidate_threshold(14, 8, 1.0)
