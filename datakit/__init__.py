"""datakit: pretraining data pipelines, from manifest to trained model.

The public API (imported on first use, so `import datakit` stays cheap for workers that only need the
engine):

    load_manifest(path)            a manifest, validated, every error located (file:line:column)
    manifest_from_dict(data)       the same from a dict (a user stage's `call` may be the function)
    build_plan(manifest)           the DAG `datakit run` would execute, as data (what `<prefix>/plan.json` holds)
    build_steps(manifest)          its runnable steps
    steps_by_name(manifest)        the same, by step name
    run(manifest, ...)             run it; RunSummary with every step's result and the data summary
    Step, StepContext, RunSummary  custom steps and what they receive and return
    ExecConfig                     engine settings (backend, workers, ...)

The engine is `datakit.shuffle` (`Dataset`); the design is docs/architecture.md in the repository.
"""

import os as _os

__version__ = "0.1.0"

# pyarrow's allocator (mimalloc in its wheels) hands freed pages back with MADV_DONTNEED shortly after
# they are freed, so every task page-faults again the memory the one before it used: a takedown over
# 400 MB of documents took 426k page faults and 2.0 s of system time. With MADV_FREE the kernel still
# takes the pages back under memory pressure but a reuse costs no fault (263k faults, 1.55 s). Set
# before pyarrow loads (workers inherit it); a user's own setting wins.
_os.environ.setdefault("MIMALLOC_PURGE_DECOMMITS", "0")
# Its arenas are also backed by transparent huge pages (mimalloc's allow_thp, on by default), so a fault
# zeroes 2 MB even where a task touches a few pages of it: 4.5% of a 1% takedown's CPU at 400 MB was the
# kernel clearing huge pages. Off: medians of interleaved incremental runs 1-5% lower (takedown 3.11 ->
# 2.95 CPU-s, edit 1.56 -> 1.51 over six rounds each), fresh builds within their spread, peak PSS of the
# tree about 5% lower.
_os.environ.setdefault("MIMALLOC_ALLOW_THP", "0")
# numpy's OpenBLAS starts a thread per core when numpy is imported, which costs every datakit process
# (the driver, the zygote, each spawned worker) about 60 ms of CPU before it does any work, and the
# engine's parallelism is processes, not BLAS threads (Ray sets OMP_NUM_THREADS=1 in its workers for the
# same reason). One BLAS thread also makes the few matrix products (mixture search, the classifier's
# embedding) independent of the core count. A user's own setting wins.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__all__ = ["load_manifest", "manifest_from_dict", "build_plan", "build_steps", "steps_by_name", "run", "Step", "StepContext",
           "RunSummary", "ExecConfig"]
_API = set(__all__)


def __getattr__(name: str):
    if name in _API:
        from datakit import api

        return getattr(api, name)
    raise AttributeError(f"module 'datakit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
