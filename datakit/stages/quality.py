"""The quality stage: each source's documents through the per-document filter chain (URL filter,
language ID, Gopher repetition and quality, C4, FineWeb; `datakit.quality.chain`), after normalize and
any user stage placed after it, before exact and fuzzy dedup, as the FineWeb recipe orders them.

One step `quality-<source>` per source the section enables (the `quality:` section is optional: left
out, nothing runs). It writes a documents dir with the input's file names:

- ``outputs/main/``: kept documents, sorted by id, with the measures as columns (``lang``,
  ``lang_score``, ``gopher_*``, ``rep_*``, ``c4_*``, ``fineweb_*``; null where not computed). Columns,
  not a separate attribute set: C4's line cleaning changes text and so ids, and the measures then
  travel with their documents through every later stage without a join;
- ``outputs/removed/``: id, reason (the rule, e.g. ``gopher_quality.min_stop_words``), detail, value
  (the measured value that crossed the threshold), and ``lang``, ``lang_score`` (null when a URL rule
  removed the document before language ID ran, or language ID is off).

Counters: docs_in, docs_out, removed, changed (C4 cleaned the text), ``removed/<rule>`` per rule,
``c4_lines/<why>`` per dropped-line reason, ``skipped/<group>/<code>``: documents in language <code>
(past language ID) that rule group <group> has no settings for, so it did not judge them
(`datakit.quality.language_rules`), and with language ID on, per language (contract.LANG_IN...):
``lang_in/<code>``, ``lang_out/<code>``, ``removed_lang/<code>/<rule>`` (``und``: not determined).
The run summary turns these into its per-language table, and warns when a source loses more than
``warn_removed_share`` of its documents here.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from datakit.manifest import Section
from datakit.quality.config import QualityConfig, QualityRules
from datakit.steps import StepContext

from .contract import DOCUMENTS, LANG_IN, LANG_OUT, REMOVED_LANG, UNDETERMINED, Graph, Stage
from .quality_common import add_source_steps
from .transform import REMOVED_VALUE_SCHEMA, FileKey, documents_result, run_per_file, sort_unique

if TYPE_CHECKING:  # the chain is imported where it runs: planning a run never compiles its rules
    from datakit.quality.chain import Chain

VERSION = "5"
# removed/ rows: the transform's columns and value, then the language ID's label and score
REMOVED_SCHEMA = REMOVED_VALUE_SCHEMA.append(pa.field("lang", pa.string())).append(pa.field("lang_score", pa.float64()))
_chains: dict[QualityRules, "Chain"] = {}  # one chain (lists loaded) per worker process and rules


def _chain(rules: QualityRules) -> "Chain":
    from datakit.quality.chain import Chain

    chain = _chains.get(rules)
    if chain is None:
        chain = _chains[rules] = Chain(rules)
    return chain


def output_schema(schema: pa.Schema) -> pa.Schema:
    """The input's columns (minus any earlier measure columns) + lang/lang_score + the float measures."""
    from datakit.quality.chain import LANG_COLUMNS, MEASURE_COLUMNS

    ours = set(LANG_COLUMNS) | set(MEASURE_COLUMNS)
    fields = [f for f in schema if f.name not in ours]
    fields += [pa.field("lang", pa.string()), pa.field("lang_score", pa.float64())]
    fields += [pa.field(m, pa.float64()) for m in MEASURE_COLUMNS]
    return pa.schema(fields)


def _bump(stats: dict[str, int], key: str, n: int = 1) -> None:
    stats[key] = stats.get(key, 0) + n


def _lang_key(rules: QualityRules, lang: str | None) -> str | None:
    """A document's language in the counters: lid.176's code, ``und`` when the text had no words or the
    chain stopped before language ID (a URL rule); None when language ID is off for the source."""
    return (lang or UNDETERMINED) if rules.langid.enabled else None


def _count(stats: dict[str, int], lang: str | None, rule: str | None = None) -> None:
    """One document counted: removed by ``rule`` (None: kept), per language too when it has one."""
    if rule is not None:
        _bump(stats, f"removed/{rule}")
    if lang is not None:
        _bump(stats, f"{LANG_OUT}{lang}" if rule is None else f"{REMOVED_LANG}{lang}/{rule}")


def filter_file(name: str, table: pa.Table, rules: QualityRules) -> tuple[pa.Table, list[tuple], dict[str, int]]:
    """One documents file through the chain: (kept table with measures, removed rows, stats). Removed
    rows carry the language ID's columns too, so the removed documents of a language can be found."""
    from datakit.core.documents import content_id
    from datakit.quality import langid
    from datakit.quality.chain import LANG_COLUMNS, MEASURE_COLUMNS

    chain = _chain(rules)
    schema = output_schema(table.schema)
    kept, removed = [], []
    stats = {"docs_in": table.num_rows, "changed": 0}
    docs = table.to_pylist()
    # a file's texts go to language ID together (langid.detect_many: Arrow splits them into words at once)
    # (only those the URL rule, found once per document here, lets reach it)
    urls = [chain.url_failure(d) for d in docs]
    detected: list[tuple[str, float] | None] = [None] * len(docs)
    asked = [i for i, url in enumerate(urls) if chain.reaches_langid(url)]
    for i, found in zip(asked, langid.detect_many([docs[i]["text"] for i in asked], rules.langid.max_chars)):
        detected[i] = found
    for doc, url, found in zip(docs, urls, detected):
        out = chain.run_checked(doc, url, found)
        lang = _lang_key(rules, out.measures.get("lang"))
        for why, n in out.line_drops.items():
            _bump(stats, f"c4_lines/{why}", n)
        if lang is not None:
            _bump(stats, f"{LANG_IN}{lang}")
        for group in out.skipped:
            _bump(stats, f"skipped/{group}/{out.settings.code}")
        f = out.failure
        if f is not None and not rules.annotate_only:
            removed.append((doc["id"], f.rule, f.detail, f.value, *(out.measures.get(c) for c in LANG_COLUMNS)))
            _count(stats, lang, f.rule)
            continue
        if f is not None:
            _bump(stats, f"would_remove/{f.rule}")
        row = {**doc, **{c: out.measures.get(c) for c in (*LANG_COLUMNS, *MEASURE_COLUMNS)}}
        if out.text != doc["text"]:
            stats["changed"] += 1
            row["text"], row["id"] = out.text, content_id(out.text)
        kept.append(row)
    kept, dups = sort_unique(kept, "quality.duplicate", "identical to another document after C4 cleaning")
    lang_of = {d["id"]: (d["lang"], d["lang_score"]) for d in kept}  # a duplicate has its twin's text
    for d in dups:
        _count(stats, _lang_key(rules, lang_of[d[0]][0]), d[1])
    for d in kept:
        _count(stats, _lang_key(rules, d["lang"]))
    removed += [(*d, None, *lang_of[d[0]]) for d in dups]
    stats.update(docs_out=len(kept), removed=len(removed))
    return pa.Table.from_pylist(kept, schema=schema), removed, stats


def _run(ctx: StepContext, rules: QualityRules, documents: str, source: str) -> dict:
    names, totals = run_per_file(ctx, documents, partial(filter_file, rules=rules), f"quality-{source}",
                                 removed_schema=REMOVED_SCHEMA, reuse_key=FileKey())
    for k in ("docs_in", "docs_out", "removed", "changed"):
        totals.setdefault(k, 0)
    return documents_result(names, totals, stage=STAGE.name, source=source, annotate_only=rules.annotate_only)


def build(graph: Graph) -> None:
    cfg: QualityConfig | None = graph.config(STAGE)
    if cfg is None:
        return
    for source, step in add_source_steps(graph, STAGE, cfg, _run).items():
        share = cfg.for_source(source).warn_removed_share
        if share is not None:  # the run summary's guardrail for this source (QualityRules)
            graph.warn_removed_share[step.name] = share


STAGE = Stage(name="quality", version=VERSION, build=build, section=Section("quality", QualityConfig, optional=True),
              consumes=(DOCUMENTS,), produces=(DOCUMENTS,),
              code=("datakit.quality", "datakit.core.documents", "datakit.stages.quality",
                    "datakit.stages.quality_common", "datakit.stages.transform"),
              ferry_check="datakit.ferry.checks_quality:check_quality")
