"""Language ID measured on this machine's real multilingual text: does a prefix give the whole text's
label, and what does a `min_score` threshold drop of correctly identified documents?

The corpus (deterministic, nothing downloaded), each document labelled by where it comes from:
  man/<lang>   every translated man page under /usr/share/man/<lang>/ (pt_BR -> pt, zh_CN -> zh), the gz
               roff source as datakit's `format: text` reads it; English: every 10th page of man1..man8
  ref/<lang>   every chapter of the Debian Reference (/usr/share/debian-reference/*.<lang>.html) as text
  py           every 20th module of the Python standard library (code with English docstrings)

For each document, lid.176 (datakit.quality.langid) predicts on the whole text (newlines as spaces, as
datatrove's LanguageFilter does) and on prefixes of --prefixes characters. Reported:
  agreement   per prefix, the share of documents whose label equals the whole text's (all, and per group)
  scores      per group whose expected language is known: how many the whole text labels right, and of
              those the share scoring below each --thresholds value (what that min_score would drop)
  wrong       of the documents labelled wrong, the share scoring at or above each threshold (what that
              min_score would still let through)
  docs/s      per prefix, documents per second on one core (prediction only, text in memory)

    .venv/bin/python -m benchmarks.langid                # about a minute on 2 cores
    .venv/bin/python -m benchmarks.langid --prefixes 2000 5000 --thresholds 0.3 0.65

One JSON object on stdout.

Measured (2-core machine shared with other jobs, so speeds are indicative; 2026-11-25): 6,159 documents,
50 MB: 4,040 translated man pages in 23 languages, 2,005 English ones, 105 Debian Reference chapters in
7 languages, 9 stdlib modules.
  agreement with the whole text: 2,000 chars 88.07% (Dutch 32%, Swedish 54%, Portuguese 55%, Japanese
            78%, German 85%: the roff header and licence at the top are English); 5,000 99.64%;
            10,000 and 20,000 99.97%
  docs/CPU-s: whole text 671, 2,000 chars 3,013, 5,000 1,515, 10,000 1,141
  right labels below 0.65 (the old default): English man pages 24.2%, Portuguese 39.2%, Indonesian 35.7%,
            Danish 33.3%, Swedish 32.1%, Italian 19.4%, Russian 9.3%, Dutch 9.4%, French 7.4%, Spanish 7.5%,
            German 5.4%, Japanese 3.0%; below 0.3: English 1.7%, Portuguese 8.1%, Swedish 7.1%, Italian
            5.6%, Russian 2.5%, German 1.9%, French 1.6%, Spanish 1.2%, Japanese 0.6%, Indonesian 0%
  labelled other than their directory's language: 229 (mostly untranslated English pages shipped in a
            translated directory, and character-set tables); 2.2% of them score >= 0.65, 31% >= 0.3
datakit/quality/langid.py and LangIdConfig (datakit/quality/config.py) draw their defaults from these.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sysconfig
import time
from pathlib import Path

from benchmarks.filters import html_to_text

MAN = Path("/usr/share/man")
REF = Path("/usr/share/debian-reference")


def _read(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None


def _code(dirname: str) -> str:
    """A man or reference directory's language as lid.176 names it (pt_BR -> pt, zh-cn -> zh)."""
    return re.split(r"[_-]", dirname)[0].lower()


def corpus() -> list[tuple[str, str | None, str]]:
    """(group, expected label or None, text) for every document (module docstring)."""
    docs: list[tuple[str, str | None, str]] = []
    for d in sorted(p for p in MAN.iterdir() if p.is_dir() and not p.name.startswith("man")):
        for p in sorted(d.glob("man*/*.gz")):
            text = None if p.is_symlink() else _read(p)
            if text and text.strip():
                docs.append((f"man/{_code(d.name)}", _code(d.name), text))
    english = sorted(p for p in MAN.glob("man[1-8]/*.gz") if not p.is_symlink())
    for p in english[::10]:
        text = _read(p)
        if text and text.strip():
            docs.append(("man/en", "en", text))
    for p in sorted(REF.glob("*.*.html")) if REF.is_dir() else []:  # ch01.de.html; not index.html
        lang = _code(p.name.split(".")[-2])
        docs.append((f"ref/{lang}", lang, html_to_text(p.read_text(encoding="utf-8"))))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    py = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    docs += [("py", None, p.read_text(encoding="utf-8", errors="replace")) for p in py[::20]]
    return docs


def predict(text: str, max_chars: int | None) -> tuple[str, float]:
    """lid.176's top label and score of the whole text, or of its first ``max_chars`` characters."""
    from datakit.quality import langid

    return langid.detect(text if max_chars is None else text[:max_chars])


def _timed(docs: list[str], max_chars: int | None) -> tuple[list[tuple[str, float]], float]:
    start = time.process_time()
    out = [predict(t, max_chars) for t in docs]
    return out, time.process_time() - start


def _share(n: int, d: int) -> float | None:
    return round(n / d, 4) if d else None


def agreement(groups: list[str], whole: list[tuple[str, float]], cut: list[tuple[str, float]]) -> dict:
    same = [w[0] == c[0] for w, c in zip(whole, cut)]
    per = {g: _share(sum(s for s, x in zip(same, groups) if x == g), groups.count(g)) for g in sorted(set(groups))}
    return {"all": _share(sum(same), len(same)), "groups": per, "differ": len(same) - sum(same)}


def scores(docs: list[tuple[str, str | None, str]], whole: list[tuple[str, float]], thresholds: list[float]) -> dict:
    """Per group: right (top label = expected) and the share of those below each threshold."""
    out: dict[str, dict] = {}
    wrong: list[float] = []
    for (group, expected, _), (label, score) in zip(docs, whole):
        if expected is None:
            continue
        g = out.setdefault(group, {"docs": 0, "right": 0, "right_scores": []})
        g["docs"] += 1
        if label == expected:
            g["right"] += 1
            g["right_scores"].append(score)
        else:
            wrong.append(score)
    for g in out.values():
        s = g.pop("right_scores")
        g["below"] = {str(t): _share(sum(x < t for x in s), len(s)) for t in thresholds}
    return {"groups": out, "wrong": len(wrong),
            "wrong_at_or_above": {str(t): _share(sum(x >= t for x in wrong), len(wrong)) for t in thresholds}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefixes", type=int, nargs="*", default=[2000, 5000, 10000, 20000])
    ap.add_argument("--thresholds", type=float, nargs="*", default=[0.3, 0.4, 0.5, 0.65])
    args = ap.parse_args()
    docs = corpus()
    groups, texts = [d[0] for d in docs], [d[2] for d in docs]
    whole, whole_cpu = _timed(texts, None)
    result = {"documents": len(docs), "chars": sum(map(len, texts)),
              "whole": {"docs_per_cpu_s": round(len(docs) / whole_cpu, 1)}, "prefixes": {}}
    for n in args.prefixes:
        cut, cpu = _timed(texts, n)
        result["prefixes"][str(n)] = {**agreement(groups, whole, cut), "docs_per_cpu_s": round(len(docs) / cpu, 1)}
    result["scores"] = scores(docs, whole, args.thresholds)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
