"""Walk a step DAG: skip what is built, build the rest under a lease, record everything.

A step is built when ``<prefix or mirror>/<name>-<identity>/.status`` says SUCCESS and its
artifact record carries the same identity and its output files still hash to what its
``outputs.manifest.json`` recorded (sizes only with ``fast``). Anything else is untrusted: the runner
clears the dir and rebuilds it and everything downstream. Failures cascade to dependents only;
independent branches still run.

Every step that would run (dry run) or runs gets a ``reason``: a short sentence saying why, found by
comparing with the newest earlier build of the same step name under the prefix (see ``_Run.why_run``).
Why: an identity is an opaque hash; "config changed: normalize.max_whitespace_run 128 -> 64" is what a
user needs before starting an hour-long rebuild.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import socket
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import datakit

from datakit.core import fsio, publish_log

from . import markers, verify
from .events import EventLog
from .fingerprint import digest_of
from .identity import IDENTITY_CHARS, canonical_json, config_mentions
from .lease import Lease, LeaseLost, is_lease_name, read_holder
from .runs import RunRecord
from .reuse import REUSE_FILE
from .stamps import Stamps
from .step import Step, StepContext, StepRecord, collect_steps

DEFAULT_LEASE_TIMEOUT_S = 60.0
_MAX_LISTED = 5                     # changed keys / files / deps named in a reason, then "and N more"
_MAX_VALUE_CHARS = 40               # config values longer than this are cut in a reason
_IDENTITY = re.compile(rf"^[0-9a-f]{{{IDENTITY_CHARS}}}$")
_ABSENT = object()                  # a config key one side of a diff does not have
NEVER_BUILT = "never built"         # how the reason of a step with no earlier build begins


@dataclass
class RunSummary:
    """Outcome of run_steps. ``steps`` are per-step dicts in run order:
    {name, identity, status, output, wall_s, counters, error, location, reason}; status is one of
    succeeded | skipped | failed | cascaded | would_run | would_skip; ``reason`` says why a step
    would run / ran (None for skipped and cascaded ones). A dry run's entries add ``plan``: reused,
    or what a step that would run takes from its earlier build (see _build_plan). ``records`` maps the name of
    every step whose output is usable (succeeded or skipped) to its StepRecord (typed result)."""

    status: str
    steps: list[dict]
    records: dict[str, StepRecord] = field(default_factory=dict)
    run_id: str = ""
    wall_s: float = 0.0
    dry_run: bool = False
    data: dict = field(default_factory=dict)  # what happened to the data (set by datakit.pipeline.run)

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    def result(self, name: str) -> dict:
        """The typed result of a built step (KeyError naming the step if it has none)."""
        if name not in self.records:
            raise KeyError(f"step {name!r} has no result in this run (status: {self._status_of(name)})")
        return self.records[name].result

    def _status_of(self, name: str) -> str:
        return next((s["status"] for s in self.steps if s["name"] == name), "not in run")

    def to_dict(self) -> dict:
        return {"status": self.status, "run_id": self.run_id, "wall_s": self.wall_s,
                "dry_run": self.dry_run, "steps": self.steps, "data": self.data}


@dataclass(frozen=True)
class _Location:
    """A prefix (writable) or mirror (read-only) root: a local path or URL in `fsio.store_url` form."""

    root: str
    kind: str  # "prefix" | "mirror"

    def step_dir(self, step: Step) -> str:
        return fsio.join(self.root, step.dirname)


def _open(url: str | None, kind: str) -> _Location | None:
    if url is None:
        return None
    return _Location(fsio.store_url(str(url)), kind)


def _for_step(exec_config: Any, step: Step) -> Any:
    """The run's engine settings, with progress bars named after the step (when the settings have a
    ``label``, as datakit.shuffle.ExecConfig does; anything else is handed over untouched)."""
    if dataclasses.is_dataclass(exec_config) and any(f.name == "label" for f in dataclasses.fields(exec_config)):
        return dataclasses.replace(exec_config, label=step.name)
    return exec_config


def _built_artifact(d: str) -> dict | None:
    """The artifact record of a step dir whose status says SUCCESS; None if unbuilt or unreadable."""
    if not markers.is_built(d):
        return None
    try:
        art = markers.read_artifact(d)
    except (OSError, ValueError):
        return None
    return art if isinstance(art, dict) else None


def _load_built(loc: _Location, step: Step, fast: bool, stamps: Stamps | None = None) -> StepRecord | None:
    """StepRecord if ``step`` is built at ``loc`` (SUCCESS + matching artifact + outputs that still
    match their manifest: by content, or by size with ``fast``), else None."""
    art = _built_artifact(loc.step_dir(step))
    if art is None or art.get("identity") != step.identity:
        return None
    if verify.damage_reason(loc.step_dir(step), fast=fast, stamps=stamps) is not None:
        return None
    return StepRecord(step.name, step.identity, loc.step_dir(step), art.get("result") or {}, art.get("counters") or {})


def _find_built(step: Step, prefix: _Location, mirror: _Location | None,
                fast: bool, stamps: Stamps | None = None) -> tuple[StepRecord, str] | None:
    for loc in (prefix, mirror):
        if loc is not None:
            rec = _load_built(loc, step, fast, stamps)
            if rec is not None:
                return rec, loc.kind
    return None


def _entry(step: Step, status: str, output: str, *, wall_s: float = 0.0, counters: dict | None = None,
           error: str | None = None, location: str | None = None, reason: str | None = None) -> dict:
    return {"name": step.name, "identity": step.identity, "status": status, "output": output,
            "wall_s": round(wall_s, 6), "counters": dict(counters or {}), "error": error, "location": location,
            "reason": reason}


def _check_result(step: Step, raw: Any, ctx_counters: dict[str, int]) -> tuple[dict, dict[str, int]]:
    """Split a step fn's return value into (result, counters) and make sure it round-trips as JSON."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise TypeError(f"step {step.name!r} returned {type(raw).__name__}; a step fn must return a "
                        "JSON-serializable dict (or None)")
    result = dict(raw)
    returned = result.pop("counters", None) or {}
    if not isinstance(returned, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in returned.items()):
        raise TypeError(f"step {step.name!r}: result['counters'] must be a dict of str -> int, got {returned!r}")
    counters = dict(ctx_counters)
    for k, v in returned.items():
        counters[k] = counters.get(k, 0) + v
    try:
        json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"step {step.name!r} returned a result that is not JSON-serializable: {e}") from None
    return result, dict(sorted(counters.items()))


@dataclass(frozen=True)
class _Decision:
    """What a run does with one step: reuse ``found`` (record, location), or build it for ``reason``,
    from an empty dir when ``fresh`` (forced, or its earlier build is damaged)."""

    found: tuple[StepRecord, str] | None
    reason: str | None = None
    fresh: bool = False
    plan: dict = field(default_factory=lambda: {"mode": "reused"})  # what it takes from an earlier build


# ---------------------------------------------------------------- why a step runs


@dataclass(frozen=True)
class _EarlierBuild:
    """The newest SUCCESS build of a step's name under another identity: what a reason compares with."""

    dirname: str
    artifact: dict


def _listed(items: list[str]) -> str:
    """``a, b, c`` naming at most _MAX_LISTED items, then ``and N more``: reasons stay one line."""
    shown = ", ".join(items[:_MAX_LISTED])
    rest = len(items) - _MAX_LISTED
    return f"{shown} and {rest} more" if rest > 0 else shown


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(unset)"
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 3] + "..."


def _same(a: Any, b: Any) -> bool:
    """Equal as the identity sees them (canonical JSON: 1 and 1.0 differ, dict order does not)."""
    if a is _ABSENT or b is _ABSENT:
        return a is b
    return canonical_json(a) == canonical_json(b)


def _config_changes(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key path, old value, new value) for every leaf that differs; lists count as leaves."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(old) | set(new)):
            out += _config_changes(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{path}.{key}" if path else key)
        return out
    return [] if _same(old, new) else [(path or "(whole config)", old, new)]


def _version_reason(step: Step, old: dict) -> str | None:
    before = old.get("version")
    return None if before == step.version else f"stage version {before or '(unset)'} -> {step.version}"


def _config_reason(step: Step, old: dict) -> str | None:
    """Changed config keys, except a value that is just the digest of the changed ``inputs`` (callers
    put the input digest in config; the input-files reason names those changes better)."""
    old_inputs, new_inputs = _recorded_inputs(old), step.inputs
    explained = (digest_of(old_inputs), digest_of(new_inputs)) if old_inputs != new_inputs else None
    changes = [f"{path} {_show(a)} -> {_show(b)}"
               for path, a, b in _config_changes(old.get("config", {}), step.config) if (a, b) != explained]
    return f"config changed: {_listed(changes)}" if changes else None


def _recorded_inputs(old: dict) -> dict[str, str]:
    inputs = old.get("inputs")
    return {str(k): str(v) for k, v in inputs.items()} if isinstance(inputs, dict) else {}


def _input_changes(step: Step, old: dict) -> tuple[list[str], dict[str, int]]:
    """Each input file that differs from the earlier build's, named with how (added, changed, removed),
    and the counts of each kind."""
    before, after = _recorded_inputs(old), step.inputs
    changes, counts = [], {"added": 0, "changed": 0, "removed": 0}
    for name in sorted(set(before) | set(after)):
        kind = ("added" if name not in before else "removed" if name not in after
                else "changed" if before[name] != after[name] else None)
        if kind:
            changes.append(f"{name} ({kind})")
            counts[kind] += 1
    return changes, counts


def _inputs_reason(step: Step, old: dict) -> str | None:
    """Which input files differ from the earlier build's, counted (what an incremental build recomputes
    at most: the rest of its per-file work is taken from that build) and named."""
    changes, counts = _input_changes(step, old)
    if not changes:
        return None
    return (f"input files changed (incremental: {counts['added']} new, {counts['changed']} changed, "
            f"{counts['removed']} removed of {len(step.inputs)}): {_listed(changes)}")


def _deps_reason(step: Step, old: dict) -> str | None:
    recorded = old.get("deps") if isinstance(old.get("deps"), dict) else {}
    changes = []
    for dep in step.deps:
        rec = recorded.get(dep.name)
        if not isinstance(rec, dict):
            changes.append(f"{dep.name} (added)")
        elif rec.get("identity") != dep.identity:
            changes.append(dep.name)
    changes += [f"{name} (removed)" for name in sorted(set(recorded) - {d.name for d in step.deps})]
    return f"dependency rebuilt: {_listed(changes)}" if changes else None


def _build_plan(step: Step, earlier: _EarlierBuild | None, root: str) -> dict:
    """What a step that runs will take from its earlier build, for `run --dry-run` (text and --json):
    ``full`` when there is nothing to take (no earlier build, forced, damaged, a build that recorded
    no per-file reuse, or one of another stage version: every reuse key holds the version), else
    ``incremental``: the earlier build's documents (its ``docs_out``, when it
    counts documents) and, for a step that reads files, how many are new, changed and removed. The rest
    of its work is taken from that build; documents of new files are not known before they are read, so
    they are counted as files."""
    if earlier is None or not fsio.exists(fsio.join(root, earlier.dirname, REUSE_FILE)):
        return {"mode": "full"}
    if earlier.artifact.get("version") != step.version:
        return {"mode": "full", "earlier": earlier.dirname, "earlier_version": earlier.artifact.get("version")}
    counters = earlier.artifact.get("counters") if isinstance(earlier.artifact.get("counters"), dict) else {}
    plan = {"mode": "incremental", "earlier": earlier.dirname, "earlier_documents": counters.get("docs_out")}
    if step.inputs or _recorded_inputs(earlier.artifact):
        _, counts = _input_changes(step, earlier.artifact)
        plan["files"] = {"new": counts["added"], "changed": counts["changed"], "removed": counts["removed"],
                         "total": len(step.inputs), **_documents_of_changes(step, earlier.artifact)}
    return plan


def _documents_of_changes(step: Step, old: dict) -> dict[str, int]:
    """How many documents the changed and the removed input files held in the earlier build, where that
    build recorded its documents per input file (a result's ``input_documents``: name -> count); {}
    where it did not. New files are not read yet, so their documents are not known."""
    result = old.get("result") if isinstance(old.get("result"), dict) else {}
    held = result.get("input_documents")
    before = _recorded_inputs(old)
    if not isinstance(held, dict) or set(held) != set(before):
        return {}
    changed = [n for n in before if n in step.inputs and step.inputs[n] != before[n]]
    removed = [n for n in before if n not in step.inputs]
    return {"changed_documents": sum(int(held[n]) for n in changed),
            "removed_documents": sum(int(held[n]) for n in removed)}


def _difference(step: Step, earlier: _EarlierBuild) -> str:
    """The first kind of difference from an earlier build: version, config, input files, deps."""
    for check in (_version_reason, _config_reason, _inputs_reason, _deps_reason):
        reason = check(step, earlier.artifact)
        if reason:
            return reason
    return f"identity differs from the earlier build {earlier.dirname} (no recorded field changed)"


def _damage(loc: _Location, step: Step, fast: bool, stamps: Stamps | None = None) -> str | None:
    """Why this identity's own dir cannot be trusted, or None when there is no such dir. Only called
    for steps that are not built, so a SUCCESS marker here has a bad artifact record."""
    d = loc.step_dir(step)
    status = markers.read_status(d)
    if status is None:
        if not _dir_exists(d):
            return None
        state = f"no {markers.STATUS_FILE} marker"
    elif status.get("status") == markers.SUCCESS:
        art = _built_artifact(d)
        same = art is not None and art.get("identity") == step.identity
        damage = verify.damage_reason(d, fast=fast, stamps=stamps) if same else None
        if damage:
            return damage
        state = f"SUCCESS but {markers.ARTIFACT_FILE} is unreadable or records another identity"
    else:
        state = str(status.get("status"))
    return f"output damaged or unfinished: {state} at {loc.step_dir(step)}"


def _dir_exists(d: str) -> bool:
    # Object stores have no empty dirs: a dir exists when something is in it.
    return fsio.is_dir(d) if fsio.is_local(d) else bool(fsio.list_names(d))


def _is_build_of(dirname: str, step: Step) -> bool:
    """``<name>-<identity>`` of this step's name under another identity (``normalize-<id>`` is not a
    build of ``normalize-web``, nor the reverse: the suffix must be exactly one identity)."""
    head, _, ident = dirname.rpartition("-")
    return head == step.name and ident != step.identity and bool(_IDENTITY.match(ident))


def _successful_artifact(loc: _Location, dirname: str, name: str) -> dict | None:
    art = _built_artifact(fsio.join(loc.root, dirname))
    return art if art is not None and art.get("name") == name else None


class _Run:
    """State of one run_steps call (kept in one place so the step loop reads top to bottom)."""

    def __init__(self, prefix: _Location, mirror: _Location | None, events: EventLog, exec_config: Any,
                 lease_timeout_s: float, fast: bool):
        self.prefix, self.mirror, self.events = prefix, mirror, events
        self.exec_config, self.lease_timeout_s = exec_config, lease_timeout_s
        self.fast = fast  # check built outputs by size only (--fast), not by content
        self.stamps = Stamps.of_prefix(prefix.root)  # outputs whose content was checked, by stat
        self.records: dict[str, StepRecord] = {}
        self._prefix_names: list[str] | None = None  # listed once, on the first step that needs a reason
        # Steps rebuilt in this run because their built output was damaged (and, transitively, their
        # dependents: they were built from the damaged bytes, so they are rebuilt too).
        self.rebuilt_damaged: set[str] = set()
        self.disk_problem: fsio.DiskProblem | None = None  # a full disk stops the rest of the run
        self.store_down: fsio.StoreUnavailable | None = None  # so does a store that stayed down
        self.failed_roots: dict[str, tuple[str, ...]] = {}  # failed or cascaded step -> the failed steps behind it

    def emit(self, event: str, step: Step, **fields: Any) -> None:
        self.safe_emit({"event": event, "step": step.name, "identity": step.identity, **fields})

    def safe_emit(self, event: dict) -> None:
        """Emit an event; when events.jsonl cannot be written (full or read-only disk), say so once and
        keep reporting on screen: a log line must never turn a clean failure into a crash."""
        try:
            self.events.emit(event)
        except OSError as e:
            problem, down = fsio.disk_problem(e), fsio.store_failure(e)
            if (problem is None and down is None) or not self.events.write:
                raise
            logging.getLogger("datakit.steps").warning(
                "events.jsonl is no longer written: %s", problem.message(self.events.path) if problem else
                "the object store is unavailable (the failing step says which store and what to do)")
            self.events.write = False
            self.events.emit(event)

    def why_run(self, step: Step, forced: bool) -> str:
        """Why a step that is not built runs: forced; its own dir is damaged; what differs from the
        newest earlier build of its name under the prefix; or never built. Reads only (dry runs too)."""
        if forced:
            return "forced (--force)"
        damage = _damage(self.prefix, step, self.fast, self.stamps)
        if damage:
            return damage
        earlier = self._earlier_build(step)
        if earlier is None:
            return f"{NEVER_BUILT} (no earlier output of {step.name} under the prefix)"
        return _difference(step, earlier)

    def _earlier_build(self, step: Step) -> _EarlierBuild | None:
        """Newest (by the artifact's "finished" time) SUCCESS build of ``step.name`` in the prefix."""
        if self._prefix_names is None:
            self._prefix_names = fsio.list_names(self.prefix.root)
        builds = []
        for dirname in self._prefix_names:
            art = _successful_artifact(self.prefix, dirname, step.name) if _is_build_of(dirname, step) else None
            if art is not None:
                builds.append(_EarlierBuild(dirname, art))
        # "finished" is ISO 8601 UTC with a fixed width: string order is time order.
        return max(builds, key=lambda b: str(b.artifact.get("finished", "")), default=None)

    def decide(self, step: Step, forced: bool) -> _Decision:
        """Reuse a built output or build, and why: decided for every step before any runs, so a run can
        say up front how many steps it builds and how many it reuses. Dependents of a damaged build
        are rebuilt too (they were built from the damaged bytes)."""
        damaged_deps = [d.name for d in step.deps if d.name in self.rebuilt_damaged]
        found = None if forced or damaged_deps else _find_built(step, self.prefix, self.mirror, self.fast,
                                                                self.stamps)
        outdated = step.recheck(found[0]) if found is not None and step.recheck is not None else None
        if found is not None and not outdated:
            return _Decision(found)
        if damaged_deps and not forced:
            reason = f"dependency rebuilt because its output was damaged: {_listed(damaged_deps)}"
        elif outdated:
            reason = f"output damaged: outdated: {outdated}"
        else:
            reason = self.why_run(step, forced)
        fresh = forced
        if damaged_deps or reason.startswith("output damaged:"):
            self.rebuilt_damaged.add(step.name)
            fresh = True  # start from an empty dir: nothing of the damaged build is reused
        earlier = None if fresh else self._earlier_build(step)  # a fresh build takes nothing (see _run_fn)
        return _Decision(None, reason, fresh, _build_plan(step, earlier, self.prefix.root))

    def step_entry(self, step: Step, decision: _Decision, dry_run: bool) -> dict:
        """Skip, report (dry run) or build one step whose deps are usable, as decided."""
        if decision.found is not None:
            rec, where = decision.found
            kind = "would_skip" if dry_run else "skipped"
            if not dry_run:
                self.records[step.name] = rec
            self.emit(f"step_{kind}", step, output=rec.output, location=where)
            entry = _entry(step, kind, rec.output, counters=rec.counters, location=where)
            return {**entry, "plan": decision.plan} if dry_run else entry
        if not dry_run:
            try:
                return self.build(step, decision.fresh, decision.reason)
            except OSError as e:  # the step dir, its lease or its RUNNING marker could not be written
                return self._disk_failure(step, e, decision.reason)
        url = self.prefix.step_dir(step)
        self.emit("step_would_run", step, output=url, reason=decision.reason, plan=decision.plan)
        return {**_entry(step, "would_run", url, reason=decision.reason), "plan": decision.plan}

    def build(self, step: Step, forced: bool, reason: str | None = None) -> dict:
        d = self.prefix.step_dir(step)
        fsio.makedirs(d)
        lease = Lease(d, timeout_s=self.lease_timeout_s)
        waited_from: list[float] = []

        def on_wait(h: dict) -> None:
            waited_from.append(time.perf_counter())
            self.emit("step_waiting", step, output=d,
                      holder={k: h.get(k) for k in ("owner", "host", "pid", "heartbeat_iso", "gen")})

        lease.acquire(on_wait=on_wait)
        waited = f" after waiting {time.perf_counter() - waited_from[0]:.1f}s for its lease" if waited_from else ""
        try:
            if not forced:
                rec = _load_built(self.prefix, step, self.fast, self.stamps)
                if rec is not None:  # a concurrent runner built it while we waited
                    self.records[step.name] = rec
                    self.emit("step_skipped", step, output=d, location="prefix",
                              reason=f"built by another runner{waited}")
                    return _entry(step, "skipped", d, counters=rec.counters, location="prefix",
                                  reason=f"built by another runner{waited}")
            if waited:
                reason = f"{reason}; ran{waited}" if reason else f"ran{waited}"
            return self._run_fn(step, lease, d, forced, reason)
        finally:
            try:
                lease.release()
            except OSError as e:  # a full disk or a store that is down: the lease goes stale on its own
                if fsio.store_failure(e) is None:  # (a store that is down was said once, on the step)
                    logging.getLogger("datakit.steps").warning("could not release the lease of %s", d,
                                                               exc_info=True)

    def _run_fn(self, step: Step, lease: Lease, d: str, forced: bool = False, reason: str | None = None) -> dict:
        if forced or not step.resumable:
            markers.clear_step_dir(d, keep=is_lease_name)
        started = time.time()
        markers.write_status(d, markers.RUNNING, identity=step.identity, run_id=self.events.run_id,
                             lease_owner=lease.owner)
        self.emit("step_started", step, output=d, reason=reason,
                  first_build=bool(reason and reason.startswith(NEVER_BUILT)))
        earlier = None if forced else self._earlier_build(step)
        ctx = StepContext(step=step, output=d, deps={dep.name: self.records[dep.name] for dep in step.deps},
                          exec_config=_for_step(self.exec_config, step), _emit=self.safe_emit,
                          earlier=fsio.join(self.prefix.root, earlier.dirname) if earlier else None)
        t0 = time.perf_counter()
        publish_log.take_under(d)  # notes an earlier attempt at this dir made in this process: stale
        try:
            with verify.earlier_reads():  # the earlier build's manifest and listing: read once
                with _EngineEvents(self, step):
                    result, counters = _check_result(step, step.fn(ctx), ctx.counters)
                wall = time.perf_counter() - t0
                lease.check()
                written = publish_log.take_under(d)  # what the step's writers noted with their digests
                verify.write_manifest(d, self.stamps, ctx.earlier, written)  # what `run` and `verify` check
            lease.check()
            markers.write_artifact(d, self._artifact(step, result, counters, started, wall, markers.SUCCESS))
            lease.check()
            markers.write_status(d, markers.SUCCESS, identity=step.identity, run_id=self.events.run_id,
                                 wall_s=round(wall, 6))
        except BaseException as e:  # noqa: BLE001 - every way out must leave an honest marker
            wall = time.perf_counter() - t0
            publish_log.take_under(d)
            interrupted = not isinstance(e, Exception)
            problem = None if interrupted else fsio.disk_problem(e)
            down = None if interrupted else fsio.store_failure(e)
            if interrupted:
                error = f"interrupted ({type(e).__name__})"
            else:
                error = problem.message(d) if problem else str(down) if down else f"{type(e).__name__}: {e}"
            tb = traceback.format_exc()
            if down is not None:
                # The store cannot take markers now: the RUNNING marker under a lease that goes stale
                # reads as an interrupted build, which is what this is; the rest of the run is not run.
                self.store_down = down
            elif not isinstance(e, LeaseLost):
                self._discard_partial(step, d, problem)
                self._mark_failed(step, lease, d, ctx.counters, started, wall, error, tb)
            if problem is not None and problem.no_space:
                self.disk_problem = problem
            self.emit("step_failed", step, output=d, wall_s=round(wall, 6), error=error, traceback=tb)
            if interrupted:
                raise
            return _entry(step, "failed", d, wall_s=wall, counters=ctx.counters, error=error, location="prefix",
                          reason=reason)
        self.records[step.name] = StepRecord(step.name, step.identity, d, result, counters)
        self.emit("step_succeeded", step, output=d, wall_s=round(wall, 6), counters=counters)
        return _entry(step, "succeeded", d, wall_s=wall, counters=counters, location="prefix", reason=reason)

    def _disk_failure(self, step: Step, exc: OSError, reason: str | None) -> dict:
        """A step that could not even start because the disk refused: failed, in one line."""
        problem = fsio.disk_problem(exc)
        if problem is None:
            raise exc
        url = self.prefix.step_dir(step)
        if problem.no_space:
            self.disk_problem = problem
        try:
            fsio.remove_temp_files(self.prefix.step_dir(step), keep=is_lease_name)
        except OSError:
            pass
        error = problem.message(url)
        self.emit("step_failed", step, output=url, wall_s=0.0, error=error, traceback=None)
        return _entry(step, "failed", url, error=error, location="prefix", reason=reason)

    def _discard_partial(self, step: Step, d: str, problem: fsio.DiskProblem | None) -> None:
        """A failed attempt's temp files are never published: remove them (they may be what filled the
        disk). On a full disk a non-resumable step's partial outputs go too, since the next attempt
        starts from an empty dir anyway and the space is what the markers need now."""
        try:
            fsio.remove_temp_files(d, keep=is_lease_name)
            if problem is not None and problem.no_space and not step.resumable:
                markers.clear_step_dir(d, keep=is_lease_name)
        except OSError:
            logging.getLogger("datakit.steps").warning("could not clean up %s", d, exc_info=True)

    def _mark_failed(self, step, lease, d, counters, started, wall, error, tb) -> None:
        """FAILED marker + traceback, unless a peer now owns the dir (then it is not ours to touch).
        If the disk refuses even that, the other markers are removed to make room and FAILED is
        written again: a run must never leave RUNNING behind for a step that is over."""
        try:
            lease.check()
            markers.write_error(d, tb)
            art = self._artifact(step, None, dict(sorted(counters.items())), started, wall, markers.FAILED)
            art.update(error=error, traceback=tb)
            markers.write_artifact(d, art)
            markers.write_status(d, markers.FAILED, identity=step.identity, run_id=self.events.run_id,
                                 error=error)
        except LeaseLost:
            return
        except Exception:  # noqa: BLE001 - the original error is what the user needs to see
            logging.getLogger("datakit.steps").warning("could not record failure of %s", step.name, exc_info=True)
            for name in (markers.ERROR_FILE, markers.ARTIFACT_FILE, markers.STATUS_FILE):
                try:
                    fsio.remove(fsio.join(d, name))
                except OSError:
                    pass
            try:
                markers.write_status(d, markers.FAILED, identity=step.identity, run_id=self.events.run_id,
                                     error=error)
            except OSError:
                pass

    def _artifact(self, step: Step, result: dict | None, counters: dict, started: float, wall: float,
                  status: str) -> dict:
        return {
            "name": step.name, "identity": step.identity, "version": step.version, "config": step.config,
            "inputs": dict(step.inputs), "stage": step.stage, "source": step.source,
            "deps": {dep.name: {"identity": dep.identity, "output": self.records[dep.name].output}
                     for dep in step.deps},
            "status": status, "result": result, "counters": counters,
            "code_version": datakit.__version__, "run_id": self.events.run_id,
            "host": socket.gethostname(), "pid": os.getpid(),
            "started": markers.now_iso(started), "finished": markers.now_iso(), "wall_s": round(wall, 6),
        }


class _EngineEvents(logging.Handler):
    """Turns the engine's structured log records (a worker retried after an error or a death) into
    step events while a step fn runs, so `datakit run` can say what happened instead of hiding it.
    Why logging: the engine (datakit.shuffle) knows nothing of steps; a log record with a
    ``datakit_event`` attribute is the one channel both sides already share."""

    LOGGER = "datakit.shuffle"

    def __init__(self, run: "_Run", step: Step) -> None:
        super().__init__(level=logging.INFO)
        self.run, self.step = run, step
        self._logger = logging.getLogger(self.LOGGER)
        self._old_level = self._logger.level

    def __enter__(self) -> "_EngineEvents":
        self._logger.addHandler(self)
        if self._logger.getEffectiveLevel() > logging.INFO:
            self._logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._old_level)

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "datakit_event", None)
        if isinstance(event, dict) and "event" in event:
            fields = {k: v for k, v in event.items() if k != "event"}
            self.run.emit(f"step_{event['event']}", self.step, **fields)


def _validate_selection(order: list[Step], only, force) -> tuple[set[str], set[str]]:
    names = [s.name for s in order]
    only_list = [only] if isinstance(only, str) else list(only or [])
    force_list = [force] if isinstance(force, str) else list(force or [])
    unknown = sorted({n for n in only_list + force_list if n not in names})
    if unknown:
        raise ValueError(f"unknown step name(s) {unknown}; steps in this run: {names}")
    selected = set(only_list) if only_list else set(names)
    not_selected = sorted(set(force_list) - selected)
    if not_selected:
        raise ValueError(f"--force {not_selected} names steps that --only {sorted(selected)} excludes")
    return selected, set(force_list)


def _check_configs_avoid_outputs(order: list[Step], locations: list[tuple[str | None, _Location | None]]) -> None:
    """Refuse configs that mention the prefix or mirror: identities must not depend on where outputs are."""
    roots: list[str] = []
    for url, loc in locations:
        if loc is not None:
            roots += [loc.root] + ([str(url).rstrip("/")] if "://" in str(url) else [])
    for s in order:
        hit = config_mentions(s.config, roots)
        if hit:
            raise ValueError(f"step {s.name!r}: {hit} points into the output prefix/mirror; read dependency "
                             "outputs through ctx.deps instead, so identities do not depend on the prefix")


def _load_deps_outside_selection(run: _Run, order: list[Step], selected: set[str]) -> None:
    """--only: deps outside the selection must already be built; report every missing one at once."""
    missing = []
    for s in order:
        if s.name not in selected:
            continue
        for dep in s.deps:
            if dep.name in selected or dep.name in run.records:
                continue
            found = _find_built(dep, run.prefix, run.mirror, run.fast, run.stamps)
            if found is None:
                missing.append(f"{s.name} needs {dep.name} ({dep.dirname})")
            else:
                run.records[dep.name] = found[0]
    if missing:
        raise ValueError("--only: dependencies are not built (run them first or widen --only): "
                         + "; ".join(missing))


def _cascade(run: _Run, step: Step, pre: _Location) -> dict | None:
    """The entry of a step not run because a dependency failed (naming the failed steps at the root of
    the cascade, so one failure reads as one cause however deep the chain), the disk is full or the store
    is down (the cause was said once, on the step that hit it); None when it may run."""
    bad = sorted({root for d in step.deps for root in run.failed_roots.get(d.name, ())})
    if bad:
        error = f"dependency failed: {', '.join(bad)}"
    elif run.disk_problem is not None:
        error = f"not run: the disk is full ({run.disk_problem.message(pre.step_dir(step))})"
    elif run.store_down is not None:
        error = "not run: the object store is unavailable (see the failed step above)"
    else:
        return None
    entry = _entry(step, "cascaded", pre.step_dir(step), error=error)
    run.emit("step_cascaded", step, error=error)
    run.failed_roots[step.name] = tuple(bad) or (step.name,)
    return entry


def _entry_in_run(run: _Run, step: Step, decision: _Decision, dry_run: bool, pre: _Location) -> dict:
    """One step's entry: cascaded (see _cascade), else as decided; a store that is down while the step's
    markers, lease or dir are written fails the step in one line."""
    entry = _cascade(run, step, pre)
    if entry is not None:
        return entry
    try:
        entry = run.step_entry(step, decision, dry_run)
    except fsio.StoreUnavailable as e:
        run.store_down = e
        entry = _entry(step, "failed", pre.step_dir(step), error=str(e), location="prefix")
        run.emit("step_failed", step, output=entry["output"], wall_s=0.0, error=str(e), traceback=None)
    if entry["status"] == "failed":
        run.failed_roots[step.name] = (step.name,)
    return entry


def run_steps(steps: Step | Iterable[Step], prefix: str, *, mirror: str | None = None, dry_run: bool = False,
              only: Iterable[str] | None = None, force: Iterable[str] = (), exec_config: Any = None,
              on_event: Callable[[dict], None] | None = None,
              lease_timeout_s: float = DEFAULT_LEASE_TIMEOUT_S, fast: bool = False) -> RunSummary:
    """Run ``steps`` (and their deps) with outputs under ``prefix`` (local dir or fsspec URL).

    mirror:  read-only prefix; a step built there is used in place, nothing is written to it.
    dry_run: report would_run / would_skip, each would_run with a ``reason``; writes nothing at all
             (no dirs, markers or events).
    only:    run just these steps; their other deps must already be built (else ValueError).
    force:   rebuild these even if built (dependents keep their identity, so they are not rebuilt).
    exec_config: handed to every step fn as ``ctx.exec_config`` (backend, workers...; not identity).
    on_event: called with every event dict also appended to ``<prefix>/events.jsonl``.
    lease_timeout_s: a lease whose heartbeat is older than this is taken over (a crashed runner).
    fast:    trust a built step whose output files have their recorded sizes; by default every
             output's xxh3-128 is checked against its manifest before the step is skipped.

    Returns a RunSummary; a failing step does not raise (status "failed"), but KeyboardInterrupt
    does, after marking the running step FAILED and releasing its lease.
    """
    t0 = time.perf_counter()
    order = collect_steps(steps)
    selected, forced = _validate_selection(order, only, force)
    pre, mir = _open(prefix, "prefix"), _open(mirror, "mirror")
    _check_configs_avoid_outputs(order, [(prefix, pre), (mirror, mir)])
    run = _Run(pre, mir, EventLog(pre.root, uuid.uuid4().hex[:12], write=not dry_run, on_event=on_event),
               exec_config, lease_timeout_s, fast)
    _load_deps_outside_selection(run, order, selected)

    if not dry_run:
        fsio.check_writable(pre.root)  # PrefixNotWritable: one clear line, nothing run
    decisions = {s.name: run.decide(s, s.name in forced) for s in order if s.name in selected}
    if not dry_run:
        run.safe_emit({"event": "run_started", "steps": list(decisions), "prefix": pre.root,
                       "mirror": mir.root if mir else None,
                       "build": [n for n, d in decisions.items() if d.found is None]})
    # The whole plan this run reads, registered for `gc` while the run lasts (not for a dry run).
    record = contextlib.nullcontext() if dry_run else \
        RunRecord(pre.root, run.events.run_id, [s.dirname for s in order], timeout_s=lease_timeout_s)
    with record:
        entries = [_entry_in_run(run, step, decisions[step.name], dry_run, pre)
                   for step in order if step.name in selected]

    status = "failed" if any(e["status"] in ("failed", "cascaded") for e in entries) else "succeeded"
    wall = time.perf_counter() - t0
    if not dry_run and run.store_down is None:  # a store found down is not asked again
        run.stamps.save()  # a cache: a run that cannot write it only reads those files again next time
        run.safe_emit({"event": "run_finished", "status": status, "wall_s": round(wall, 6)})
    publish_log.take_under(run.prefix.root)  # the run's own records (plan, markers): no manifest takes them
    records = {n: r for n, r in run.records.items() if n in selected}
    return RunSummary(status, entries, records, run.events.run_id, round(wall, 6), dry_run)


def step_status(steps: Step | Iterable[Step], prefix: str, mirror: str | None = None, *,
                lease_timeout_s: float = DEFAULT_LEASE_TIMEOUT_S) -> list[dict]:
    """Per-step state for ``datakit status`` (read-only):
    {name, identity, state: SUCCESS|RUNNING|FAILED|UNKNOWN|MISSING, time, path, location, error, lease}.
    ``location`` is where a usable copy is (prefix|mirror), ``lease`` the prefix lease holder's state
    (live|stale|dead|released|None): RUNNING with a dead/stale lease is a crashed run."""
    order = collect_steps(steps)
    pre, mir = _open(prefix, "prefix"), _open(mirror, "mirror")
    out = []
    for step in order:
        st = markers.read_status(pre.step_dir(step))
        location, path = ("prefix", pre.step_dir(step)) if st is not None else (None, pre.step_dir(step))
        if (st is None or st.get("status") != markers.SUCCESS) and mir is not None:
            mst = markers.read_status(mir.step_dir(step))
            if mst is not None and mst.get("status") == markers.SUCCESS:
                st, location, path = mst, "mirror", mir.step_dir(step)
        holder = read_holder(pre.step_dir(step), lease_timeout_s)
        out.append({"name": step.name, "identity": step.identity,
                    "state": st.get("status", "UNKNOWN") if st else "MISSING",
                    "time": st.get("time") if st else None, "path": path, "location": location,
                    "error": st.get("error") if st else None,
                    "lease": holder["state"] if holder else None})
    return out
