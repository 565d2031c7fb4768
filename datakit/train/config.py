"""Training configuration: model shape, optimizer, schedule, loop cadence, and named presets.

Configs are plain dataclasses so the step layer can hash them into an identity (``to_dict`` gives a
canonical, JSON-able view) and so a manifest's ``train:`` section maps onto them field by field
(``TrainConfig.from_dict``). Every shape constraint the model relies on is checked up front by
``validate`` so a config that cannot fit fails before any compilation, with the offending field named.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
import re
from typing import Any, Literal


class ConfigError(ValueError):
    """A training config that cannot be built or cannot fit the data/devices; names the field."""


@dataclass(frozen=True)
class ModelConfig:
    """Decoder-only transformer shape.

    ``vocab_size=None`` means "take it from the token cache"; an explicit value must be at least the
    cache's vocabulary (a smaller model vocab would index past the embedding table).
    """

    d_model: int = field(default=64, metadata={"min": 1})
    n_layers: int = field(default=2, metadata={"min": 1})
    n_heads: int = field(default=4, metadata={"min": 1})
    n_kv_heads: int = field(default=2, metadata={"min": 1})
    d_ff: int = field(default=192, metadata={"min": 1})
    vocab_size: int | None = field(default=None, metadata={"min": 1})
    rope_theta: float = field(default=10_000.0, metadata={"gt": 0})
    qk_norm: bool = False
    tie_embeddings: bool = True
    norm_eps: float = field(default=1e-5, metadata={"gt": 0})
    init_std: float = field(default=0.02, metadata={"gt": 0})
    remat: bool = False  # recompute block activations in backward (memory for FLOPs; same math)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> None:
        for name in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"model.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.n_heads={self.n_heads} does not divide model.d_model={self.d_model}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"model.n_kv_heads={self.n_kv_heads} does not divide model.n_heads={self.n_heads} "
                "(grouped-query attention shares each kv head across an equal group of query heads)"
            )
        if self.head_dim % 2:
            raise ConfigError(
                f"model head_dim = d_model/n_heads = {self.head_dim} must be even for rotary embeddings"
            )
        if self.vocab_size is not None and (not isinstance(self.vocab_size, int) or self.vocab_size <= 0):
            raise ConfigError(f"model.vocab_size must be a positive integer or null, got {self.vocab_size!r}")
        if self.rope_theta <= 0:
            raise ConfigError(f"model.rope_theta must be > 0, got {self.rope_theta!r}")


# Presets are sized by name. `nano` is a CPU smoke model (seconds per hundred steps), `small` a
# laptop-scale model, `150m` roughly 150M parameters with a 32k vocabulary (GPU scale).
MODEL_PRESETS: dict[str, ModelConfig] = {
    "nano": ModelConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=192),
    "small": ModelConfig(d_model=256, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=704),
    "150m": ModelConfig(
        d_model=768, n_layers=18, n_heads=12, n_kv_heads=4, d_ff=2048, qk_norm=True,
        tie_embeddings=True, remat=True,
    ),
}

# Loop sizes that go with each preset (overridable field by field).
LOOP_PRESETS: dict[str, dict[str, Any]] = {
    "nano": dict(seq_len=128, batch_size=8, steps=200, learning_rate=3e-3, warmup_steps=20),
    "small": dict(seq_len=256, batch_size=16, steps=1000, learning_rate=1e-3, warmup_steps=100),
    "150m": dict(seq_len=1024, batch_size=64, steps=20_000, learning_rate=6e-4, warmup_steps=1000),
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (plus cadence fields that do not change the curve).

    Fields in ``CADENCE_FIELDS`` only change how often we log/evaluate/checkpoint, so they are left out
    of ``trajectory_fingerprint``: a run may be resumed with a different checkpoint interval, but not
    with a different learning rate or model.
    """

    # The manifest's `train:` section is this class: `preset` picks every default (see _manifest_defaults),
    # model-shape keys are written flat next to the loop keys, `lr`/`warmup` are short names.
    preset: Literal["nano", "small", "150m"] = "nano"
    model: ModelConfig = field(default_factory=ModelConfig, metadata={"flatten": True})
    seq_len: int = field(default=128, metadata={"min": 1})
    batch_size: int = field(default=8, metadata={"min": 1})
    steps: int = field(default=200, metadata={"min": 1})
    seed: int = 0  # parameter init
    data_seed: int = 0  # Feistel permutation / mixture order
    # optimizer
    learning_rate: float = field(default=3e-3, metadata={"gt": 0, "aliases": ("lr",)})
    min_lr_ratio: float = field(default=0.1, metadata={"min": 0, "max": 1})
    schedule: Literal["wsd", "cosine", "constant"] = "wsd"
    warmup_steps: int = field(default=20, metadata={"min": 0, "aliases": ("warmup",)})
    decay_fraction: float = field(default=0.2, metadata={"min": 0, "max": 1})  # WSD: share of steps decaying
    weight_decay: float = field(default=0.1, metadata={"min": 0})
    beta1: float = field(default=0.9, metadata={"min": 0, "lt": 1})
    beta2: float = field(default=0.95, metadata={"min": 0, "lt": 1})
    adam_eps: float = field(default=1e-8, metadata={"gt": 0})
    grad_clip: float | None = field(default=1.0, metadata={"gt": 0})  # null: no clipping
    z_loss: float = field(default=0.0, metadata={"min": 0})  # coefficient of mean(logsumexp(logits)**2)
    decay_norms_and_embeddings: bool = False
    # numerics: "auto" = bfloat16 compute on GPU/TPU, float32 on CPU; params always float32
    compute_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    # cadence
    log_every: int = field(default=10, metadata={"min": 1})
    eval_every: int = field(default=0, metadata={"min": 0})  # 0: evaluate only at the end
    # None: evaluate each validation split whole. Otherwise about this many tokens per source,
    # rounded UP to whole cache shards (per-shard byte counts keep bpb exact).
    eval_max_tokens: int | None = field(default=None, metadata={"min": 1})
    eval_batch_size: int | None = field(default=None, metadata={"min": 1})  # None: batch_size
    checkpoint_every: int = field(default=0, metadata={"min": 0})  # 0: checkpoint only at the end
    keep_checkpoints: int = field(default=2, metadata={"min": 1})
    # hardware
    num_devices: int | None = field(default=None, metadata={"min": 1})  # None: all local devices
    # override the MFU table (e.g. measured CPU peak)
    peak_flops_per_device: float | None = field(default=None, metadata={"gt": 0})
    prefetch: int = field(default=2, metadata={"min": 1})

    CADENCE_FIELDS = (
        "log_every", "eval_every", "eval_max_tokens", "eval_batch_size", "checkpoint_every",
        "keep_checkpoints", "peak_flops_per_device", "prefetch", "num_devices",
    )

    # ----- construction -----------------------------------------------------------------------
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "TrainConfig":
        """A named preset (`nano`, `small`, `150m`) with field overrides.

        ``model`` overrides may be given as a dict of ModelConfig fields.
        """
        if name not in MODEL_PRESETS:
            raise ConfigError(f"unknown train preset {name!r}; known: {', '.join(MODEL_PRESETS)}")
        model = MODEL_PRESETS[name]
        model_over = overrides.pop("model", None)
        if isinstance(model_over, ModelConfig):
            model = model_over
        elif model_over:
            model = _replace_checked(model, dict(model_over), "model")
        base = dict(LOOP_PRESETS[name])
        base.update(overrides)
        return _replace_checked(cls(preset=name, model=model), base, "train")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """Build from a nested dict: ``{"preset": "nano", "steps": 50, "model": {...}}`` (as `to_dict`)."""
        data = dict(data)
        preset = data.pop("preset", None)
        if preset is not None:
            return cls.from_preset(preset, **data)
        model = data.pop("model", None)
        base = cls()
        if isinstance(model, dict):
            base = dataclasses.replace(base, model=_replace_checked(ModelConfig(), model, "model"))
        elif isinstance(model, ModelConfig):
            base = dataclasses.replace(base, model=model)
        return _replace_checked(base, data, "train")

    @classmethod
    def _manifest_defaults(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """The manifest schema's hook: every key the user did not write takes its preset's value."""
        name = raw.get("preset", "nano")
        if name not in MODEL_PRESETS:
            raise ValueError(name)
        return {"model": MODEL_PRESETS[name], **LOOP_PRESETS[name]}

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        """Constraints spanning fields (heads divide d_model, warmup within steps...), as located errors."""
        try:
            self.validate()
        except ConfigError as e:
            m = re.search(r"(?:train|model)\.(\w+)", str(e))
            return [(m.group(1) if m else "preset", str(e))]
        return []

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def trajectory_fingerprint(self) -> str:
        """Hash of the fields that determine the loss curve (resume refuses a mismatch)."""
        d = self.to_dict()
        for name in (*self.CADENCE_FIELDS, "preset"):  # the preset only named the defaults; values count
            d.pop(name, None)
        blob = json.dumps(d, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    # ----- checks ----------------------------------------------------------------------------
    def validate(self) -> None:
        self.model.validate()
        for name in ("seq_len", "batch_size", "steps", "log_every", "keep_checkpoints", "prefetch"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"train.{name} must be a positive integer, got {value!r}")
        for name in ("warmup_steps", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"train.{name} must be a non-negative integer, got {value!r}")
        if self.schedule not in ("wsd", "cosine", "constant"):
            raise ConfigError(f"train.schedule must be 'wsd', 'cosine' or 'constant', got {self.schedule!r}")
        if self.warmup_steps > self.steps:
            raise ConfigError(f"train.warmup_steps={self.warmup_steps} exceeds train.steps={self.steps}")
        if not 0.0 <= self.decay_fraction <= 1.0:
            raise ConfigError(f"train.decay_fraction must be in [0, 1], got {self.decay_fraction!r}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if self.learning_rate <= 0:
            raise ConfigError(f"train.learning_rate must be > 0, got {self.learning_rate!r}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ConfigError(f"train.grad_clip must be > 0 or null, got {self.grad_clip!r}")
        if self.z_loss < 0 or self.weight_decay < 0:
            raise ConfigError("train.z_loss and train.weight_decay must be >= 0")
        if self.compute_dtype not in ("auto", "float32", "bfloat16"):
            raise ConfigError(
                f"train.compute_dtype must be 'auto', 'float32' or 'bfloat16', got {self.compute_dtype!r}"
            )
        if self.eval_max_tokens is not None and self.eval_max_tokens <= 0:
            raise ConfigError(f"train.eval_max_tokens must be > 0 or null, got {self.eval_max_tokens!r}")
        if self.eval_batch_size is not None and self.eval_batch_size <= 0:
            raise ConfigError(f"train.eval_batch_size must be > 0 or null, got {self.eval_batch_size!r}")

    def validate_devices(self, num_devices: int) -> None:
        """Data parallelism splits every batch evenly over devices."""
        eval_bs = self.eval_batch_size or self.batch_size
        if self.batch_size % num_devices:
            raise ConfigError(
                f"train.batch_size={self.batch_size} is not divisible by the {num_devices} devices "
                "used for data parallelism"
            )
        if eval_bs % num_devices:
            raise ConfigError(
                f"train.eval_batch_size={eval_bs} is not divisible by the {num_devices} devices "
                "used for data parallelism"
            )


def _replace_checked(obj: Any, overrides: dict[str, Any], where: str) -> Any:
    """dataclasses.replace that names an unknown field instead of a bare TypeError."""
    names = {f.name for f in dataclasses.fields(obj)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ConfigError(
            f"unknown field(s) {', '.join(where + '.' + u for u in unknown)}; "
            f"known: {', '.join(sorted(names))}"
        )
    if where == "train" and isinstance(overrides.get("model"), dict):
        overrides = dict(overrides)
        overrides["model"] = _replace_checked(obj.model, overrides["model"], "model")
    return dataclasses.replace(obj, **overrides)
