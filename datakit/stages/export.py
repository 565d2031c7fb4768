"""The export stage: with an `export:` section, one step per format (`export-<format>`) writing every
mixture component's token cache in a trainer's own format (datakit.export) under the step's directory,
with the tokenizer, the mixture weights and the identities of the steps it came from. Its deps are the
token caches and the tokenizer, so it is rebuilt exactly when one of them changes.

`request_from_plan` reads the same inputs from a published plan (`<prefix>/plan.json`, or a manifest's
plan) for `datakit export`: the plan's token caches, weights and tokenizer, each read back from its built
step's record. One module knows what an export reads, whether it runs as a step or from the CLI."""

from __future__ import annotations

from functools import partial

from datakit.core.fsio import join
from datakit.export import Component, ExportRequest, export
from datakit.export.config import ExportConfig
from datakit.export.inputs import tokenizer_file
from datakit.manifest import Manifest, Section
from datakit.steps import Step, StepContext, StepRecord
from datakit.steps.markers import is_built, read_artifact

from .contract import TOKENIZER, TOKENS, Graph, Stage, counters_only, step_identity
from .plan import Plan

VERSION = "2"


def _export(ctx: StepContext, fmt: str, splits: tuple[str, ...], tokens: dict[str, str], tokenizer: str,
            weights: dict[str, float], seq_len: int | None = None) -> dict:
    comps = tuple(Component.of(n, ctx.deps[s], weights.get(n, 0.0)) for n, s in sorted(tokens.items()))
    steps = {r.name: r.identity for r in ctx.deps.values()}
    req = ExportRequest(fmt, ctx.output, comps, tokenizer_file(ctx.deps[tokenizer]), splits, steps, seq_len)
    return counters_only(export(req, ctx.exec_config))


def _config(cfg: ExportConfig, fmt: str, weights: dict[str, float]) -> dict:
    """The step's identity config: its format, splits, the weights it records and, for hf with packing,
    ``seq_len`` (only there, so an unpacked export keeps its identity and the others never rebuild)."""
    keys = ("splits", "seq_len") if cfg.seq_len_for(fmt) else ("splits",)
    return {"format": fmt, **step_identity(cfg, keys), "weights": weights}


def build(graph: Graph) -> None:
    cfg: ExportConfig | None = graph.config(STAGE)
    if cfg is None or not graph.tokens or graph.tokenizer is None:
        return
    tokens = {n: s.name for n, s in graph.tokens.items()}
    weights = {n: float(graph.weights.get(n, 0.0)) for n in tokens}
    deps = tuple(graph.tokens[n] for n in sorted(graph.tokens)) + (graph.tokenizer,)
    for fmt in dict.fromkeys(cfg.formats):
        fn = partial(_export, fmt=fmt, splits=tuple(cfg.splits), tokens=tokens, tokenizer=graph.tokenizer.name,
                     weights=weights, seq_len=cfg.seq_len_for(fmt))
        graph.add(Step(f"export-{fmt}", fn, _config(cfg, fmt, weights), deps=deps, version=VERSION,
                       stage=STAGE.name))


def refuse(manifest: Manifest) -> None:
    cfg: ExportConfig | None = manifest.sections.get(STAGE.section.key)
    if cfg is not None and cfg.seq_len is not None and "hf" not in cfg.formats:
        raise ValueError(f"export.seq_len: {cfg.seq_len} packs the hf export only, and export.formats "
                         f"({', '.join(cfg.formats)}) has no hf; add hf or drop seq_len")


def _built(plan: Plan, prefix: str, name: str) -> StepRecord | None:
    """The record of the plan's step ``name`` when it is built under ``prefix`` (None otherwise)."""
    ref = plan.step(name)
    step_dir = join(prefix, ref.dirname) if ref is not None else None
    if step_dir is None or not is_built(step_dir):
        return None
    art = read_artifact(step_dir)
    return StepRecord(name, ref.identity, step_dir, art.get("result") or {}, art.get("counters") or {})


def request_from_plan(plan: Plan, prefix: str, fmt: str, dest: str, splits: tuple[str, ...],
                      seq_len: int | None = None) -> ExportRequest:
    """The ExportRequest of ``plan``'s components (their token caches built under ``prefix``, the plan's
    weights and tokenizer); ValueError naming what is not built and what to run."""
    wanted = {c.name: (c.tokens, c.weight) for c in plan.components if c.tokens}
    records = {n: _built(plan, prefix, step) for n, (step, _) in wanted.items()}
    tokenizer = _built(plan, prefix, plan.tokenizer) if plan.tokenizer else None
    missing = sorted(n for n, r in records.items() if r is None)
    if tokenizer is None:
        missing.append(plan.tokenizer or "the tokenizer")
    if missing or not wanted:
        raise ValueError(f"under {prefix}: token caches are not built for: {', '.join(missing) or 'any component'}; "
                         "run `datakit run` first")
    comps = tuple(Component.of(n, records[n], wanted[n][1]) for n in sorted(wanted))
    steps = {r.name: r.identity for r in (*records.values(), tokenizer)}
    return ExportRequest(fmt, dest, comps, tokenizer_file(tokenizer), splits, steps, seq_len)


STAGE = Stage(name="export", version=VERSION, build=build, section=Section("export", ExportConfig, optional=True),
              consumes=(TOKENIZER, TOKENS), code=("datakit.export", "datakit.stages.export"),
              ferry_check="datakit.ferry.checks_export:check_export", refuse=refuse)
