"""What a manifest holds: its sources, its user stages, where and how to run, and one section per stage.

The frozen dataclasses below are at once the typed result and the schema (see `datakit.manifest.schema`):
to add a key, add a field. Stage sections (`normalize:`, `dedup:`, `train:` ...) are not declared here:
each stage declares its own config dataclass, which is both its manifest section and its runtime config,
and the stage registry hands the loader the list (`datakit.manifest.load`). So this package knows no
stage, and a new stage never edits it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from datakit.core.listing import has_glob
from datakit.core.uris import is_remote
from datakit.manifest.calls import CallNotFound, locate_call
from datakit.manifest.checks import check_name, check_sha, check_uri_list

# The readers' formats (datakit.sources.readers.READERS; a test keeps the two in step). Spelled here so
# that validating a manifest never imports the readers' heavy HTML and WARC libraries.
FORMATS = ("jsonl", "parquet", "text", "html", "warc")
Format = Literal[FORMATS]  # type: ignore[valid-type]
PLACES = ("after_normalize", "after_consolidate")
KINDS = ("filter", "map", "annotate")


class _Spec:
    """Shared helpers for the manifest dataclasses."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (tuples as lists), for logs, artifact records and identity hashing."""
        return jsonable(dataclasses.asdict(self))  # type: ignore[call-overload]


def jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, frozenset)):
        items = sorted(value) if isinstance(value, frozenset) else value
        return [jsonable(v) for v in items]
    return value


@dataclass(frozen=True)
class SourceSpec(_Spec):
    """One input corpus.

    ``uri``: local path, directory, glob, file:// or any fsspec URL (http(s), gs, s3, memory...), or a
    list of them (http(s) has no listing, so several web files are given as a list). ``sha256`` pins a
    single file's digest, or maps file names (relative names, basenames or full URLs) to digests.
    ``allow_unsized`` accepts downloaded files whose completeness nothing confirms (no length, digest,
    pin or chunked framing; a connection closed early looks the same); they are recorded and reported
    as "size unconfirmed". Without it such a download fails.
    ``follow_symlinks`` (local sources) follows symlinks whose target lies outside the source's folder
    (the fixed part of its path); without it they are skipped and counted ("N symlinks outside the
    source skipped" in the run summary), so a dataset's ``leak.txt -> /etc/passwd`` is never read.
    Symlinks within the folder are followed either way; a symlinked folder that loops is skipped, named.
    ``priority`` is the source's index in the manifest (earlier wins when deduplicating across sources).
    ``sha256`` may hold a dict, so a SourceSpec is not hashable; use its ``name``.
    """

    name: str = field(metadata={"check": check_name})
    uri: str | tuple[str, ...] = field(metadata={"path": True, "check": check_uri_list})
    format: Format
    text_field: str = "text"
    id_field: str | None = None
    revision: str | None = None
    sha256: str | dict[str, str] | None = field(default=None, metadata={"check": check_sha})
    allow_unsized: bool = False
    follow_symlinks: bool = False
    license: str | None = None
    weight: float = field(default=1.0, metadata={"min": 0})
    max_files: int | None = field(default=None, metadata={"min": 1})
    exclude: tuple[str, ...] = ()
    bare: bool = False
    dedup: Literal["exact", "none"] = "exact"
    # per-source override of normalize.html_main_content (html/warc); None = the section's value
    html_main_content: bool | None = None
    priority: int = field(default=0, metadata={"internal": "index"})

    @property
    def uris(self) -> tuple[str, ...]:
        return (self.uri,) if isinstance(self.uri, str) else tuple(self.uri)

    @property
    def remote(self) -> bool:
        """True when the files must be downloaded first (any non-local URI)."""
        return any(is_remote(u) for u in self.uris)

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        kinds = {is_remote(u) for u in self.uris}
        if len(kinds) > 1:
            return [("uri", "mixes local paths and remote URLs; split it into two sources")]
        if isinstance(self.sha256, str) and (len(self.uris) > 1 or any(has_glob(u) for u in self.uris)):
            return [("sha256", "a single sha256 pins a single file; map file names to digests instead")]
        if self.allow_unsized and not self.remote:
            return [("allow_unsized", "applies only to downloaded (remote) sources; a local file's size is known")]
        if self.follow_symlinks and self.remote:
            return [("follow_symlinks", "applies only to local sources; a remote store's listing has no symlinks")]
        return []


def unknown_source(name: str, names: set[str]) -> str:
    """The message for a section naming a source the manifest does not have, with the closest name."""
    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"no source named {name!r}{hint}; sources: {', '.join(sorted(names))}"


def _check_call(value: str) -> str | None:
    module, sep, attr = value.partition(":")
    if not sep or not module or not attr or not all(p.isidentifier() for p in (*module.split("."), *attr.split("."))):
        return f"{value!r} is not 'package.module:function'"
    return None


@dataclass(frozen=True)
class UserStageSpec(_Spec):
    """A user stage: a Python callable run on every document of the chosen sources, at a declared point.

    ``call``: ``package.module:function``, importable where the run happens (on Ray: on every node), with
    the manifest's directory searched after sys.path. Only a step that runs it imports it; validating and
    planning read its source (`datakit.manifest.calls`).
    ``place``: ``after_normalize`` (dedup, decontamination and everything downstream read its output) or
    ``after_consolidate`` (only tokenization and training do).
    ``kind``: ``filter`` (``fn(doc, config)`` returns True to keep, False or a reason string to remove),
    ``map`` (returns the new document, or None to remove it) or ``annotate`` (returns a dict of new
    fields). Removed documents land in the step's ``outputs/removed/`` with the stage's name as reason.
    ``version``: pins the stage's identity to this string; without it, a fingerprint of the function's
    module source keys it, so editing the function rebuilds it and everything downstream.
    """

    name: str = field(metadata={"check": check_name})
    call: str = field(metadata={"check": _check_call})
    kind: Literal["filter", "map", "annotate"] = "filter"
    place: Literal["after_normalize", "after_consolidate"] = "after_normalize"
    config: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    version: str | None = None


@dataclass(frozen=True)
class Manifest(_Spec):
    """A validated manifest. ``sections`` maps each stage section's name (`normalize`, `dedup`, ...) to
    its config object (None for an optional section left out, like `train`); ``raw`` is the YAML as
    parsed, ``path`` the file it came from (absolute; None when built in code)."""

    path: str | None = field(metadata={"internal": "fixed"})
    sources: tuple[SourceSpec, ...] = field(metadata={"internal": "fixed"})
    sections: dict[str, Any] = field(default_factory=dict, metadata={"internal": "fixed"})
    stages: tuple[UserStageSpec, ...] = ()
    prefix: str = field(default="datakit-out", metadata={"path": True})
    backend: Literal["local", "ray", "inline"] = "local"
    workers: int | None = field(default=None, metadata={"min": 1})
    mirror: str | None = field(default=None, metadata={"path": True})
    raw: dict = field(default_factory=dict, compare=False, repr=False, metadata={"internal": "fixed"})

    def __getattr__(self, name: str) -> Any:
        # `manifest.train`, `manifest.dedup`: the stage sections read like fields.
        sections = self.__dict__.get("sections") or {}
        if name in sections:
            return sections[name]
        raise AttributeError(f"manifest has no field or section {name!r} (sections: {', '.join(sections)})")

    @property
    def base_dir(self) -> str:
        return os.path.dirname(self.path) if self.path else os.getcwd()

    def source(self, name: str) -> SourceSpec:
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(f"no source named {name!r}; sources: {', '.join(s.name for s in self.sources)}")

    @property
    def weights(self) -> dict[str, float]:
        """Training mixture weights by source name."""
        return {s.name: s.weight for s in self.sources}

    def _cross_check(self, given: frozenset[str]) -> list[tuple[Any, str]]:
        names = {s.name for s in self.sources}
        return (self._stage_problems(names) + self._override_problems(names) + self._source_field_problems(names)
                + self._call_problems())

    def _call_problems(self) -> list[tuple[Any, str]]:
        """Each stage's ``call`` names a module and function that exist, found and parsed, never imported
        (validating a manifest must not run its code). Only for a manifest file: calls given in code
        (`manifest_from_dict`) are checked when their steps are built."""
        if self.path is None:
            return []
        out: list[tuple[Any, str]] = []
        for i, st in enumerate(self.stages):
            try:
                found = locate_call(st.call, self.base_dir)
            except CallNotFound as e:
                out.append((("stages", i, "call"), str(e)))
                continue
            if found.path is None and st.version is None:
                out.append((("stages", i, "call"), f"{found.note}, so no source can key the stage's outputs; "
                                                   "give the stage an explicit `version:`"))
        return out

    def _override_problems(self, names: set[str]) -> list[tuple[Any, str]]:
        """A section's per-source overrides (a ``sources`` mapping) must name sources of this manifest."""
        out: list[tuple[Any, str]] = []
        for key, section in self.sections.items():
            overrides = getattr(section, "sources", None)
            if isinstance(overrides, dict):
                out += [((key, "sources", n), unknown_source(n, names)) for n in overrides if n not in names]
        return out

    def _source_field_problems(self, names: set[str]) -> list[tuple[Any, str]]:
        """A section's fields marked ``sources`` in their metadata (the classifier's ``positives``,
        ``negative_sources``, ``apply_to``) name sources of this manifest, each checked here rather than
        when the plan is built, so `validate` refuses what the run would. A switched-off section is free."""
        out: list[tuple[Any, str]] = []
        for key, section in self.sections.items():
            if not dataclasses.is_dataclass(section) or getattr(section, "enabled", True) is False:
                continue
            for f in dataclasses.fields(section):
                if f.metadata.get("sources"):
                    out += [((key, f.name, i), unknown_source(n, names))
                            for i, n in enumerate(getattr(section, f.name)) if n not in names]
        return out

    def _stage_problems(self, names: set[str]) -> list[tuple[Any, str]]:
        seen: set[str] = set()
        for i, st in enumerate(self.stages):
            if st.name in seen:
                return [("stages", f"duplicate stage name '{st.name}' (stages[{i}])")]
            seen.add(st.name)
            unknown = sorted(set(st.sources) - names)
            if unknown:
                return [("stages", f"stages[{i}] ({st.name}): unknown source(s) {', '.join(unknown)}; "
                                   f"sources: {', '.join(sorted(names))}")]
        return []
