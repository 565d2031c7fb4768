"""Choosing and running the encoding engine of the tokenize stage: HF `tokenizers` or tiktoken.

Why two engines: encoding is most of the pipeline's CPU time, and tiktoken's rank-based byte-level BPE
runs several times faster than ``Tokenizer.encode_batch_fast`` while giving the very same ids for a
byte-level BPE whose vocabulary ids follow its merge order (what our trainer writes, and what GPT-2 /
tiktoken-derived tokenizers look like). ``convert`` checks those conditions statically and builds the
``tiktoken.Encoding``; anything it cannot prove keeps the HF engine, with a reason.

Why a check on every run: rank-based BPE (merge the adjacent pair whose concatenation has the lowest id)
equals merge-list BPE for such vocabularies in practice, not by construction, and the two regex engines
(oniguruma in HF, fancy-regex in tiktoken) could disagree on exotic text. So every shard also encodes a
deterministic sample of its pieces with HF and compares them with tiktoken's ids for the very same pieces
(see ``check_sample``): the shard's first pieces, up to ``CHECK_CHARS`` (32 Ki) characters and at least
one piece, and more first pieces while the worker process has compared fewer than ``min_pieces`` pieces
in all (``tokenize.engine_check_pieces``: a process's first chunk is checked broadly, so a conversion that
differs on common words is caught before any of its ids are written; these extra pieces are compared on
their first ``PREFIX_CHARS`` (1,024) characters, each encoded by both engines: any text is a test of the
conversion, and their whole length cost each worker ~0.3 CPU-s per step); then, until the shard's sample
holds two non-ASCII pieces, the next non-ASCII pieces of at most 4096 characters, wherever in the shard
they are. The shard's later chunks are not re-checked. The cost is bounded per shard and per process,
not proportional to the corpus: HF encodes about 3M characters per CPU-second, so the 32 Ki characters
cost ~11 ms per shard, and a process's ``min_pieces`` prefixes (64 of 1,024 characters) ~20 ms. On any
mismatch the chunk is re-encoded with HF and the rest of the step (in this process) stays on HF. The
cache bytes are therefore always HF's.

Why numpy arrays: tiktoken's ``encode_to_numpy`` hands each piece's ids over as one uint32 buffer, so
the step never builds a Python int per token (converting those lists back into an array cost more than
a tenth of the encoding time); ``ShardEncoder.encode_flat`` returns one flat array per chunk.

Why one kept encoding thread per process: tiktoken splits text with fancy-regex, whose regex caches
live in pools that serve the first thread to use them on a fast path and every other thread through a
slower shared stack (``regex_automata``'s ``Pool::get_slow``). A new helper thread per shard (or per
chunk) therefore encoded about 14% slower, in CPU, than the thread that happened to come first. The
tokenize step encodes on ``encode_thread()``, kept for the life of the worker process, and
``tiktoken_arrays`` runs its first slice on the calling thread and the others on kept threads.

Special tokens: datakit's tokenizers encode special-token spellings found in documents as plain text
(``encode_special_tokens = True``, see ``load_tokenizer``), which is tiktoken's ``encode_ordinary``. A
Tokenizer with ``encode_special_tokens = False`` matches them in raw text instead, which maps to
``allowed_special="all"`` (only when no special token is a substring of another: tiktoken's
alternation would then pick one arbitrarily, HF the longest).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

import numpy as np
from tokenizers import Tokenizer

from datakit.tokenize.byte_level import GPT2_PATTERN, bytes_to_unicode

__all__ = ["ENGINES", "EngineError", "EngineChoice", "ShardEncoder", "convert", "choose", "hf_ids", "tiktoken_ids",
           "tiktoken_arrays", "encode_thread", "check_sample", "CHECK_CHARS", "PREFIX_CHARS"]

log = logging.getLogger(__name__)

Engine = Literal["auto", "hf", "tiktoken"]
ENGINES: tuple[str, ...] = ("auto", "hf", "tiktoken")


# Characters of each shard that HF re-encodes to prove equality (its first pieces), and how many
# non-ASCII pieces (up to _NON_ASCII_MAX_CHARS long) each shard's check adds so it sees non-Latin text.
CHECK_CHARS = 1 << 15
# Characters of each piece that HF re-encodes when the piece is compared only to reach the process's
# minimum count (`ShardEncoder._sample`): 64 whole pieces of up to 10,000 characters cost each worker
# process ~0.3 CPU-s of HF encoding per step, a tenth of a 40 MB step's tiktoken time; 64 prefixes, 0.03.
PREFIX_CHARS = 1024
_NON_ASCII_EXTRA = 2
_NON_ASCII_MAX_CHARS = 4096
_BPE_OPTIONS_UNSUPPORTED = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix")


class EngineError(ValueError):
    """The requested engine cannot be used for this tokenizer; the message says why and what to do."""


# ------------------------------------------------------------------------------------------ conversion


# str.translate table: a byte-level character -> the Latin-1 character of its byte; every other
# character below 256 -> U+FFFF, which (like any unmapped character above 255) Latin-1 cannot encode.
_TO_LATIN1 = {**{i: "\uffff" for i in range(256)}, **{ord(c): chr(b) for b, c in bytes_to_unicode().items()}}


def _token_bytes(token: str) -> bytes | None:
    """A vocabulary token's raw bytes, or None if it has a character outside the byte-level alphabet."""
    try:
        return token.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        return None


def _load_json(tokenizer: str | os.PathLike | Tokenizer) -> tuple[dict, bool]:
    """(tokenizer.json as a dict, whether special-token spellings in text are encoded as plain text).
    A path is read the way the tokenize stage loads it: specials in text are plain text."""
    if isinstance(tokenizer, Tokenizer):
        return json.loads(tokenizer.to_str()), bool(tokenizer.encode_special_tokens)
    from datakit.tokenize.tokenizer import _read_tokenizer_bytes

    data, _ = _read_tokenizer_bytes(os.fspath(tokenizer))
    return json.loads(data.decode("utf-8")), True


def _normalizer_problem(j: dict) -> str | None:
    norm = j.get("normalizer")
    if norm is None or (norm.get("type") == "Sequence" and not norm.get("normalizers")):
        return None
    return f"it has a {norm.get('type')} normalizer, which rewrites text before encoding"


def _pattern(j: dict) -> tuple[str | None, str]:
    """The one regex tiktoken must split with, or (None, why not)."""
    pre = j.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    byte_level = [s for s in steps if s.get("type") == "ByteLevel"]
    splits = [s for s in steps if s.get("type") == "Split"]
    others = sorted({str(s.get("type")) for s in steps} - {"ByteLevel", "Split"})
    if len(byte_level) != 1:
        return None, "its pre-tokenizer is not byte-level (no single ByteLevel step)"
    if others:
        return None, f"its pre-tokenizer has {', '.join(others)} steps tiktoken cannot run"
    bl = byte_level[0]
    if bl.get("add_prefix_space"):
        return None, "its ByteLevel pre-tokenizer adds a prefix space"
    regexes = [s for s in splits] + ([bl] if bl.get("use_regex", True) else [])
    if len(regexes) != 1:
        return None, f"its pre-tokenizer splits with {len(regexes)} regexes; tiktoken runs exactly one"
    if not splits:
        return GPT2_PATTERN, ""
    split = splits[0]
    if steps.index(split) > steps.index(bl):
        return None, "its Split step runs after the byte-level mapping"
    regex = (split.get("pattern") or {}).get("Regex")
    if regex is None or split.get("behavior") != "Isolated" or split.get("invert"):
        return None, "its Split step is not an isolating regex split (pattern Regex, Isolated, not inverted)"
    return regex, ""


def _model_problem(j: dict) -> str | None:
    model = j.get("model") or {}
    if model.get("type") != "BPE":
        return f"its model is {model.get('type')}, not BPE"
    bad = [k for k in _BPE_OPTIONS_UNSUPPORTED if model.get(k) not in (None, "")]
    if bad:
        return f"its BPE model sets {', '.join(bad)}"
    return None


def _merge_pairs(merges: list) -> list[tuple[str, str]]:
    """Merges as pairs: tokenizers >= 0.20 writes [a, b], older versions "a b"."""
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]


def _ranks(model: dict) -> tuple[dict[bytes, int] | None, str]:
    """mergeable_ranks (token bytes -> HF id) for the 256 bytes and every merge result, provided the
    ids grow with merge order (then "lowest id first" is "earliest merge first")."""
    vocab: dict[str, int] = model["vocab"]
    ranks: dict[bytes, int] = {}
    for b, ch in bytes_to_unicode().items():
        if ch not in vocab:
            return None, f"its vocabulary lacks the byte-level token for byte {b:#04x}"
        ranks[bytes([b])] = vocab[ch]
    last = max(ranks.values())
    for i, (a, b) in enumerate(_merge_pairs(model.get("merges") or [])):
        merged = a + b
        tid, raw = vocab.get(merged), _token_bytes(merged)
        if tid is None or raw is None or a not in vocab or b not in vocab:
            return None, f"merge {i} ({a!r}, {b!r}) names tokens missing from its byte-level vocabulary"
        if tid <= last:
            return None, (f"its ids do not follow merge order (merge {i} ({a!r}, {b!r}) gives id {tid}, "
                          f"not above {last})")
        ranks[raw] = last = tid
    return ranks, ""


def _specials(j: dict, ranks: dict[bytes, int], as_text: bool) -> tuple[dict[str, int] | None, str]:
    """Added tokens -> tiktoken special tokens. Non-special added tokens are matched in raw text by HF
    even when specials are not, with options tiktoken has no notion of: not convertible."""
    specials: dict[str, int] = {}
    used = set(ranks.values())
    for t in j.get("added_tokens") or []:
        if not t.get("special"):
            return None, f"it has a non-special added token {t.get('content')!r}"
        if t["id"] in used:
            return None, f"special token {t.get('content')!r} shares id {t['id']} with a BPE token"
        specials[t["content"]] = t["id"]
    if not as_text:
        nested = [a for a in specials for b in specials if a != b and a in b]
        if nested:
            return None, f"special token {nested[0]!r} is part of another special token"
        stripping = [t["content"] for t in j.get("added_tokens") or []
                     if t.get("lstrip") or t.get("rstrip") or t.get("single_word")]
        if stripping:
            return None, f"special token {stripping[0]!r} is matched with lstrip/rstrip/single_word"
    return specials, ""


def convert(tokenizer: str | os.PathLike | Tokenizer) -> tuple[Any | None, str]:
    """(tiktoken.Encoding, "") that reproduces ``tokenizer``'s ids, or (None, why it cannot).

    The reason is user-facing: it names what is not convertible and says the HF engine is used."""
    import tiktoken

    j, as_text = _load_json(tokenizer)
    problem = _normalizer_problem(j) or _model_problem(j)
    pattern = ranks = specials = None
    if problem is None:
        pattern, problem = _pattern(j)
    if not problem:
        ranks, problem = _ranks(j["model"])
    if not problem:
        specials, problem = _specials(j, ranks, as_text)
    if problem:
        return None, f"tokenizer not convertible to tiktoken: {problem}; the HF tokenizers engine is used"
    try:
        enc = tiktoken.Encoding("datakit-bpe", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    except Exception as e:  # a pattern fancy-regex cannot compile, duplicate ids, ...
        return None, f"tokenizer not convertible to tiktoken: {type(e).__name__}: {e}; the HF tokenizers engine is used"
    return enc, ""


# --------------------------------------------------------------------------------------------- running


@dataclass
class EngineChoice:
    """The engine of one step in one process: the HF tokenizer, the converted encoding when tiktoken is
    to run, and once a check failed, why the rest of the step runs on HF."""

    setting: str
    hf: Tokenizer
    encoding: Any | None
    reason: str
    specials_as_text: bool = True  # the HF tokenizer's encode_special_tokens
    failed: str = ""
    checked: int = 0  # pieces compared so far in this process (the minimum sample counts these)


def choose(tok: Tokenizer, setting: str, *, where: str = "tokenizer",
           converted: tuple[Any, str] | None = None) -> EngineChoice:
    """The engine for ``setting`` (auto | hf | tiktoken). Forcing tiktoken on a tokenizer it cannot
    reproduce raises EngineError naming why; auto then quietly keeps HF. ``converted``: what `convert`
    gave for this tokenizer, when the caller keeps it (a worker converts a tokenizer once, not per step)."""
    if setting not in ENGINES:
        raise EngineError(f"tokenize.engine must be one of {', '.join(ENGINES)}, got {setting!r}")
    if setting == "hf":
        return EngineChoice(setting, tok, None, "engine hf: set in tokenize.engine", tok.encode_special_tokens)
    enc, reason = converted if converted is not None else convert(tok)
    if enc is None and setting == "tiktoken":
        raise EngineError(f"{where}: tokenize.engine is tiktoken, but the {reason.split(';')[0]}. "
                          "Set tokenize.engine to auto (or hf) to encode with HF tokenizers.")
    reason = reason or f"engine {setting}: the tokenizer converts to tiktoken; a sample of each shard is checked against HF"
    return EngineChoice(setting, tok, enc, reason, tok.encode_special_tokens)


def _hf_encodings(tok: Tokenizer, pieces: Sequence[str]) -> list:
    return tok.encode_batch_fast(list(pieces), add_special_tokens=False) if pieces else []


def hf_ids(tok: Tokenizer, pieces: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in _hf_encodings(tok, pieces)]


_POOLS: dict[tuple[str, int], ThreadPoolExecutor] = {}


def encode_thread() -> ThreadPoolExecutor:
    """This process's one kept encoding thread (see the module docstring: a tiktoken encoding is
    fastest on the thread that used it first, so the tokenize step encodes every chunk of every shard
    on this thread rather than on a new thread per shard)."""
    return _kept_threads("encode", 1)


def _kept_threads(name: str, n: int) -> ThreadPoolExecutor:
    """A pool of ``n`` threads kept for the life of the process (one per name and size)."""
    key = (name, n)
    if key not in _POOLS:
        _POOLS[key] = ThreadPoolExecutor(max_workers=n, thread_name_prefix=f"datakit-{name}")
    return _POOLS[key]


def _in_slices(run: Callable[[Sequence[str]], list], pieces: Sequence[str], threads: int) -> list:
    """``run`` over ``threads`` contiguous slices of ``pieces``, results in order: the first slice on
    this thread (which owns the encoding's regex caches when it is the step's encode thread), the
    others on kept helper threads (new threads per call would start cold every time)."""
    if threads <= 1 or len(pieces) < 2 * threads:
        return run(pieces)
    step = math.ceil(len(pieces) / threads)
    pool = _kept_threads("encode-slices", threads - 1)
    rest = [pool.submit(run, pieces[s:s + step]) for s in range(step, len(pieces), step)]
    out = run(pieces[:step])
    for f in rest:
        out.extend(f.result())
    return out


def tiktoken_ids(enc: Any, pieces: Sequence[str], threads: int, specials_as_text: bool = True) -> list[list[int]]:
    """Pieces in ``threads`` contiguous slices, one Rust call per piece (each releases the GIL)."""
    if specials_as_text:
        one = enc.encode_ordinary
    else:
        def one(text: str) -> list[int]:
            return enc.encode(text, allowed_special="all")
    return _in_slices(lambda part: [one(p) for p in part], pieces, threads)


def tiktoken_arrays(enc: Any, pieces: Sequence[str], threads: int = 1,
                    specials_as_text: bool = True) -> list[np.ndarray]:
    """``tiktoken_ids`` as one uint32 array per piece (``Encoding.encode_to_numpy``: the ids stay in
    tiktoken's buffer, no Python int is made per token). With no special token allowed, tiktoken's
    ``encode`` merely scans for special tokens it then ignores: the ids are ``encode_ordinary``'s."""
    if not hasattr(enc, "encode_to_numpy"):  # tiktoken < 0.7
        return [np.asarray(ids, dtype=np.uint32) for ids in tiktoken_ids(enc, pieces, threads, specials_as_text)]
    to_numpy, allowed = enc.encode_to_numpy, (set() if specials_as_text else "all")
    return _in_slices(lambda part: [to_numpy(p, allowed_special=allowed, disallowed_special=()) for p in part],
                      pieces, threads)


def check_sample(pieces: Sequence[str], budget_chars: float, min_pieces: int = 0,
                 non_ascii: int = _NON_ASCII_EXTRA) -> list[int]:
    """Which pieces of a chunk the check compares (sorted): the first ones until they hold
    ``budget_chars`` characters and number at least ``min_pieces`` (none if both are <= 0), then the
    first ``non_ascii`` non-ASCII pieces of at most 4096 characters among the rest."""
    n = used = 0
    while n < len(pieces) and (used < budget_chars or n < min_pieces):
        used += len(pieces[n])
        n += 1
    extra = [i for i in range(n, len(pieces))
             if len(pieces[i]) <= _NON_ASCII_MAX_CHARS and not pieces[i].isascii()][:max(0, non_ascii)]
    return list(range(n)) + extra


@dataclass
class ShardEncoder:
    """Encodes one shard's chunks with the chosen engine, checking a sample of the shard against HF (see
    the module docstring and ``check_sample``); ``record()`` is what the shard reports.

    check_chars: characters of the shard's first pieces HF re-encodes (at least one piece is checked);
    min_pieces: pieces per worker process compared at least (``EngineChoice.checked`` counts them)."""

    choice: EngineChoice
    threads: int = 1
    min_pieces: int = 64
    check_chars: int = CHECK_CHARS
    checked: int = 0
    mismatches: int = 0
    engines: set = field(default_factory=set)
    checked_chars: int = 0
    non_ascii_checked: int = 0

    def _sample(self, pieces: Sequence[str]) -> tuple[list[int], list[int]]:
        """(the pieces HF re-encodes whole, those it re-encodes the first `PREFIX_CHARS` of): `check_sample`'s
        pieces, the ones taken only to reach the process's minimum count by their prefix."""
        budget = self.check_chars - self.checked_chars
        if self.checked == 0:
            budget = max(budget, 1)  # every shard compares at least its first piece
        idx = check_sample(pieces, budget, self.min_pieces - self.choice.checked,
                           _NON_ASCII_EXTRA - self.non_ascii_checked)
        within_budget = len(check_sample(pieces, budget, 0, 0))
        first_run = next((k for k, i in enumerate(idx) if i != k), len(idx))
        prefix = [i for i in idx[:first_run] if i >= within_budget]
        whole = [i for i in idx if not within_budget <= i < first_run]
        texts = [pieces[i] for i in whole] + [pieces[i][:PREFIX_CHARS] for i in prefix]
        self.checked_chars += sum(map(len, texts))
        self.non_ascii_checked += sum(1 for t in texts if not t.isascii())
        return whole, prefix

    def _run(self, pieces: Sequence[str]) -> tuple[str, list]:
        """("tiktoken", one uint32 array per piece) or ("hf", HF Encodings)."""
        c = self.choice
        if c.encoding is None or c.failed:
            self.engines.add("hf")
            return "hf", _hf_encodings(c.hf, pieces)
        arrays = tiktoken_arrays(c.encoding, pieces, self.threads, c.specials_as_text)
        whole, prefix = self._sample(pieces)
        heads = [pieces[i][:PREFIX_CHARS] for i in prefix]
        got = [arrays[i] for i in whole] + tiktoken_arrays(c.encoding, heads, 1, c.specials_as_text)
        expected = hf_ids(c.hf, [pieces[i] for i in whole] + heads)
        bad = [i for i, g, e in zip(whole + prefix, got, expected) if g.tolist() != e]
        self.checked += len(got)
        c.checked += len(got)
        if not bad:
            self.engines.add("tiktoken")
            return "tiktoken", arrays
        self.mismatches += len(bad)
        c.failed = (f"tiktoken gave different ids than HF on {len(bad)} of {len(got)} checked pieces "
                    f"(first: piece {bad[0]} of a chunk, {pieces[bad[0]][:60]!r}); HF encodes the rest")
        log.warning("tokenize engine: %s", c.failed)
        self.engines.add("hf")
        return "hf", _hf_encodings(c.hf, pieces)

    def encode(self, pieces: Sequence[str]) -> list[list[int]]:
        """Each piece's ids, as lists."""
        kind, out = self._run(pieces)
        return [a.tolist() for a in out] if kind == "tiktoken" else [e.ids for e in out]

    def encode_flat(self, pieces: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(all pieces' ids concatenated, ids per piece): what the step assembles documents from."""
        kind, out = self._run(pieces)
        lens = np.fromiter(map(len, out), dtype=np.int64, count=len(out))
        if kind == "tiktoken":
            ids = np.concatenate(out) if out else np.empty(0, np.uint32)
        else:
            ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in out), dtype=np.int64,
                              count=int(lens.sum()))
        return ids, lens

    def record(self) -> dict:
        """engine ("tiktoken" only if every chunk of this shard was tiktoken's), reason, check counts."""
        engine = "tiktoken" if self.engines == {"tiktoken"} else "hf"
        reason = self.choice.failed or self.choice.reason
        return {"engine": engine, "engine_reason": reason, "engine_checked_pieces": self.checked,
                "engine_mismatches": self.mismatches}
