"""The daily smoke ferry: the whole pipeline on a small real corpus, validated stage by stage.

    from datakit.ferry import FerryOptions, run_ferry, validate_run, write_report

    outcome = run_ferry(FerryOptions(prefix="ferry-out"))      # lock, run, validate, record, prune, report
    v = validate_run("ferry-out/runs/20260101T063000Z")         # Validation: ok, first_failure, checks
    write_report("ferry-out")                                  # ferry-out/report.html

The bundled manifest (smoke.yaml) and its planted benchmark (smoke_benchmark.jsonl) live beside this
file; `datakit run` with no manifest runs the same corpus. CLI: `datakit ferry run|validate|report|install-cron`.
"""

from .envelopes import Envelopes, load_envelopes
from .history import read_history
from .lock import FerryLocked, ferry_lock
from .plan import RunPlan, bundled_manifest, read_plan
from .report import render_report, write_report
from .run import FerryInputError, FerryOptions, FerryOutcome, prune_runs, run_ferry
from .validate import Check, Validation, validate_run

__all__ = [
    "Envelopes", "load_envelopes", "read_history", "FerryLocked", "ferry_lock", "RunPlan", "bundled_manifest",
    "read_plan", "render_report", "write_report", "FerryInputError", "FerryOptions", "FerryOutcome",
    "prune_runs", "run_ferry", "Check", "Validation", "validate_run",
]
