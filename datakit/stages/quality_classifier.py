"""The quality_classifier stage: a fastText quality classifier trained on the run's own documents, every
document of the scored sources scored (`quality_score`), and selection by threshold, exact top fraction
or quality tiers (`datakit.classify`). After pii, before the tokenizer: documents are final,
so the negatives are a uniform sample of the deduplicated corpus and every score is of the trained text.

Steps:
- ``quality-classifier-train``: the model file (``model.bin``, the step's artifact, a fastText model usable
  anywhere; its identity is the config plus the identities of the documents it learned from, and a
  labels/positive file's sha256), its compact scoring form (``scoring.bin``: the same probabilities with
  dimension 1, ``datakit.classify.model.compact_model``) and held-out ``metrics`` (precision, recall, F1,
  AUC) in its result; the run summary shows them.
- ``qscore-<source>``: every document with a ``quality_score`` column (nothing removed), scored from the
  compact model by ``datakit.classify.compact`` (fastText's probabilities within ~1e-6, vectorised over
  the file). The model loads once per worker process (cached by path and sha256).
- ``qselect-<source>`` (threshold, top_fraction): the kept documents; ``outputs/removed/`` holds the others
  with reason ``quality_classifier``, the rule as detail and the score as value.
- ``qselect-<source>.<tier>`` (tiers): one step per tier, each a training-mixture component
  ``<source>.<tier>`` with weight ``tier.weight x source weight``; the lowest tier's removed/ records the
  documents below every tier.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import pyarrow as pa

from datakit.core.arrow_numpy import from_bools, from_numpy
from datakit.core.fsio import atomic_write_bytes, is_local, local_path, read_bytes, read_parquet_metadata, sha256_file
from datakit.core.layout import join
from datakit.core.results import StepResult
from datakit.manifest import Manifest, Section
from datakit.classify import heldout
from datakit.classify import model as clf
from datakit.classify import select as sel
from datakit.classify.config import ClassifierConfig
from datakit.shuffle import Dataset
from datakit.steps import Step, StepContext

from .contract import DOCUMENTS, Graph, Stage, StageSummary, step_identity
from .transform import BATCH_BYTES, REMOVED_VALUE_SCHEMA, FileKey, documents_result, input_names, run_per_file

VERSION = "4"
TRAIN_STEP = "quality-classifier-train"
MODEL_FILE = "model.bin"
SCORING_FILE = "scoring.bin"


@dataclass(frozen=True, kw_only=True)
class ClassifierModel(StepResult):
    """The training step's result, read by the scoring steps: the model files (relative to its output),
    their sha256 and the held-out metrics."""

    LABEL: ClassVar[str] = "a quality classifier model"
    REQUIRED: ClassVar[tuple[str, ...]] = ("scoring_model", "scoring_sha256")

    scoring_model: str
    scoring_sha256: str
    model: str | None = None
    model_sha256: str | None = None
    metrics: dict | None = None


def _dirs(ctx: StepContext, steps: list[str]) -> list[str]:
    return [local_path(ctx.deps[s].output) for s in steps]


def _train(ctx: StepContext, cfg: ClassifierConfig, positives: list[str], negatives: list[str]) -> dict:
    if cfg.labels is not None:  # every line checked before anything is trained
        labels = clf.read_labels(cfg.labels, cfg.label_threshold)
        examples = clf.examples_from_labels(cfg, labels, _dirs(ctx, negatives))
    else:
        examples = clf.examples_from_corpus(cfg, _dirs(ctx, positives), _dirs(ctx, negatives))
    _check_counts(examples, cfg)
    train, held = heldout.split(examples, cfg.holdout, cfg.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, MODEL_FILE)
        clf.train_model(train, cfg, path)
        compact = os.path.join(tmp, SCORING_FILE)
        clf.compact_model(path, compact)
        scores = clf.load_scorer(compact, sha256_file(compact)).score([e.text for e in held], cfg.max_chars)
        blob, compact_blob = read_bytes(path), read_bytes(compact)
        sha, compact_sha = sha256_file(path), sha256_file(compact)
    metrics = heldout.metrics([e.positive for e in held], scores)
    weak = heldout.too_weak(metrics, cfg.min_auc)
    if weak:
        raise ValueError(weak)
    atomic_write_bytes(join(ctx.output, MODEL_FILE), blob)
    atomic_write_bytes(join(ctx.output, SCORING_FILE), compact_blob)
    atomic_write_bytes(join(ctx.output, "metrics.json"), json.dumps(metrics, indent=1).encode())
    npos = sum(e.positive for e in examples)
    return ClassifierModel.written({
        "stage": STAGE.name, "model": MODEL_FILE, "model_sha256": sha, "scoring_model": SCORING_FILE,
        "scoring_sha256": compact_sha, "metrics": metrics,
        "counters": {"examples": len(examples), "positives": npos, "negatives": len(examples) - npos,
                     "train_docs": len(train), "heldout_docs": len(held)}})


def _check_counts(examples: list[clf.Example], cfg: ClassifierConfig) -> None:
    """Refuse, with the counts, examples too few to train on and measure (`heldout.too_few`): the class
    sizes are known only now, after the documents were built."""
    ids = {e.id: e.positive for e in examples}
    npos = sum(ids.values())
    origin = (f"labels: {cfg.labels}" if cfg.labels is not None else
              f"positives: {', '.join(cfg.positives + cfg.positive_files)}")
    problem = heldout.too_few(npos, len(ids) - npos, cfg.holdout, f"quality_classifier ({origin})")
    if problem:
        raise ValueError(problem)


def score_file(name: str, table: pa.Table, model_path: str, sha: str,
               max_chars: int) -> tuple[pa.Table, list, dict[str, int]]:
    """One documents file with a ``quality_score`` column (same rows, same order), scored with the compact
    model at ``model_path`` (``clf.compact_model``) straight from the file's Arrow text column."""
    scores = clf.load_scorer(model_path, sha).score(table.column("text"), max_chars)
    if sel.SCORE in table.column_names:
        table = table.drop([sel.SCORE])
    table = table.append_column(sel.SCORE, from_numpy(scores))
    n = table.num_rows
    return table, [], {"docs_in": n, "docs_out": n, "removed": 0}


def _score(ctx: StepContext, source: str, documents: str, model: str, cfg: ClassifierConfig) -> dict:
    rec = ctx.deps[model]
    trained = ClassifierModel.of(rec)
    if not is_local(rec.output):
        raise ValueError(f"{rec.output}: the quality classifier scores with a local model file; run with a local "
                         "prefix (or a mirror) for this stage")
    fn = partial(score_file, model_path=local_path(rec.path(trained.scoring_model)), sha=trained.scoring_sha256,
                 max_chars=cfg.max_chars)
    # A file's scores depend on the model's bytes and the file only: keyed by the model's sha256 (not
    # by the training step's identity), a rebuild that trained the same model again (its examples did
    # not change) or a change to a few files rescores those files only.
    key = FileKey(settings={"scoring_sha256": trained.scoring_sha256, "max_chars": cfg.max_chars})
    names, totals = run_per_file(ctx, documents, fn, f"qscore-{source}", reuse_key=key, batch_bytes=BATCH_BYTES)
    return documents_result(names, totals, stage=STAGE.name, source=source)


def select_file(name: str, table: pa.Table, cfg: ClassifierConfig, cut: sel.Key | None, tier: str | None,
                record_removed: bool, source: str = "") -> tuple[pa.Table, list, dict[str, int]]:
    """One file's selection. A tier step also counts, per other tier, the documents that went there
    (``moved/<source>.<tier>``), so the summary says where a tier's documents went, not "removed"."""
    mask = sel.keep_mask(table, cfg, cut, tier)
    kept = table.filter(from_bools(mask))  # not pa.array: it imports pandas into the worker
    stats = {"docs_in": table.num_rows, "docs_out": kept.num_rows}
    scores, ids = table.column(sel.SCORE).to_pylist(), table.column("id").to_pylist()
    tiers = [sel.tier_of(scores[i], cfg.tiers) if cfg.select == "tiers" else None for i in range(len(mask))]
    below = [i for i, keep in enumerate(mask) if not keep and tiers[i] is None]
    removed = [(ids[i], sel.REASON, sel.removal_detail(cfg, cut), scores[i]) for i in below] if record_removed else []
    stats[f"removed/{sel.REASON}"] = len(removed)
    other = table.num_rows - kept.num_rows - len(removed)
    if other:
        stats["removed/other tiers"] = other
    for i, keep in enumerate(mask):
        if not keep and tiers[i] is not None:
            key = f"moved/{source}.{tiers[i]}"
            stats[key] = stats.get(key, 0) + 1
    return kept, removed, stats


def _cut(ctx: StepContext, documents: str, cfg: ClassifierConfig) -> tuple[sel.Key | None, int]:
    """The exact top-fraction cut over every file of the source: (cut key, documents kept)."""
    src, names = input_names(ctx, documents, "qselect")
    paths = [join(src.main, n) for n in names]
    n = sum(read_parquet_metadata(p).num_rows for p in paths)
    k = round(cfg.top_fraction * n)
    per_file = (Dataset.from_items(paths, num_shards=len(paths))
                .map(partial(sel.top_keys, k=k)).collect(ctx.exec_config))
    return sel.cut_key(per_file, k), k


def _select(ctx: StepContext, source: str, documents: str, cfg: ClassifierConfig, tier: str | None) -> dict:
    cut = _cut(ctx, documents, cfg)[0] if cfg.select == "top_fraction" else None
    lowest = cfg.select != "tiers" or tier == cfg.tiers[-1].name
    fn = partial(select_file, cfg=cfg, cut=cut, tier=tier, record_removed=lowest, source=source)
    # A file's selection depends on its scores, the step's settings and (top_fraction) the source-wide
    # cut: an unchanged file under an unchanged cut is taken from the earlier build.
    key = FileKey(settings={"config": ctx.step.config, "cut": list(cut) if cut is not None else None})
    names, totals = run_per_file(ctx, documents, fn, f"qselect-{source}", removed_schema=REMOVED_VALUE_SCHEMA,
                                 reuse_key=key)
    totals.setdefault(f"removed/{sel.REASON}", 0)
    spec = next((t for t in cfg.tiers if t.name == tier), None)
    kept_if = {"kept_if": f"scored ≥ {spec.min_score:g}"} if spec is not None else {}
    return documents_result(names, totals, stage=STAGE.name, source=source, tier=tier, **kept_if)


def _train_step(graph: Graph, cfg: ClassifierConfig) -> Step:
    names = graph.source_names
    positives = [graph.documents[n] for n in names if n in cfg.positives]
    pool = names if cfg.labels is not None else cfg.negative_pool(names)
    negatives = [graph.documents[n] for n in pool if n not in cfg.positives or cfg.labels is not None]
    fn = partial(_train, cfg=cfg, positives=[s.name for s in positives], negatives=[s.name for s in negatives])
    return graph.add(Step(TRAIN_STEP, fn, {"config": step_identity(cfg)}, deps=tuple(positives + negatives),
                          version=VERSION, stage=STAGE.name))


def build(graph: Graph) -> None:
    cfg: ClassifierConfig | None = graph.config(STAGE)
    if cfg is None or not cfg.enabled:
        return
    model = _train_step(graph, cfg)
    for n in cfg.scored_sources(graph.source_names):
        docs = graph.documents[n]
        scored = graph.advance(n, Step(f"qscore-{n}", partial(_score, source=n, documents=docs.name,
                                                               model=model.name, cfg=cfg),
                                       step_identity(cfg, ("max_chars",)),
                                       deps=(docs, model), version=VERSION, stage=STAGE.name, source=n))
        if cfg.select == "none":
            continue
        sel_config = step_identity(cfg, ("select", "threshold", "top_fraction", "tiers"))
        if cfg.select != "tiers":
            graph.advance(n, Step(
                f"qselect-{n}", partial(_select, source=n, documents=scored.name, cfg=cfg, tier=None), sel_config,
                deps=(scored,), version=VERSION, stage=STAGE.name, source=n))
            continue
        _add_tiers(graph, cfg, n, scored, sel_config)


def _add_tiers(graph: Graph, cfg: ClassifierConfig, source: str, scored: Step, sel_config: dict) -> None:
    """One step per tier; the source's mixture component is replaced by one per tier."""
    weight = graph.weights.get(source, 1.0)
    parts = {}
    for tier in cfg.tiers:
        component = f"{source}.{tier.name}"
        step = Step(f"qselect-{component}", partial(_select, source=source, documents=scored.name, cfg=cfg,
                                                     tier=tier.name),
                    {**sel_config, "tier": tier.name}, deps=(scored,), version=VERSION, stage=STAGE.name,
                    source=component)
        parts[component] = (step, tier.weight * weight)
    graph.split(source, parts)


def refuse(manifest: Manifest) -> None:
    """A tier component must not be a source's name; the negative sample must be able to fill its share
    of the held-out split (`heldout.shortfall`). (Unknown source names are located errors when the
    manifest loads: the config marks those fields.)"""
    cfg: ClassifierConfig | None = manifest.sections.get(STAGE.section.key)
    if cfg is None or not cfg.enabled:
        return
    names = [s.name for s in manifest.sources]
    if cfg.select == "tiers":
        for n in cfg.scored_sources(names):
            clash = [f"{n}.{t.name}" for t in cfg.tiers if f"{n}.{t.name}" in names]
            if clash:
                raise ValueError(f"quality_classifier.tiers: component {clash[0]} (source {n}, tier) is also a "
                                 "source's name; rename the tier or the source")
    if cfg.labels is None and not cfg.negative_pool(names):
        raise ValueError("quality_classifier: no source left to sample negatives from; give negative_sources")
    few = heldout.shortfall(cfg.negatives, cfg.holdout, "negative") if cfg.labels is None else None
    if few:  # the sample holds at most `negatives`; positives are counted when the training step starts
        raise ValueError(f"quality_classifier.negatives: {cfg.negatives}: {few}")


def _num(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def summarize(counters: dict[str, int], result: dict) -> StageSummary | None:
    """The classifier's held-out figures (the training step's result): the summary's ``classifier``
    section and one line."""
    m = result.get("metrics")
    if not m:
        return None
    line = (f"quality classifier: held-out precision {_num(m.get('precision'))}, recall {_num(m.get('recall'))}, "
            f"F1 {_num(m.get('f1'))}, AUC {_num(m.get('auc'))} on {m.get('heldout')} documents "
            f"({counters.get('train_docs')} trained on)")
    if m.get("undefined"):  # null metrics say why (datakit.classify.heldout)
        line += "; undefined: " + "; ".join(f"{k} ({why})" for k, why in m["undefined"].items())
    return StageSummary({"classifier": {"metrics": m, **counters}}, (line,))


STAGE = Stage(name="quality_classifier", version=VERSION, build=build, summarize=summarize,
              section=Section("quality_classifier", ClassifierConfig, optional=True),
              consumes=(DOCUMENTS,), produces=(DOCUMENTS,),
              code=("datakit.classify", "datakit.core.documents", "datakit.stages.quality_classifier",
                    "datakit.stages.transform"),
              ferry_check="datakit.ferry.checks_classifier:check_quality_classifier", refuse=refuse)
