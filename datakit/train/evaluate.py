"""Evaluation over validation sets: token-weighted loss and bits per byte, per set and overall.

Every set is evaluated whole (the set decides its extent). Batches are cut into device-sized chunks;
a partial chunk is padded with rows whose mask is 0. The device returns scalars per chunk and they
are fetched once per set, so evaluation does not sync with the host per batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import jax
import numpy as np

from datakit.train.config import TrainConfig
from datakit.train.metrics import finite_or_none

LN2 = math.log(2.0)


@dataclass
class EvalSet:
    """One validation split: a fresh batch iterator per evaluation plus the byte count for bpb.

    ``batches()`` yields (rows, T+1) token arrays, or (tokens, mask) pairs where mask (rows, T) marks
    the targets that count (0 for padding). The set decides its own extent (the loop evaluates all
    it yields; ``sequences`` says how many windows that is, for the progress line).
    ``bytes_for(targets_evaluated)`` returns the UTF-8 byte count of the text those
    targets encode, or None when it cannot vouch for it (bpb is then omitted, never guessed).
    """

    name: str
    batches: Callable[[], Iterable[np.ndarray]]
    bytes_for: Callable[[int], float | None]
    sequences: int | None = None  # windows of seq_len it evaluates, when known (shown as progress)


def bits_per_byte(nll_sum_nats: float, num_bytes: float | None) -> float | None:
    """Total NLL in nats over some text / (ln 2 x its UTF-8 bytes): tokenizer-independent."""
    if not num_bytes:
        return None
    return float(nll_sum_nats) / (LN2 * float(num_bytes))


def evaluate(eval_sets: list[EvalSet], eval_step: Callable, params: Any, sharding: Any,
             cfg: TrainConfig) -> dict[str, Any]:
    """loss, bpb and tokens over all sets, and the same per set under ``sources``. bpb is given only
    when every set vouches for its byte count."""
    per: dict[str, dict[str, float | None]] = {}
    tot_nll, tot_count, tot_bytes, bytes_known = 0.0, 0, 0.0, True
    for es in eval_sets:
        nll, count = _nll_and_count(es, eval_step, params, sharding, cfg)
        nbytes = es.bytes_for(count) if count else None
        per[es.name] = {
            "loss": finite_or_none(nll / count) if count else None,
            "bpb": finite_or_none(bits_per_byte(nll, nbytes)),
            "tokens": count,
            "bytes": nbytes,
        }
        tot_nll += nll
        tot_count += count
        if nbytes is None:
            bytes_known = False
        else:
            tot_bytes += nbytes
    return {
        "loss": finite_or_none(tot_nll / tot_count) if tot_count else None,
        "bpb": finite_or_none(bits_per_byte(tot_nll, tot_bytes)) if bytes_known and tot_count else None,
        "tokens": tot_count,
        "sources": per,
    }


def _nll_and_count(es: EvalSet, eval_step: Callable, params: Any, sharding: Any,
                   cfg: TrainConfig) -> tuple[float, int]:
    """The summed NLL (nats) and the number of targets counted over one set."""
    rows = cfg.eval_batch_size or cfg.batch_size
    parts = []
    for i, item in enumerate(es.batches()):
        b, mask = _checked(es.name, i, item, cfg.seq_len)
        for lo in range(0, b.shape[0], rows):  # device-sized chunks
            chunk = _padded(b[lo : lo + rows], np.asarray(mask[lo : lo + rows]), rows)
            # device scalars: no host sync per batch, results fetched once per eval set
            parts.append(eval_step(params, *(jax.device_put(a, sharding) for a in chunk)))
    fetched = jax.device_get(parts)
    nll = float(sum(np.float64(s) for s, _ in fetched))
    count = int(sum(int(round(float(c))) for _, c in fetched))
    return nll, count


def _checked(name: str, i: int, item: Any, seq_len: int) -> tuple[np.ndarray, Any]:
    """A batch and its mask (all ones when the set gives none), shapes checked with the set named."""
    b, mask = item if isinstance(item, tuple) else (item, None)
    b = np.asarray(b)
    if b.ndim != 2 or b.shape[1] != seq_len + 1:
        raise ValueError(f"eval set {name!r}: batch {i} has shape {b.shape}, expected (rows, {seq_len + 1})")
    if mask is None:
        mask = np.ones((b.shape[0], seq_len), np.float32)
    elif np.shape(mask) != (b.shape[0], seq_len):
        raise ValueError(
            f"eval set {name!r}: batch {i} mask has shape {np.shape(mask)}, expected {(b.shape[0], seq_len)}"
        )
    return b, mask


def _padded(b: np.ndarray, mask: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunk padded to ``rows`` rows (padded rows weigh 0), as the eval step's dtypes."""
    if b.shape[0] < rows:
        b = np.concatenate([b, np.zeros((rows - b.shape[0], b.shape[1]), b.dtype)])
        mask = np.concatenate([mask, np.zeros((rows - mask.shape[0], mask.shape[1]), mask.dtype)])
    return b.astype(np.int32), mask.astype(np.float32)
