"""The tokenize stage's encoding engine: tiktoken converted from our byte-level BPE gives HF's ids on real
text (code, prose, German/Japanese/Russian/Chinese), special-token spellings in documents are treated
as HF treats them, tokenizers tiktoken cannot reproduce keep HF with a reason (or fail when tiktoken is
forced), a conversion that differs from HF is caught by the per-chunk check, and the token cache is
byte-identical whichever engine ran."""

from __future__ import annotations

import filecmp
import glob
import gzip
import json
import os

import numpy as np
import pytest
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

import datakit
from datakit.manifest import ManifestInvalid
from datakit.shuffle import ExecConfig
from datakit.tokenize.encode import assemble, assemble_flat, to_pieces
from datakit.tokenize.engine import (CHECK_CHARS, PREFIX_CHARS, EngineChoice, EngineError, ShardEncoder, check_sample,
                                     choose, convert, tiktoken_arrays, tiktoken_ids)
from datakit.tokenize.fixtures import license_texts, stdlib_texts, write_source
from datakit.tokenize.tokenize_step import tokenize_source
from datakit.tokenize.tokenizer import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, load_tokenizer, train_tokenizer
from system_packages import needs

INLINE = ExecConfig(backend="inline")


# ------------------------------------------------------------------------------------------ real text


def _man_pages(lang: str, max_chars: int, limit: int) -> list[str]:
    """Up to ``limit`` man pages of a language (UTF-8, at most ``max_chars`` long), in path order."""
    out = []
    for p in sorted(glob.glob(f"/usr/share/man/{lang}/man*/*.gz")):
        try:
            text = gzip.open(p).read().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) <= max_chars:
            out.append(text)
        if len(out) >= limit:
            break
    return out


def _reference_chapters(langs: tuple[str, ...]) -> list[str]:
    """debian-reference chapters (long HTML: each is cut into many pieces)."""
    paths = [p for lang in langs for p in sorted(glob.glob(f"/usr/share/debian-reference/ch0[12].{lang}.html"))]
    return [open(p, encoding="utf-8").read() for p in paths]


def _special_docs() -> list[str]:
    return [
        f"the EOS token's text {EOS_TOKEN} inside a document",
        f"{EOS_TOKEN}",
        f"x{EOS_TOKEN}y{PAD_TOKEN}!{BOS_TOKEN}  {EOS_TOKEN}\n{EOS_TOKEN}{EOS_TOKEN}",
        "<|endoftext|" + "> split <|endof" + "text|>",
        "",
        "ünïcödé — 日本語のテキスト — emoji 🙂🚀 — combining é — 中文文本 — русский",
    ]


@pytest.fixture(scope="module")
def documents() -> list[str]:
    code = [t for t in stdlib_texts(None) if len(t) <= 8000][:1500]
    texts = code + _man_pages("de", 8000, 500) + _man_pages("ja", 8000, 400) + _man_pages("ru", 12000, 150)
    texts += _reference_chapters(("de", "ja", "zh-cn", "zh-tw")) + license_texts()[:5] + _special_docs()
    return texts


@pytest.fixture(scope="module")
def trained(tmp_path_factory, documents) -> dict:
    root = tmp_path_factory.mktemp("engine")
    src = str(root / "src")
    write_source(src, documents, 3, source="mixed")
    info = train_tokenizer([src], str(root / "tok"), vocab_size=3000, max_bytes=3_000_000)
    return {"root": root, "src": src, "tok": info["path"]}


def _hf_ids(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]


def _same_tree(a: str, b: str) -> None:
    """Every file under a and b (ledgers, markers, .npy) byte for byte equal."""
    rel = lambda root: sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
    assert rel(a) == rel(b)
    for r in rel(a):
        assert filecmp.cmp(os.path.join(a, r), os.path.join(b, r), shallow=False), f"{r} differs"


# ---------------------------------------------------------------------------------- conversion


# German, Japanese and Russian man pages and Chinese chapters: thousands of documents, most of them not ASCII
@needs("manpages-de", "manpages-ja", "manpages-ru", "debian-reference-de", "debian-reference-ja",
       "debian-reference-zh-cn")
def test_trained_tokenizer_converts_and_matches_hf_on_thousands_of_real_documents(trained, documents):
    tok, _ = load_tokenizer(trained["tok"])
    enc, reason = convert(tok)
    assert enc is not None and reason == ""
    pieces, _ = to_pieces(documents)
    assert len(documents) >= 2000 and len(pieces) > len(documents)  # the long chapters are cut
    non_ascii = [p for p in pieces if not p.isascii()]
    assert len(non_ascii) >= 800
    assert any("日本語" in p for p in pieces) and any("的" in p for p in pieces) and any("и" in p for p in pieces)
    expected = _hf_ids(tok, pieces)
    got = enc.encode_ordinary_batch(pieces, num_threads=2)
    mismatched = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
    assert mismatched == [], f"{len(mismatched)} pieces differ, first {pieces[mismatched[0]][:80]!r}"


CL100K_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def test_a_split_regex_pre_tokenizer_converts_with_its_own_pattern(trained, documents, tmp_path):
    """Llama-3 / GPT-4 style: Split(regex, Isolated) then ByteLevel(use_regex=False); tiktoken runs the
    Split's regex itself and still gives HF's ids."""
    tok = Tokenizer.from_file(trained["tok"])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CL100K_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.encode_special_tokens = True
    enc, reason = convert(tok)
    assert enc is not None, reason
    assert enc._pat_str == CL100K_PATTERN
    pieces, _ = to_pieces(documents[::4])
    assert ShardEncoder(choose(tok, "tiktoken")).encode(pieces) == _hf_ids(tok, pieces)
    two = Tokenizer.from_file(trained["tok"])
    two.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CL100K_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    assert "2 regexes" in convert(two)[1]


def test_special_token_text_in_documents_is_plain_text_as_in_hf(trained):
    """load_tokenizer's HF tokenizer encodes "<|endoftext|>" inside a document as ordinary text (no EOS
    injection); the tiktoken engine must do the same, and the EOS id must not appear."""
    tok, ident = load_tokenizer(trained["tok"])
    docs = _special_docs()
    expected = _hf_ids(tok, docs)
    assert ident.eos_id not in expected[0] and len(expected[1]) > 1
    choice = choose(tok, "tiktoken")
    assert ShardEncoder(choice).encode(docs) == expected


def test_special_tokens_matched_in_text_when_the_hf_tokenizer_matches_them(trained):
    """A Tokenizer left with encode_special_tokens=False matches added tokens in raw text: so does the
    converted engine (allowed_special="all")."""
    tok = Tokenizer.from_file(trained["tok"])
    assert tok.encode_special_tokens is False
    docs = _special_docs()
    expected = _hf_ids(tok, docs)
    assert expected[1] == [tok.token_to_id(EOS_TOKEN)]
    assert ShardEncoder(choose(tok, "auto")).encode(docs) == expected


def test_assembled_tokens_add_eos_and_bos_exactly_as_with_hf(trained, documents):
    tok, ident = load_tokenizer(trained["tok"])
    pieces, counts = to_pieces(documents[:300] + _special_docs())
    hf = tok.encode_batch_fast(pieces, add_special_tokens=False)
    tk = ShardEncoder(choose(tok, "tiktoken")).encode(pieces)
    for bos in (None, ident.bos_id):
        a = assemble(hf, counts, eos_id=ident.eos_id, bos_id=bos)
        b = assemble(tk, counts, eos_id=ident.eos_id, bos_id=bos)
        assert a[0].tobytes() == b[0].tobytes() and np.array_equal(a[1], b[1])


# -------------------------------------------------------------------------------- not convertible


def _with(path: str, out: str, **changes) -> str:
    """A copy of a tokenizer.json with top-level keys replaced."""
    data = json.load(open(path))
    data.update(changes)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    json.dump(data, open(out, "w"))
    return out


def test_normalizer_or_wordpiece_is_not_convertible_and_says_why(trained, tmp_path):
    nfkc = _with(trained["tok"], str(tmp_path / "nfkc" / "tokenizer.json"),
                 normalizer=json.loads(normalizers.NFKC().__getstate__()))
    enc, reason = convert(nfkc)
    assert enc is None and "NFKC normalizer" in reason and "HF tokenizers engine is used" in reason
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    wp.pre_tokenizer = pre_tokenizers.Whitespace()
    enc, reason = convert(wp)
    assert enc is None and "WordPiece" in reason
    bl = Tokenizer.from_file(trained["tok"])
    bl.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert "prefix space" in convert(bl)[1]


def test_auto_falls_back_to_hf_with_a_reason_and_forced_tiktoken_fails_clearly(trained, tmp_path):
    nfkc = _with(trained["tok"], str(tmp_path / "nfkc" / "tokenizer.json"),
                 normalizer=json.loads(normalizers.NFKC().__getstate__()))
    res = tokenize_source("mixed", trained["src"], str(tmp_path / "auto"), nfkc, exec_config=INLINE)
    rec = res.to_dict()
    assert rec["engine"] == "hf" and "NFKC normalizer" in rec["engine_reason"]
    assert rec["engine_checked_pieces"] == 0 and rec["engine_mismatches"] == 0
    with pytest.raises(EngineError) as e:
        tokenize_source("mixed", trained["src"], str(tmp_path / "forced"), nfkc, exec_config=INLINE, engine="tiktoken")
    msg = str(e.value)
    assert "tokenize.engine is tiktoken" in msg and "NFKC normalizer" in msg and "Set tokenize.engine to auto" in msg
    assert not os.path.exists(tmp_path / "forced")  # refused before writing anything
    with pytest.raises(EngineError, match="one of auto, hf, tiktoken"):
        choose(load_tokenizer(nfkc)[0], "fast")


# ----------------------------------------------------------------------------- the per-chunk check


def _swapped_ranks(enc, a: bytes, b: bytes):
    """A deliberately corrupted conversion: tokens a and b trade ranks (ids)."""
    import tiktoken

    ranks = dict(enc._mergeable_ranks)
    ranks[a], ranks[b] = ranks[b], ranks[a]
    return tiktoken.Encoding("corrupt", pat_str=enc._pat_str, mergeable_ranks=ranks,
                             special_tokens=enc._special_tokens)


def test_corrupted_conversion_is_caught_and_the_output_is_hf(trained, documents):
    tok, ident = load_tokenizer(trained["tok"])
    enc, _ = convert(tok)
    corrupt = _swapped_ranks(enc, b" the", b"in")
    choice = EngineChoice("auto", tok, corrupt, "test", specials_as_text=True)
    encoder = ShardEncoder(choice, min_pieces=8)
    pieces, counts = to_pieces(documents[:400])
    got = encoder.encode(pieces)
    assert got == _hf_ids(tok, pieces)
    rec = encoder.record()
    assert rec["engine"] == "hf" and rec["engine_mismatches"] > 0 and rec["engine_checked_pieces"] >= 8
    assert "different ids than HF" in rec["engine_reason"]
    assert encoder.encode(["later chunks stay on HF"]) == _hf_ids(tok, ["later chunks stay on HF"])
    assert encoder.record()["engine_checked_pieces"] == rec["engine_checked_pieces"]  # no more checks


def _shortcut_tokenizer(path: str, texts: list[str], out: str) -> tuple[str, str]:
    """A tokenizer.json that passes every static check but where rank-based BPE differs from HF's: a new
    last token X+Y for the most frequent pair (X, Y) that HF leaves adjacent inside a word, reachable in
    HF only through another split (P, Q). tiktoken merges X, Y into it; HF never does."""
    tok = Tokenizer.from_file(path)
    data = json.load(open(path))
    vocab = data["model"]["vocab"]
    counts: dict[tuple[str, str], int] = {}
    for text in texts:
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(text):
            toks = [t.value for t in tok.model.tokenize(word)]
            for pair in zip(toks, toks[1:]):
                counts[pair] = counts.get(pair, 0) + 1
    for (x, y), _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        whole = x + y
        splits = [(whole[:i], whole[i:]) for i in range(1, len(whole)) if i != len(x)]
        splits = [(p, q) for p, q in splits if p in vocab and q in vocab]
        if whole not in vocab and splits:
            vocab[whole] = max(max(vocab.values()), max(t["id"] for t in data["added_tokens"])) + 1
            data["model"]["merges"].append(list(splits[0]))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            json.dump(data, open(out, "w"))
            return out, whole
    raise AssertionError("no pair to build a shortcut token from")


@pytest.mark.slow
def test_conversion_that_differs_from_hf_falls_back_in_the_step_with_identical_bytes(trained, documents, tmp_path):
    bad, token = _shortcut_tokenizer(trained["tok"], documents[:200], str(tmp_path / "bad" / "tokenizer.json"))
    assert convert(bad)[0] is not None  # the static checks cannot see it
    tokenize_source("mixed", trained["src"], str(tmp_path / "hf"), bad, exec_config=INLINE, engine="hf")
    auto = tokenize_source("mixed", trained["src"], str(tmp_path / "auto"), bad, exec_config=INLINE)
    rec = auto.to_dict()
    assert rec["engine"] == "hf" and rec["engine_mismatches"] > 0, (token, rec)
    assert "different ids than HF" in rec["engine_reason"]
    _same_tree(str(tmp_path / "hf"), str(tmp_path / "auto"))


def test_sample_covers_the_minimum_a_share_of_characters_and_non_ascii_pieces():
    pieces = ["a" * 100] * 500 + ["ü" * 10, "b", "日本"]
    share = 0.01 * sum(map(len, pieces))
    idx = check_sample(pieces, share, 64)
    assert idx[:64] == list(range(64)) and idx[64:] == [500, 502]
    idx = check_sample(pieces, share, 0)
    assert idx[:-2] == list(range(6))  # 1% of 50,013 characters: six 100-character pieces
    assert check_sample([], share, 64) == []


def test_check_sample_takes_a_character_budget_a_minimum_and_non_ascii_pieces():
    pieces = ["a" * 100] * 10 + ["ü" * 5000, "ü" * 10, "x" * 7, "日本", "é", "y" * 3, "z" * 50]
    # budget 250 characters: the first three pieces; then the first two short non-ASCII pieces after them
    assert check_sample(pieces, 250) == [0, 1, 2, 11, 13]
    assert check_sample(pieces, 250, non_ascii=0) == [0, 1, 2]
    assert check_sample(pieces, 250, non_ascii=1) == [0, 1, 2, 11]
    # a minimum number of first pieces, whatever their length
    assert check_sample(pieces, 250, min_pieces=12) == list(range(12)) + [13, 14]
    assert check_sample(pieces, 0, min_pieces=2, non_ascii=0) == [0, 1]
    assert check_sample(pieces, 0, non_ascii=0) == [] and check_sample([], 1000, 64) == []
    assert check_sample(pieces, 10**9, min_pieces=100) == list(range(len(pieces)))


def test_shard_check_is_bounded_per_shard_and_every_shard_is_checked(trained, documents):
    tok, _ = load_tokenizer(trained["tok"])
    choice = choose(tok, "auto")
    pieces, _ = to_pieces(documents)
    chunks = [pieces[i:i + 200] for i in range(0, len(pieces), 200)]
    shard = ShardEncoder(choice, min_pieces=20, check_chars=4000)
    for chunk in chunks:
        assert shard.encode(chunk) == _hf_ids(tok, chunk)
    rec = shard.record()
    assert rec["engine"] == "tiktoken" and rec["engine_mismatches"] == 0
    # the process's first 20 pieces: whole up to the 4000-character budget, the rest (taken only to reach
    # the minimum) by their first PREFIX_CHARS; plus two short non-ASCII ones
    n = next(k for k in range(1, len(pieces) + 1) if sum(map(len, pieces[:k])) >= 4000)
    first = sum(map(len, pieces[:n])) + sum(min(len(p), PREFIX_CHARS) for p in pieces[n:20])
    assert n < 20 and sum(map(len, pieces[:20])) > first and shard.non_ascii_checked == 2
    assert first < shard.checked_chars <= first + 2 * 4096 and rec["engine_checked_pieces"] == shard.checked == 22
    # a second shard in the same process: the minimum is met, only its budget is checked
    second = ShardEncoder(choice, min_pieces=20, check_chars=4000)
    for chunk in chunks[1:]:
        second.encode(chunk)
    budget = check_sample(chunks[1], 4000, 0, 0)
    assert sum(map(len, chunks[1][:len(budget) - 1])) < 4000 <= sum(len(chunks[1][i]) for i in budget)
    assert second.checked_chars <= sum(len(chunks[1][i]) for i in budget) + 2 * 4096
    assert choice.checked == shard.checked + second.checked
    # a new shard is checked again, even with a budget of 0 characters: its first piece at least
    tiny = ShardEncoder(choice, min_pieces=0, check_chars=0)
    tiny.encode(["x y z"] * 10)
    assert tiny.checked == 1
    assert CHECK_CHARS == 1 << 15 and ShardEncoder(choice).check_chars == CHECK_CHARS


def test_flat_encoding_and_arrays_equal_hf_ids_on_every_path(trained, documents):
    tok, _ = load_tokenizer(trained["tok"])
    pieces, _ = to_pieces(documents[::3] + _special_docs())
    expected = _hf_ids(tok, pieces)
    flat = np.array([i for ids in expected for i in ids], dtype=np.int64)
    lens = np.array([len(ids) for ids in expected], dtype=np.int64)
    enc, _ = convert(tok)
    for threads in (1, 2):
        arrays = tiktoken_arrays(enc, pieces, threads)
        assert all(a.dtype == np.uint32 for a in arrays)
        assert [a.tolist() for a in arrays] == tiktoken_ids(enc, pieces, threads) == expected
    matching = Tokenizer.from_file(trained["tok"])  # encode_special_tokens False: specials matched in text
    docs = _special_docs()
    assert [a.tolist() for a in tiktoken_arrays(convert(matching)[0], docs, 1, False)] == _hf_ids(matching, docs)
    corrupt = EngineChoice("auto", tok, _swapped_ranks(enc, b" the", b"in"), "test")
    for choice in (choose(tok, "auto"), choose(tok, "hf"), corrupt):
        ids, got_lens = ShardEncoder(choice).encode_flat(pieces)
        assert np.array_equal(ids, flat) and np.array_equal(got_lens, lens)
    assert corrupt.failed  # the corrupted conversion went through its HF fallback
    ids, got_lens = ShardEncoder(choose(tok, "auto")).encode_flat([])
    assert len(ids) == 0 and len(got_lens) == 0


def test_assemble_flat_equals_assemble_for_short_and_long_documents():
    rng = np.random.default_rng(0)
    for n_docs, max_len in ((300, 3000), (3000, 20), (5, 0), (1, 1)):
        counts = rng.integers(1, 4, size=n_docs)
        lists = [rng.integers(0, 60000, size=int(rng.integers(0, max_len + 1))).tolist()
                 for _ in range(int(counts.sum()))]
        flat = np.array([i for ids in lists for i in ids], dtype=np.uint32)
        lens = np.array([len(ids) for ids in lists], dtype=np.int64)
        for bos in (None, 65000):
            a = assemble(lists, counts, eos_id=65001, bos_id=bos)
            b = assemble_flat(flat, lens, counts, eos_id=65001, bos_id=bos)
            c = assemble([np.asarray(ids, dtype=np.uint32) for ids in lists], counts, eos_id=65001, bos_id=bos)
            assert a[0].dtype == b[0].dtype == c[0].dtype == np.dtype("<u2")
            assert a[0].tobytes() == b[0].tobytes() == c[0].tobytes()
            assert np.array_equal(a[1], b[1]) and np.array_equal(a[1], c[1])
    with pytest.raises(ValueError, match="ids"):
        assemble_flat(np.zeros(3, np.uint32), np.array([2]), np.array([1]), eos_id=0)


def test_auto_step_with_every_shard_reused_still_records_the_planned_engine(trained, tmp_path):
    out = str(tmp_path / "c")
    first = tokenize_source("mixed", trained["src"], out, trained["tok"], exec_config=INLINE).to_dict()
    again = tokenize_source("mixed", trained["src"], out, trained["tok"], exec_config=INLINE).to_dict()
    assert first["engine"] == again["engine"] == "tiktoken" and again["reused_shards"] == 3
    assert "no shard encoded: all reused" in again["engine_reason"] and again["engine_checked_pieces"] == 0
    with pytest.raises(EngineError, match="one of auto, hf, tiktoken"):
        tokenize_source("mixed", trained["src"], str(tmp_path / "x"), trained["tok"], exec_config=INLINE,
                        engine="fast")
    assert not os.path.exists(tmp_path / "x")


def test_a_driver_converts_a_tokenizer_once_for_every_step_that_encodes_nothing(trained, tmp_path, monkeypatch):
    """A run's tokenize steps that take every shard (one per source) plan their engine record with one
    tiktoken conversion of the shared tokenizer, not one each."""
    from datakit.tokenize import tokenize_step

    for name in ("a", "b"):
        tokenize_source("mixed", trained["src"], str(tmp_path / name), trained["tok"], exec_config=INLINE)
    calls, real = [], tokenize_step.convert
    monkeypatch.setattr(tokenize_step, "_CONVERSIONS", {})
    monkeypatch.setattr(tokenize_step, "convert", lambda tok: calls.append(1) or real(tok))
    for name in ("a", "b"):
        again = tokenize_source("mixed", trained["src"], str(tmp_path / name), trained["tok"],
                                exec_config=INLINE).to_dict()
        assert again["reused_shards"] == 3 and again["engine"] == "tiktoken"
    assert calls == [1]


# -------------------------------------------------------------------------------------- the step


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["inline", "local"])
def test_step_caches_are_byte_identical_under_hf_tiktoken_and_auto(trained, tmp_path, backend):
    cfg = ExecConfig(backend=backend, max_workers=2)
    out = {}
    for engine in ("hf", "tiktoken", "auto"):
        out[engine] = str(tmp_path / engine)
        res = tokenize_source("mixed", trained["src"], out[engine], trained["tok"], validation_fraction=0.1,
                              bos=True, exec_config=cfg, engine=engine, batch_bytes=256 << 10)
        rec = res.to_dict()
        assert rec["engine"] == ("hf" if engine == "hf" else "tiktoken"), rec
        assert rec["engine_mismatches"] == 0
        if engine != "hf":
            assert rec["engine_checked_pieces"] >= 64 and "converts to tiktoken" in rec["engine_reason"]
    _same_tree(out["hf"], out["tiktoken"])
    _same_tree(out["hf"], out["auto"])


def test_engine_setting_is_validated_and_leaves_step_identities_alone(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "hello"}\n')
    base = {"prefix": str(tmp_path / "out"), "sources": [{"name": "s", "uri": str(data), "format": "jsonl"}]}

    def identities(**tokenize) -> dict[str, str]:
        m = datakit.manifest_from_dict({**base, "tokenize": tokenize} if tokenize else base)
        return {s.name: s.identity for s in datakit.pipeline.build_steps(m, write_cache=False)}

    default = identities()
    assert "tokenize-s" in default
    assert identities(engine="tiktoken") == default == identities(engine="hf", engine_check_pieces=500)
    with pytest.raises(ManifestInvalid, match="tokenize.engine: 'fast' is not one of auto, hf, tiktoken"):
        datakit.manifest_from_dict({**base, "tokenize": {"engine": "fast"}})


def test_the_minimums_prefix_checks_alone_catch_a_corrupted_conversion(trained, documents):
    """With a one-character shard budget, every piece past the first is compared by its first
    PREFIX_CHARS only; a conversion that differs on common words is still caught there, and the
    shard's ids are HF's."""
    tok, _ = load_tokenizer(trained["tok"])
    enc, _ = convert(tok)
    corrupt = _swapped_ranks(enc, b" the", b"in")
    choice = EngineChoice("auto", tok, corrupt, "test", specials_as_text=True)
    encoder = ShardEncoder(choice, min_pieces=64, check_chars=1)
    pieces, _ = to_pieces(documents[:400])
    assert encoder.encode(pieces) == _hf_ids(tok, pieces)
    rec = encoder.record()
    assert rec["engine"] == "hf" and rec["engine_mismatches"] > 0 and rec["engine_checked_pieces"] >= 64
    assert encoder.checked_chars <= len(pieces[0]) + 63 * PREFIX_CHARS + 2 * 4096
