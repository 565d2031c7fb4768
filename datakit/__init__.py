"""datakit: pretraining data pipelines, from manifest to trained model.

The top-level names (`load_manifest`, `build_steps`, `run`, `Step`, ...) come from `datakit.api` and are
imported on first use, so `import datakit` stays cheap for workers that only need the engine.
"""

__version__ = "0.1.0"

_API = {"load_manifest", "manifest_from_dict", "build_steps", "steps_by_name", "run", "Step", "StepContext",
        "RunSummary", "ExecConfig"}


def __getattr__(name: str):
    if name in _API:
        from datakit import api

        return getattr(api, name)
    raise AttributeError(f"module 'datakit' has no attribute {name!r}")
