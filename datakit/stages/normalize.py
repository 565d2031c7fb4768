"""The normalize stage: every source's files -> one clean, id-sorted, exactly deduplicated documents dir,
one part per stable unit of input files (`datakit/normalize/units.py`), each unit taken from the
earlier build when its files and settings are unchanged (`datakit/normalize/incremental.py`).

Local inputs enter the identity as a fingerprint of their *content* (relative names and sha256, cached
per path/size/mtime under the prefix), so a `touch` or a copy of unchanged data rebuilds nothing, and a
changed byte rebuilds this source and everything downstream; `--dry-run` names the changed files.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from functools import partial

from datakit.core.fsio import is_local, local_path
from datakit.core.layout import FETCHED_FILES_DIR
from datakit.core.results import DocumentsResult, FilesResult
from datakit.manifest import Section, SourceSpec
from datakit.normalize.config import NormalizeConfig, PlannedFile
from datakit.core.listing import FileInfo, Listing, scan
from datakit.steps import Step, StepContext
from datakit.steps.fingerprint import fingerprint_files, relative_names

from .contract import DOCUMENTS, FILES, Graph, Stage, counters_only, document_counters, step_identity

log = logging.getLogger(__name__)

# The removal reasons of the run summary, per normalize counter, in the order normalize applies them.
_REASONS = {"rejects": "rejects", "dups": "in-source dups", "empty_dropped": "empty"}

VERSION = "5"
# What a source's own keys contribute to the identity: how to read it, not where it is or how it mixes.
_SOURCE_KEYS = ("name", "format", "text_field", "id_field", "bare", "dedup", "html_main_content")


def source_listing(spec: SourceSpec) -> Listing:
    """The source's files (the one listing's rules, then ``max_files``) and what the listing skipped."""
    found = scan(list(spec.uris), spec.exclude, spec.follow_symlinks)
    if spec.max_files:
        found.files = found.files[: spec.max_files]
    return found


def effective_config(spec: SourceSpec, section: NormalizeConfig) -> NormalizeConfig:
    """The section with this source's own override applied (html_main_content per source)."""
    if spec.html_main_content is None:
        return section
    return dataclasses.replace(section, html_main_content=spec.html_main_content)


def _downloaded_plan(ctx: StepContext, download: str) -> list[PlannedFile]:
    """The download step's record is the plan for a remote source: each file's name, size, sha256."""
    rec = ctx.deps[download]
    return [PlannedFile(rec.path(FETCHED_FILES_DIR, f.name), int(f.size), f.sha256) for f in FilesResult.of(rec).files]


def _normalize(ctx: StepContext, spec: SourceSpec, cfg: NormalizeConfig, download: str | None,
               planned: tuple[PlannedFile, ...] | None = None, links: Listing | None = None) -> dict:
    """Read exactly the planned files (never a fresh listing: a file gone since planning must fail the
    step, naming it, not vanish from the output). ``links``: the symlinks the plan's listing skipped,
    recorded in the counters (loops and broken ones also by path) for the run summary."""
    from datakit.normalize.incremental import UnitReuse
    from datakit.normalize.pipeline import normalize_source
    from datakit.steps import reuse

    plan = _downloaded_plan(ctx, download) if download else planned
    files = list(plan) if plan else source_listing(spec).files
    if links is not None and links.skipped_links():
        log.warning("source %s: %s", spec.name, links.skipped_links())
    # A unit's part depends on its own files and these settings, never on the rest of the file list (the
    # step config's "input"): so an edited file re-reads its unit only.
    settings = (VERSION, ctx.step.config["source"], ctx.step.config["normalize"])
    result = normalize_source(spec, files=files, out_dir=ctx.output, cfg=cfg, exec_config=ctx.exec_config,
                              planned=plan, reuse_from=UnitReuse(settings, reuse.load(ctx.earlier)))
    out = counters_only(result.to_dict())
    out["input_documents"] = _by_input_name(out.get("input_documents") or {}, ctx.step.inputs)
    c = out["counters"]
    if links is not None and links.skipped_links():
        c["symlinks_outside_skipped"] = links.symlinks_outside
        c["symlink_loops_skipped"] = len(links.symlink_loops)
        c["symlinks_broken_skipped"] = len(links.symlinks_broken)
        out["symlink_loops"], out["symlinks_broken"] = list(links.symlink_loops), list(links.symlinks_broken)
    removed = {label: c.get(key, 0) for key, label in _REASONS.items()}
    out["counters"] = {**c, **document_counters(c.get("records_in", 0), c.get("records_out", 0), removed)}
    return DocumentsResult.written(out)


def _by_input_name(by_rel: dict[str, int], inputs: dict[str, str]) -> dict[str, int]:
    """Records read per input file under the step's input names (relative to the files' common folder,
    where normalize names a file relative to the source root), so a dry run can say how many documents
    a changed or removed file held; {} when the names do not line up one to one."""
    names = relative_names(["/" + rel for rel in by_rel])
    out = {names["/" + rel]: n for rel, n in by_rel.items()}
    return dict(sorted(out.items())) if by_rel and set(out) == set(inputs) else {}


def _plan(listed: list[FileInfo], hashes: dict[str, str]) -> tuple[PlannedFile, ...]:
    """(path, size, sha256) of every listed local file: the contract the normalize step checks."""
    absolute = {f.path: os.path.abspath(local_path(f.path)) for f in listed}
    names = relative_names(sorted(set(absolute.values())))
    return tuple(PlannedFile(f.path, int(f.size), hashes.get(names[absolute[f.path]])) for f in listed)


def _cache_dir(prefix: str) -> str | None:
    """Where content hashes of local inputs are remembered (under the prefix; none for memory://)."""
    if prefix.startswith("memory://"):
        return None
    return f"{prefix.rstrip('/')}/.datakit/fingerprints"


def build(graph: Graph) -> None:
    section: NormalizeConfig = graph.config(STAGE)
    for spec in graph.manifest.sources:
        cfg = effective_config(spec, section)
        download = graph.files.get(spec.name)
        inputs: dict[str, str] = {}
        planned: tuple[PlannedFile, ...] | None = None
        links = None
        if download is not None:
            fingerprint = "download"
        else:
            listing = source_listing(spec)
            listed = listing.files
            links = Listing(symlinks_outside=listing.symlinks_outside, symlink_loops=listing.symlink_loops,
                            symlinks_broken=listing.symlinks_broken)
            paths = [f.path for f in listed]
            local = all(is_local(p) for p in paths)
            fp = fingerprint_files(paths, _cache_dir(graph.prefix) if local else None, save=graph.write_cache)
            fingerprint, inputs = fp.digest, fp.files
            planned = _plan(listed, fp.files) if local else None
        config = {"source": step_identity(spec, _SOURCE_KEYS), "normalize": step_identity(cfg), "input": fingerprint}
        step = Step(f"normalize-{spec.name}", partial(_normalize, spec=spec, cfg=cfg,
                                                      download=download.name if download else None,
                                                      planned=planned, links=links),
                    config, deps=(download,) if download else (), version=VERSION, inputs=inputs,
                    stage=STAGE.name, source=spec.name)
        graph.advance(spec.name, step)


STAGE = Stage(name="normalize", version=VERSION, build=build,
              section=Section("normalize", NormalizeConfig), consumes=(FILES,), produces=(DOCUMENTS,),
              code=("datakit.normalize", "datakit.core.documents", "datakit.sources.readers", "datakit.sources.extract",
                    "datakit.stages.normalize"),
              ferry_check="datakit.ferry.checks_data:check_normalize", reasons=tuple(_REASONS.values()))
