"""Corpora whose best mixture is known by construction, for the search's tests and benchmark.

Two of them, built from files on the machine (nothing downloaded):

- `write_corpus`: `clean` English prose (the /usr/share/common-licenses texts, or the standard
  library's email package when absent), one document per paragraph, and `noise`: random letter
  strings, ``noise_ratio`` times as many characters. Easy: a target drawn from `clean` is served badly
  by the token-proportional mixture (mostly noise).
- `write_known_answer`: three sources of real text, `prose` (the licenses, one document per
  paragraph), `code` (Python standard-library sources, in pieces of about 1,000 characters) and
  `other` (Russian and Japanese man pages, roff requests stripped: other languages and scripts).
  Every eighth document of each source is held out of training, and the held-out documents make the
  target set (`target-<case>.jsonl`) of a case:
    `two_of_three`: half held-out prose, half held-out code (by characters): `other` is irrelevant;
    `proportional`: the held-out documents of all three at the same rate, so the target is drawn like
                    the training data (token-proportional is the right answer; a "win" is noise);
    `one`:          held-out prose only, the smallest source: a clear win for more prose.
  The real problem the easy corpus hides: mixtures of real sources differ by less than seed noise.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import random
import re

from datakit.tokenize.fixtures import license_texts, stdlib_texts

CASES = ("two_of_three", "proportional", "one")
KNOWN_SOURCES = ("prose", "code", "other")
OTHER_LANGS = ("ru", "ja")  # Debian's manpages-ru and manpages-ja (.ci/run installs them)
_HOLDOUT = 8


def clean_docs() -> list[str]:
    texts = license_texts() or stdlib_texts(300_000, subdir="email")
    return [p.strip() for t in texts for p in t.split("\n\n") if len(p.strip()) > 200]


def noise_docs(total_chars: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    docs, size = [], 0
    while size < total_chars:
        words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(rng.randint(60, 120))]
        docs.append(" ".join(words))
        size += len(docs[-1])
    return docs


def _write_jsonl(path: str, docs: list[str]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    return path


def write_corpus(root: str, noise_ratio: float = 3.0, repeat_clean: int = 1) -> dict[str, str]:
    """Write clean.jsonl and noise.jsonl under ``root``; returns name -> path. ``repeat_clean`` copies
    the clean paragraphs with a numbered suffix, for a larger corpus (each copy a distinct document)."""
    clean = [f"{d} ({i})" if i else d for i in range(repeat_clean) for d in clean_docs()]
    noise = noise_docs(int(noise_ratio * sum(len(d) for d in clean)))
    return {name: _write_jsonl(os.path.join(root, f"{name}.jsonl"), docs)
            for name, docs in (("clean", clean), ("noise", noise))}


def _upto(docs: list[str], chars: int) -> list[str]:
    out, size = [], 0
    for d in docs:
        if size >= chars:
            break
        out.append(d)
        size += len(d)
    return out


def code_docs(chars: int) -> list[str]:
    """Standard-library sources (the top-level modules) in documents of about 1,000 characters or more:
    consecutive blocks between blank lines, up to about ``chars`` characters."""
    docs = []
    for text in stdlib_texts(2 * chars, recursive=False):
        block: list[str] = []
        for part in text.split("\n\n"):
            block.append(part)
            if sum(len(b) for b in block) >= 1000:
                docs.append("\n\n".join(block).strip())
                block = []
    return _upto(docs, chars)


_ROFF_ESCAPE = re.compile(r"\\f[BIRP]|\\f\[[A-Z]*\]|\\[&|^,/]|\\\(..|\\s[-+]?\d")


def man_text(path: str) -> str:
    """A gzipped man page as plain text: roff requests and comments dropped, common escapes removed."""
    with gzip.open(path, "rb") as f:
        raw = f.read().decode("utf-8", errors="replace")
    lines = [_ROFF_ESCAPE.sub("", line).replace("\\-", "-") for line in raw.splitlines()
             if line.strip() and not line.startswith((".", "'"))]
    return "\n".join(lines)


def _pieces(text: str, size: int = 1500) -> list[str]:
    """``text`` cut at line ends into pieces of about ``size`` characters or more."""
    out, piece = [], []
    for line in text.splitlines():
        piece.append(line)
        if sum(len(x) for x in piece) >= size:
            out.append("\n".join(piece))
            piece = []
    return out + (["\n".join(piece)] if piece else [])


def other_docs(chars: int, langs: tuple[str, ...] = OTHER_LANGS) -> list[str]:
    """Man pages in other languages in pieces of about 1,500 characters, the languages taking turns
    page by page, up to about ``chars`` characters; [] when none is installed."""
    pages = [[p for p in sorted(glob.glob(f"/usr/share/man/{lang}/man1/*.gz")) if not os.path.islink(p)]
             for lang in langs]
    docs = []
    for group in zip(*pages):
        docs += [d for p in group for d in _pieces(man_text(p)) if len(d) > 200]
        if sum(len(d) for d in docs) >= chars:
            break
    return _upto(docs, chars)


def _target(case: str, held: dict[str, list[str]]) -> list[str]:
    if case == "proportional":
        return [d for n in KNOWN_SOURCES for d in held[n]]
    if case == "one":
        return held["prose"]
    if case == "two_of_three":
        half = min(sum(len(d) for d in held["prose"]), sum(len(d) for d in held["code"]))
        return _upto(held["prose"], half) + _upto(held["code"], half)
    raise ValueError(f"unknown case {case!r}; known: {', '.join(CASES)}")


def write_known_answer(root: str, cases: tuple[str, ...] = CASES, *, code_chars: int = 300_000,
                       other_chars: int = 250_000) -> dict[str, str]:
    """Write prose.jsonl, code.jsonl, other.jsonl (the training sources, every eighth document held out)
    and target-<case>.jsonl for each of ``cases`` under ``root``; returns name -> path."""
    docs = {"prose": clean_docs(), "code": code_docs(code_chars), "other": other_docs(other_chars)}
    empty = [n for n, d in docs.items() if not d]
    if empty:
        raise ValueError(f"no text for {', '.join(empty)} on this machine (other: apt-get install "
                         f"{' '.join('manpages-' + lang for lang in OTHER_LANGS)})")
    held = {n: d[::_HOLDOUT] for n, d in docs.items()}
    out = {n: _write_jsonl(os.path.join(root, f"{n}.jsonl"), [x for i, x in enumerate(d) if i % _HOLDOUT])
           for n, d in docs.items()}
    for case in cases:
        out[f"target-{case}"] = _write_jsonl(os.path.join(root, f"target-{case}.jsonl"), _target(case, held))
    return out
