"""The download stage: a remote source's files, fetched once into the step dir (pinned, verified)."""

from __future__ import annotations

from functools import partial

from datakit.core.layout import FETCHED_FILES_DIR
from datakit.core.results import FilesResult
from datakit.manifest import SourceSpec
from datakit.steps import Step, StepContext, StepRecord

from .contract import FILES, Graph, Stage, counters_only, step_identity

VERSION = "1"


def _download(ctx: StepContext, spec: SourceSpec) -> dict:
    """Fetch, then record the files by their paths relative to the step dir (a mirrored or moved
    download stays valid)."""
    from datakit.sources.fetch import fetch_source

    result = fetch_source(spec, ctx.output).to_dict()
    result.pop("out_dir", None)
    for f in result["files"]:
        f["path"] = f"{FETCHED_FILES_DIR}/{f['name']}"
    return FilesResult.written(counters_only(result))


def _recheck(record: StepRecord, spec: SourceSpec) -> str | None:
    """A kept copy is rebuilt when the source no longer accepts it unconfirmed, or the server now
    answers differently (see ``fetch.unconfirmed_copy`` and ``fetch.upstream_changes``)."""
    from datakit.sources.fetch import unconfirmed_copy, upstream_changes

    files = record.result.get("files") or []
    return unconfirmed_copy(spec, files) or upstream_changes(files)


def build(graph: Graph) -> None:
    for spec in graph.manifest.sources:
        if spec.remote:
            # allow_unsized stays out of the identity: it changes no byte of a whole file; the recheck
            # rebuilds a copy it accepted once the source stops allowing it.
            config = step_identity(spec, ("uri", "revision", "sha256", "exclude", "max_files"))
            graph.files[spec.name] = graph.add(Step(f"download-{spec.name}", partial(_download, spec=spec), config,
                                                    version=VERSION, stage=STAGE.name, source=spec.name,
                                                    recheck=partial(_recheck, spec=spec)))


STAGE = Stage(name="download", version=VERSION, build=build, produces=(FILES,),
              code=("datakit.sources.fetch", "datakit.stages.download"),
              ferry_check="datakit.ferry.stage_checks:check_download")
