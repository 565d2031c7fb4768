"""JAX training stage: decoder-only transformer trained on token caches (see DESIGN.md, issue 7).

Modules, one concern each: config (TrainConfig, presets), model (params, forward, loss, FLOPs),
optim (AdamW, schedules, skip-step), loop (jit step, data parallel, eval, metrics, resume),
checkpoint (atomic save/restore), plot (PNG loss curve), hardware (devices, dtype, peak FLOPs),
stage (train_model: caches -> loop).

``train_model`` is imported lazily: it pulls in the tokenize reader, which model-only users
(benchmarks, tests of the math) do not need.
"""

from datakit.train.checkpoint import CheckpointError
from datakit.train.config import MODEL_PRESETS, ConfigError, ModelConfig, TrainConfig
from datakit.train.loop import EvalSet, TrainResult, run_training

__all__ = [
    "CheckpointError", "ConfigError", "EvalSet", "MODEL_PRESETS", "ModelConfig", "TrainConfig",
    "TrainResult", "run_training", "train_model", "cache_eval_set",
]


def __getattr__(name: str):
    if name in ("train_model", "cache_eval_set"):
        from datakit.train import stage

        return getattr(stage, name)
    raise AttributeError(f"module 'datakit.train' has no attribute {name!r}")
