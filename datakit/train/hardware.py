"""Device facts the loop needs: which devices to use, compute dtype, and peak FLOPs for MFU.

MFU is only meaningful against a known peak, so we report it only where the device's dense bf16
peak is in this table (or the caller supplies ``peak_flops_per_device``, e.g. a measured CPU matmul
peak in the benchmark). An unknown device gives ``mfu=None`` rather than a made-up number.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from datakit.train.config import ConfigError, TrainConfig

# Dense (no sparsity) bf16 tensor-core peak per device, FLOP/s, from vendor datasheets.
# Matched by lowercase substring of `device.device_kind`, first match wins (order matters).
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("h100 pcie", 756e12),
    ("h100", 989e12),
    ("h200", 989e12),
    ("gh200", 989e12),
    ("b200", 2250e12),
    ("a100", 312e12),
    ("l40s", 362e12),
    ("a10g", 70e12),
    ("l4", 121e12),
    ("v100", 125e12),  # fp16 tensor cores (no bf16 on V100)
    ("tpu v6 lite", 918e12),
    ("tpu v6e", 918e12),
    ("tpu v5 lite", 197e12),
    ("tpu v5e", 197e12),
    ("tpu v5p", 459e12),
    ("tpu v5", 459e12),
    ("tpu v4", 275e12),
)


def select_devices(cfg: TrainConfig) -> list[jax.Device]:
    devices = jax.local_devices()
    n = cfg.num_devices or len(devices)
    if n > len(devices):
        raise ConfigError(
            f"train.num_devices={n} but only {len(devices)} local device(s) are visible "
            f"({devices[0].platform})"
        )
    cfg.validate_devices(n)
    return devices[:n]


def compute_dtype_for(cfg: TrainConfig, device: jax.Device):
    """bf16 matmuls on accelerators (params stay fp32); fp32 on CPU where bf16 is emulated/slow."""
    if cfg.compute_dtype == "float32":
        return jnp.float32
    if cfg.compute_dtype == "bfloat16":
        return jnp.bfloat16
    return jnp.float32 if device.platform == "cpu" else jnp.bfloat16


def peak_flops_per_device(cfg: TrainConfig, device: jax.Device, compute_dtype) -> float | None:
    if cfg.peak_flops_per_device:
        return float(cfg.peak_flops_per_device)
    if device.platform == "cpu" or compute_dtype != jnp.bfloat16:
        return None
    kind = device.device_kind.lower()
    for needle, peak in PEAK_BF16_FLOPS:
        if needle in kind:
            return peak
    return None
