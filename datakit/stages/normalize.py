"""The normalize stage: every source's files -> one clean, id-sorted, exactly deduplicated documents dir.

Local inputs enter the identity as a fingerprint of their *content* (relative names and sha256, cached
per path/size/mtime under the prefix), so a `touch` or a copy of unchanged data rebuilds nothing, and a
changed byte rebuilds this source and everything downstream; `--dry-run` names the changed files.
"""

from __future__ import annotations

import dataclasses
from functools import partial

from datakit.core.fsio import is_local
from datakit.manifest import Section, SourceSpec
from datakit.normalize.config import NormalizeConfig
from datakit.sources.fetch import FILES_DIR
from datakit.shuffle import FileInfo, list_files
from datakit.steps import Step, StepContext
from datakit.steps.fingerprint import fingerprint_files

from .contract import DOCUMENTS, FILES, Graph, Stage, counters_only, identity_fields

VERSION = "1"
# What a source's own keys contribute to the identity: how to read it, not where it is or how it mixes.
_SOURCE_KEYS = ("name", "format", "text_field", "id_field", "bare", "dedup", "html_main_content")


def source_files(spec: SourceSpec) -> list[FileInfo]:
    files = list_files(list(spec.uris), exclude=spec.exclude)
    if spec.max_files:
        files = files[: spec.max_files]
    return files


def effective_config(spec: SourceSpec, section: NormalizeConfig) -> NormalizeConfig:
    """The section with this source's own override applied (html_main_content per source)."""
    if spec.html_main_content is None:
        return section
    return dataclasses.replace(section, html_main_content=spec.html_main_content)


def _normalize(ctx: StepContext, spec: SourceSpec, cfg: NormalizeConfig, download: str | None) -> dict:
    from datakit.normalize.pipeline import normalize_source

    files = list_files(ctx.deps[download].path(FILES_DIR)) if download else source_files(spec)
    result = normalize_source(
        name=spec.name, files=files, fmt=spec.format, text_field=spec.text_field, id_field=spec.id_field,
        bare=spec.bare, dedup=spec.dedup, out_dir=ctx.output, cfg=cfg, exec_config=ctx.exec_config,
    )
    return counters_only(result.to_dict())


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
        if download is not None:
            fingerprint = "download"
        else:
            paths = [f.path for f in source_files(spec)]
            local = all(is_local(p) for p in paths)
            fp = fingerprint_files(paths, _cache_dir(graph.prefix) if local else None, save=graph.write_cache)
            fingerprint, inputs = fp.digest, fp.files
        source = {k: getattr(spec, k) for k in _SOURCE_KEYS}
        config = {"source": source, "normalize": identity_fields(cfg), "input": fingerprint}
        step = Step(f"normalize-{spec.name}", partial(_normalize, spec=spec, cfg=cfg,
                                                      download=download.name if download else None),
                    config, deps=(download,) if download else (), version=VERSION, inputs=inputs,
                    stage=STAGE.name, source=spec.name)
        graph.documents[spec.name] = graph.add(step)


STAGE = Stage(name="normalize", version=VERSION, build=build,
              section=Section("normalize", NormalizeConfig), consumes=(FILES,), produces=(DOCUMENTS,),
              code=("datakit.normalize", "datakit.sources.readers", "datakit.stages.normalize"),
              checks="datakit.ferry.checks_data:check_normalize")
