"""`datakit ferry run`: one whole pipeline run from scratch, validated, recorded, reported.

    <prefix>/ferry.lock            held while a ferry runs (see lock.py)
    <prefix>/runs/<run-id>/        run_steps prefix of this run: ferry.json (the plan), events.jsonl, steps
    <prefix>/history.jsonl         one record per run (history.py)
    <prefix>/status.json           the latest run's verdict, for a notifier
    <prefix>/report.html           rebuilt after every run (report.py)

Every run gets a fresh directory, so nothing is ever served from an earlier run's cache: the point of a
smoke ferry is to exercise every stage every day. Runs older than the retention window are deleted after
the new one is recorded (never the one that just ran); the history keeps their records.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import datakit

from .envelopes import Envelopes
from .history import append_history, read_status, write_status
from .lock import ferry_lock
from .plan import bundled_manifest, parse_utc_iso, read_plan, run_plan, utc_iso, write_plan
from .validate import Check, Validation, validate_run

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_LOCKED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
RUNS_DIR = "runs"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # fullmatch: "$" passes a final "\n"


class FerryInputError(ValueError):
    """Bad manifest, run id or prefix: nothing was run."""


@dataclass
class FerryOptions:
    prefix: str
    run_id: str | None = None
    keep_days: float = 14.0
    workers: int | None = None
    manifest: str | None = None          # default: the bundled smoke manifest
    envelopes: Envelopes = field(default_factory=Envelopes)
    report: bool = True
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True)


@dataclass
class FerryOutcome:
    run_id: str
    run_dir: str
    status: str                          # succeeded | failed | interrupted
    exit_code: int
    record: dict
    validation: Validation | None
    pruned: list[str]

    @property
    def failing(self) -> dict | None:
        return self.record.get("failing")


def default_run_id(t: float | None = None) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if t is None else t))


def _load(manifest_path: str, prefix: str):
    from datakit.manifest import ManifestInvalid
    from datakit.pipeline import build_plan, load_manifest

    try:
        m = load_manifest(manifest_path)
    except ManifestInvalid as e:
        raise FerryInputError("\n".join(str(err) for err in e.errors) + f"\n{len(e.errors)} error(s) in "
                              f"{manifest_path}; nothing was run.") from None
    except FileNotFoundError as e:
        raise FerryInputError(str(e)) from None
    try:
        return m, build_plan(m, prefix)
    except (ValueError, FileNotFoundError, ImportError) as e:
        raise FerryInputError(f"{manifest_path}: {e}") from None


def _choose_run_dir(prefix: str, run_id: str | None) -> tuple[str, str]:
    runs = os.path.join(prefix, RUNS_DIR)
    if run_id is not None:
        if os.path.exists(os.path.join(runs, run_id)):
            raise FerryInputError(f"run {run_id} already exists under {runs}; every ferry run starts from "
                                  "scratch, pick another --run-id")
        return run_id, os.path.join(runs, run_id)
    base = default_run_id()
    rid, n = base, 1
    while os.path.exists(os.path.join(runs, rid)):
        n += 1
        rid = f"{base}-{n}"
    return rid, os.path.join(runs, rid)


def prune_runs(prefix: str, keep_days: float, *, keep: tuple[str, ...] = (), now: float | None = None,
               log: Callable[[str], None] | None = None) -> list[str]:
    """Delete run dirs whose plan says they started more than ``keep_days`` ago. Only directories with
    a readable ferry.json are touched: anything else under runs/ is not ours to delete."""
    runs = os.path.join(prefix, RUNS_DIR)
    now = time.time() if now is None else now
    pruned = []
    for name in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        d = os.path.join(runs, name)
        if name in keep or not os.path.isdir(d):
            continue
        try:
            plan = read_plan(d)
            started = parse_utc_iso(plan.started) if plan else None
        except ValueError:
            started = None
        if started is None:
            if log:
                log(f"prune: {d} has no readable ferry.json; left alone")
            continue
        if now - started > keep_days * 86400:
            shutil.rmtree(d)
            pruned.append(name)
    return pruned


def _step_rows(summary) -> list[dict]:
    return [{"name": s["name"], "status": s["status"], "wall_s": s.get("wall_s"), "counters": s.get("counters") or {},
             "error": s.get("error")} for s in summary.steps]


def _failing(validation: Validation | None, summary, error: str | None) -> dict | None:
    if validation is not None and validation.first_failure is not None:
        f = validation.first_failure
        return {"stage": f.stage, "check": f.check, "message": f.message}
    if summary is not None:
        bad = next((s for s in summary.steps if s["status"] in ("failed", "cascaded")), None)
        if bad:
            return {"stage": bad["name"], "check": "built", "message": bad.get("error") or bad["status"]}
    if error:
        return {"stage": "ferry", "check": "run", "message": error}
    return None


def _record_dead_run(prefix: str, log: Callable[[str], None]) -> None:
    """A status still saying "running" while we hold the lock means that ferry died without a verdict
    (SIGKILL, OOM killer, power loss): record it as failed, so the history and the report show the
    gap instead of silently skipping a day."""
    st = read_status(prefix)
    if not st or st.get("status") != "running":
        return
    msg = (f"ferry process {st.get('pid')} on {st.get('host')} died before recording a verdict "
           "(killed, out of memory, or the machine went down); see its log")
    run_dir = st.get("run_dir") or ""
    failing = {"stage": "ferry", "check": "finished", "message": msg}
    append_history(prefix, {
        "run_id": st.get("run_id"), "status": "failed", "started": st.get("started"), "finished": None,
        "wall_s": None, "run_dir": os.path.relpath(run_dir, prefix) if run_dir else None, "failing": failing,
        "steps": [], "validation": None, "summary": {}, "error": msg,
    })
    write_status(prefix, {**st, "status": "failed", "exit_code": EXIT_FAILED, "failing_stage": "ferry",
                          "failing_check": "finished", "message": msg})
    log(f"ferry: previous run {st.get('run_id')} never finished; recorded as failed")


def check_options(opts: FerryOptions) -> None:
    """FerryInputError for options no run can use, before anything (the prefix included) is touched."""
    if opts.keep_days < 0:
        raise FerryInputError(f"--keep-days must be >= 0, got {opts.keep_days}")
    if opts.run_id is not None and not _RUN_ID.fullmatch(opts.run_id):
        raise FerryInputError(f"run id {opts.run_id!r} is not path-safe (letters, digits, '.', '_', '-')")


def run_ferry(opts: FerryOptions) -> FerryOutcome:
    """Run the ferry (module docstring). Raises FerryInputError (nothing run) and FerryLocked (another
    ferry holds the lock); everything else that goes wrong is a failed outcome with a status file."""
    log = opts.log
    prefix = os.path.abspath(opts.prefix)
    manifest_path = os.path.abspath(opts.manifest) if opts.manifest else bundled_manifest()
    check_options(opts)
    m, built = _load(manifest_path, prefix)           # a bad manifest fails before the prefix is touched
    with ferry_lock(prefix, run_id=opts.run_id or "(default)", since=utc_iso()):
        _record_dead_run(prefix, log)
        run_id, run_dir = _choose_run_dir(prefix, opts.run_id)
        plan = run_plan(run_id, m, built)
        write_plan(run_dir, plan)
        started = time.time()
        write_status(prefix, {"run_id": run_id, "status": "running", "started": plan.started,
                              "run_dir": run_dir, "pid": os.getpid(), "host": socket.gethostname()})
        log(f"ferry {run_id}: {len(plan.steps)} steps of {manifest_path} into {run_dir}")
        summary, validation, error, status = None, None, None, "failed"
        try:
            summary = _run_steps(m, built, run_dir, opts.workers, log)
            log(f"ferry {run_id}: pipeline {summary.status} in {summary.wall_s:.1f}s; validating")
            try:
                validation = validate_run(run_dir, opts.envelopes, plan=plan)
            except Exception as e:  # noqa: BLE001 - a validator crash is a red run with its reason
                validation = Validation(run_dir, run_id, [Check("ferry", "validate", "failed",
                                                                f"validator crashed: {type(e).__name__}: {e}")])
                log(traceback.format_exc())
            status = "succeeded" if summary.ok and validation.ok else "failed"
        except KeyboardInterrupt:
            status, error = "interrupted", "interrupted (KeyboardInterrupt / SIGINT)"
        except Exception as e:  # noqa: BLE001 - same: record it, exit non-zero
            error = f"{type(e).__name__}: {e}"
            log(traceback.format_exc())
        finished = time.time()
        pruned = prune_runs(prefix, opts.keep_days, keep=(run_id,), log=log)
        record = {
            "run_id": run_id, "status": status, "started": plan.started, "finished": utc_iso(finished),
            "wall_s": round(finished - started, 3), "host": socket.gethostname(), "manifest": manifest_path,
            "run_dir": os.path.relpath(run_dir, prefix), "datakit_version": datakit.__version__,
            "workers": opts.workers, "failing": _failing(validation, summary, error), "error": error,
            "steps": _step_rows(summary) if summary else [],
            "validation": ({k: v for k, v in validation.to_dict().items() if k not in ("summary", "run_dir")}
                           if validation else None),
            "summary": validation.summary if validation else {},
            "pruned": pruned,
        }
        append_history(prefix, record)
        exit_code = {"succeeded": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(status, EXIT_FAILED)
        failing = record["failing"] or {}
        write_status(prefix, {
            "run_id": run_id, "status": status, "exit_code": exit_code, "started": plan.started,
            "finished": record["finished"], "wall_s": record["wall_s"], "run_dir": run_dir,
            "failing_stage": failing.get("stage"), "failing_check": failing.get("check"),
            "message": failing.get("message"), "history": os.path.join(prefix, "history.jsonl"),
            "report": os.path.join(prefix, "report.html") if opts.report else None,
        })
        if opts.report:
            try:
                from .report import write_report

                write_report(prefix)
            except Exception as e:  # noqa: BLE001 - the run's verdict stands without a page
                log(f"ferry {run_id}: report not written: {type(e).__name__}: {e}")
        if pruned:
            log(f"ferry {run_id}: pruned {len(pruned)} run(s) older than {opts.keep_days:g} days: {', '.join(pruned)}")
        if failing:
            log(f"ferry {run_id}: FAILED at {failing['stage']}: {failing['check']}: {failing['message']}")
        else:
            log(f"ferry {run_id}: {status} in {record['wall_s']:.1f}s "
                f"({validation.to_dict()['counts']['ok'] if validation else 0} checks passed)")
        return FerryOutcome(run_id, run_dir, status, exit_code, record, validation, pruned)


def _run_steps(m, plan, run_dir: str, workers: int | None, log: Callable[[str], None]):
    from datakit import pipeline
    from datakit.report.events import event_lines

    by_name = {s.name: s for s in plan.runnable}

    def on_event(ev: dict) -> None:
        if ev.get("event") == "step_skipped":
            return
        for line in event_lines(ev, by_name):
            log(line)

    return pipeline.run(m, prefix=run_dir, plan=plan, workers=workers, on_event=on_event, progress=False)
