"""User stages: a Python callable named in the manifest (`stages:`), run on every document of the chosen
sources at a declared point of the chain, on the engine.

    stages:
      - name: drop-short
        call: my_filters:drop_short        # fn(doc: dict, config: dict) -> keep?
        kind: filter                       # filter | map | annotate
        place: after_normalize             # or after_consolidate
        config: {min_chars: 200}

Each (stage, source) is one step `<stage>-<source>` that reads the source's current documents and writes
a documents dir with the same file names: `outputs/main/` (what is kept, sorted by id), and
`outputs/removed/` (id, reason, detail) for what the stage removed. Every stage downstream reads it.

The identity holds the call, kind, place, config and a fingerprint of the function's module source (or
the stage's explicit `version:`), so editing the function rebuilds it and everything after it, and never
serves the old output. A map that changes a document's text gives it the new text's content id, so the
dedup stages downstream see what the document now is.
"""

from __future__ import annotations

import importlib
import sys
from functools import partial
from typing import Any, Callable

import pyarrow as pa

from datakit.manifest import UserStageSpec
from datakit.manifest.calls import CallNotFound
from datakit.steps import Step, StepContext
from datakit.steps.identity import ConfigError

from .code_fingerprint import call_fingerprint, callable_fingerprint
from .contract import DOCUMENTS, Graph, Stage, step_identity
from .transform import FileKey, REMOVED_SCHEMA, documents_result, run_per_file, sort_unique  # noqa: F401 (REMOVED_SCHEMA: re-exported)

VERSION = "2"
_PROTECTED = ("id", "text")
_loaded: dict[tuple[str, str], tuple[str, Callable]] = {}  # (call, dir) -> (code, fn): one import per process


class UserStageError(ValueError):
    """A user stage's callable cannot be loaded or returned something its kind does not allow."""


def call_name(call: str | Callable) -> str:
    """``package.module:function`` for the identity and the logs (a callable given from the API too)."""
    if isinstance(call, str):
        return call
    return f"{getattr(call, '__module__', '?')}:{getattr(call, '__qualname__', type(call).__name__)}"


def load_callable(call: str | Callable, search_dir: str | None = None, code: str = "") -> Callable:
    """The stage's function: a callable given from the API as is; ``package.module:function`` imported
    once per process and ``code`` version. Only a step that runs the function calls this: planning, dry
    runs, status, verify and gc key the stage from its source (`code_version`) and never import it.

    The manifest's directory is appended to sys.path, never put first, so a module beside the manifest
    cannot shadow the standard library, datakit or an installed package (`datakit.manifest.calls` finds
    the file in the same order). Worker processes outlive a run, so when the step's code fingerprint
    changes the module is reloaded, never reused."""
    if callable(call):
        return call
    key = (call, search_dir or "")
    cached = _loaded.get(key)
    if cached is not None and cached[0] == code:
        return cached[1]
    module_name, _, attr = call.partition(":")
    if search_dir and search_dir not in sys.path:
        sys.path.append(search_dir)
    try:
        module = importlib.import_module(module_name)
        if cached is not None:
            module = importlib.reload(module)
        obj: Any = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise UserStageError(f"user stage call {call!r}: cannot load it ({type(e).__name__}: {e}); it must be "
                             f"importable as package.module:function (searched sys.path, then {search_dir})")
    if not callable(obj):
        raise UserStageError(f"user stage call {call!r} is a {type(obj).__name__}, not a function")
    _loaded[key] = (code, obj)
    return obj


# ------------------------------------------------------------------ applying one stage to one file
def _filter_rows(fn: Callable, rows: list[dict], config: dict, name: str) -> tuple[list[int], list[tuple]]:
    kept, removed = [], []
    for i, doc in enumerate(rows):
        verdict = fn(doc, config)
        if verdict is True or verdict is None:
            kept.append(i)
        elif verdict is False or isinstance(verdict, str):
            removed.append((doc["id"], name, verdict if isinstance(verdict, str) else ""))
        else:
            raise UserStageError(f"filter {name} returned {type(verdict).__name__} for document {doc['id']}; "
                                 "return True to keep, False or a reason string to remove")
    return kept, removed


def _annotate_rows(fn: Callable, rows: list[dict], config: dict, name: str) -> list[dict]:
    out = []
    for doc in rows:
        extra = fn(doc, config) or {}
        if not isinstance(extra, dict) or any(k in _PROTECTED for k in extra):
            raise UserStageError(f"annotate {name} must return a dict of new fields (not id or text) for "
                                 f"document {doc['id']}, got {extra!r:.200}")
        out.append({**doc, **extra})
    return out


def _map_rows(fn: Callable, rows: list[dict], config: dict, name: str) -> tuple[list[dict], list[tuple], int]:
    from datakit.core.documents import content_id

    out, removed, changed = [], [], 0
    for doc in rows:
        new = fn(dict(doc), config)
        if new is None:
            removed.append((doc["id"], name, "dropped by map"))
            continue
        if not isinstance(new, dict) or not isinstance(new.get("text"), str):
            raise UserStageError(f"map {name} must return a document dict with a str 'text' (or None) for "
                                 f"document {doc['id']}, got {new!r:.200}")
        if new["text"] != doc["text"]:
            changed += 1
            new["id"] = content_id(new["text"])
        else:
            new["id"] = doc["id"]
        out.append(new)
    unique, dups = sort_unique(out, name, "duplicate after map")  # like normalize: keep one
    return unique, removed + dups, changed


def transform_file(name: str, table: pa.Table, spec: UserStageSpec, search_dir: str | None,
                   code: str) -> tuple[pa.Table, list, dict]:
    """One documents file through the user's callable: (kept table, removed rows, stats)."""
    fn = load_callable(spec.call, search_dir, code)
    rows = table.to_pylist()
    removed: list[tuple] = []
    changed = 0
    if spec.kind == "filter":
        kept, removed = _filter_rows(fn, rows, spec.config, spec.name)
        out = table.take(pa.array(kept, pa.int64()))
    elif spec.kind == "annotate":
        out = pa.Table.from_pylist(_annotate_rows(fn, rows, spec.config, spec.name))
        out = out if rows else table
    else:
        docs, removed, changed = _map_rows(fn, rows, spec.config, spec.name)
        out = pa.Table.from_pylist(docs) if docs else table.slice(0, 0)
    stats = {"docs_in": len(rows), "docs_out": out.num_rows, "removed": len(removed), "changed": changed}
    return out, removed, stats


def _run(ctx: StepContext, spec: UserStageSpec, documents: str, search_dir: str | None, code: str) -> dict:
    try:
        names, totals = run_per_file(ctx, documents, partial(transform_file, spec=spec, search_dir=search_dir,
                                                              code=code), f"stage {spec.name}",
                                     reuse_key=FileKey())
    except ValueError as e:
        raise UserStageError(str(e)) from None
    totals = {k: totals.get(k, 0) for k in ("docs_in", "docs_out", "removed", "changed")}
    totals[f"removed/{spec.name}"] = totals["removed"]
    return documents_result(names, totals, stage=spec.name, call=call_name(spec.call), kind=spec.kind,
                            place=spec.place)


# ------------------------------------------------------------------ building the steps
def code_version(spec: UserStageSpec, search_dir: str | None) -> str:
    """The stage's explicit version, else a fingerprint of its function's module source, read from the
    file without importing it (a callable given from the API: from the function's own module)."""
    if spec.version:
        return f"version:{spec.version}"
    try:
        if callable(spec.call):
            return f"code:{callable_fingerprint(spec.call)}"
        return f"code:{call_fingerprint(spec.call, search_dir)}"
    except CallNotFound as e:
        raise UserStageError(f"stages: {spec.name}: call {spec.call}: {e}") from None
    except (ValueError, OSError, TypeError) as e:
        raise UserStageError(f"stages: {spec.name}: the source of {call_name(spec.call)} cannot be read to key its "
                             f"outputs ({e}); define it in a module file, or give the stage an explicit `version:` "
                             "and change it whenever the function changes") from None


def _build_place(graph: Graph, place: str) -> None:
    search_dir = graph.manifest.base_dir
    for spec in graph.manifest.stages:
        if spec.place != place:
            continue
        code = code_version(spec, search_dir)
        for n in spec.sources or graph.source_names:
            docs = graph.documents[n]
            config = {"call": call_name(spec.call), **step_identity(spec, ("kind", "place", "config")), "code": code}
            try:
                step = Step(f"{spec.name}-{n}", partial(_run, spec=spec, documents=docs.name, search_dir=search_dir,
                                                        code=code),
                            config, deps=(docs,), version=VERSION, stage=place, source=n)
            except ConfigError as e:
                raise UserStageError(f"stages: {spec.name}: its config cannot key a step: {e}") from None
            graph.advance(n, step)


def build_after_normalize(graph: Graph) -> None:
    _build_place(graph, "after_normalize")


def build_after_consolidate(graph: Graph) -> None:
    _build_place(graph, "after_consolidate")


_CODE = ("datakit.stages.user", "datakit.stages.transform", "datakit.core.documents")
_WHERE = "datakit/stages/user.py: VERSION"
AFTER_NORMALIZE = Stage(name="after_normalize", version=VERSION, build=build_after_normalize,
                        consumes=(DOCUMENTS,), produces=(DOCUMENTS,), code=_CODE,
                        ferry_check="datakit.ferry.stage_checks:check_user_stage", version_source=_WHERE)
AFTER_CONSOLIDATE = Stage(name="after_consolidate", version=VERSION, build=build_after_consolidate,
                          consumes=(DOCUMENTS,), produces=(DOCUMENTS,), code=_CODE,
                          ferry_check="datakit.ferry.stage_checks:check_user_stage", version_source=_WHERE)
