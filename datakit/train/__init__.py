"""JAX training stage: decoder-only transformer trained on token caches (see docs/architecture.md).

Modules, one concern each: config (TrainConfig, presets), model (params, forward, loss, FLOPs),
optim (AdamW, schedules, skip-step), programs (the jitted train/eval steps, data-parallel shardings),
loop (run_training and the Trainer: resume, step, log, evaluate, checkpoint), evaluate (EvalSet,
loss and bits per byte), metrics (metrics.jsonl), prefetch (batches loaded ahead), checkpoint (atomic
save/restore), plot (PNG loss curve), hardware (devices, dtype, peak FLOPs), remote (training into a
remote out_dir through a local mirror), stage (train_model: caches -> loop).

Every name is imported lazily (PEP 562): importing ``datakit.train.config`` (which the manifest and the
mixture config do for every `datakit run`) must not pull in JAX, which costs over a CPU-second per
process; only a run that trains pays for it.
"""

from __future__ import annotations

from datakit.core.lazy import lazy_exports

_HOMES = {
    "CheckpointError": "checkpoint", "ConfigError": "config", "MODEL_PRESETS": "config", "ModelConfig": "config",
    "TrainConfig": "config", "EvalSet": "evaluate", "TrainResult": "loop", "run_training": "loop",
    "train_model": "stage", "cache_eval_set": "stage",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
