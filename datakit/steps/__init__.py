"""Steps: named, versioned, content-addressed units of work and the runner that walks their DAG.

    from datakit.steps import Step, run_steps

    raw = Step("download-wiki", download, config={"uri": "https://...", "revision": "abc"}, version="2")
    norm = Step("normalize-wiki", normalize, config={"lang": "en"}, deps=(raw,))
    summary = run_steps([norm], prefix="gs://bucket/runs")   # or a local dir
    summary.result("normalize-wiki")

Output of a step: ``<prefix>/<name>-<identity>/`` with markers ``.status`` (RUNNING/SUCCESS/FAILED,
written last), ``artifact.json`` (result, counters, config, deps, versions, wall time), ``error.txt``
on failure, and ``.lease.NNNNNN`` lease records. Identity = hash of (name, config, version, deps'
identities): see :mod:`datakit.steps.identity` for what may and may not go into config. Local input
files enter config as a content digest (:func:`fingerprint_files`), their per-file hashes as
``Step(inputs=...)``, so a dry run can say which files changed.
"""
from .events import EVENTS_FILE, read_events
from .fingerprint import InputFingerprint, digest_of, fingerprint_files
from .identity import ConfigError, identity_of
from .lease import Lease, LeaseLost
from .runner import RunSummary, run_steps, step_status
from .step import Step, StepContext, StepRecord, collect_steps

__all__ = [
    "Step", "StepContext", "StepRecord", "RunSummary", "run_steps", "step_status", "identity_of",
    "collect_steps", "ConfigError", "Lease", "LeaseLost", "EVENTS_FILE", "read_events",
    "InputFingerprint", "fingerprint_files", "digest_of",
]
