"""Resolving a mixture into exact per-step weights for one training budget.

Pure functions of token counts and settings, so `datakit mix show`, the train step and the search
agree to the sequence. The result is a list of phases (start step, integer counts per mixture block):
integer counts are what the block mixture draws exactly, so the recorded weights are the weights used.

The schedule handed to training ends with a closing phase at the budget's last step (never reached):
like every phase boundary, it makes the draws of the block the budget ends in dense, so over the
budget each component's draw numbers are exactly 0, 1, ..., draws - 1 (a partial block would otherwise
use a scattered subset of its ranks).

Caps (`max_epochs`) hold exactly: over the whole budget (every phase, counted sequence by sequence by
the block mixture itself) a component's draws, hence its highest draw number + 1, never exceed
``floor(max_epochs * windows)``: no window is drawn in an epoch past the cap.
Capping is water-filling: a component over its cap has its weight scaled down in every phase and the
freed share goes to the others by their weights; repeated until the exact count is within every cap.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from datakit.tokenize.mixture import largest_remainder_counts, mixture_for

_MAX_ROUNDS = 400


class MixtureError(ValueError):
    """A mixture that cannot be built for this budget (names what to change)."""


@dataclass(frozen=True)
class MixturePlan:
    """phases: (start step, counts per block) from step 0; draws/epochs: exact over the budget."""

    phases: tuple[tuple[int, dict[str, int]], ...]
    windows: dict[str, int]
    draws: dict[str, int]
    epochs: dict[str, float]
    capped: tuple[str, ...]
    block_size: int
    sequences: int
    steps: int

    @property
    def weights(self) -> dict[str, float]:
        """The first phase's weights (fractions of a block)."""
        return {n: c / self.block_size for n, c in self.phases[0][1].items()}

    def schedule(self) -> list[tuple[int, dict[str, float]]]:
        """What TrainBatches takes: the phases (start step, counts as weights), closed at the budget."""
        return _closed([(s, {n: float(c) for n, c in counts.items()}) for s, counts in self.phases], self.steps)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["phases"] = [{"start": s, "weights": {n: round(c / self.block_size, 6) for n, c in counts.items()},
                        "counts": counts} for s, counts in self.phases]
        d["epochs"] = {n: round(e, 6) for n, e in self.epochs.items()}
        d["capped"] = list(self.capped)
        return d


def proportional(tokens: dict[str, int], temperature: float = 1.0) -> dict[str, float]:
    """Token-proportional weights, flattened by a temperature: w_i ~ tokens_i ** (1 / T)
    (T = 1 by tokens, T -> infinity uniform). Components without tokens get 0."""
    if temperature <= 0:
        raise MixtureError(f"temperature must be > 0, got {temperature}")
    raw = {n: (t ** (1.0 / temperature) if t > 0 else 0.0) for n, t in sorted(tokens.items())}
    total = sum(raw.values())
    if total <= 0:
        raise MixtureError(f"no component has tokens ({', '.join(sorted(tokens))})")
    return {n: v / total for n, v in raw.items()}


def windows_of(tokens: dict[str, int], seq_len: int) -> dict[str, int]:
    """Training windows per component, as TrainBatches cuts them: (tokens - 1) // seq_len."""
    return {n: max(0, (t - 1) // seq_len) for n, t in tokens.items()}


def _counts(phases: list[tuple[int, dict[str, float]]], scale: dict[str, float], block_size: int):
    out = []
    for start, w in phases:
        scaled = {n: w[n] * scale.get(n, 1.0) for n in w}
        if not any(v > 0 for v in scaled.values()):
            raise MixtureError(f"the phase from step {start} has no weight left under the caps")
        counts = largest_remainder_counts(scaled, block_size)
        out.append((start, {n: c for n, c in counts.items() if c > 0}))
    return out


def _closed(schedule: list, steps: int) -> list:
    """The schedule with a closing phase at ``steps`` (the budget's end; see the module docstring)."""
    live = [(s, w) for s, w in schedule if s < steps] or schedule[:1]
    return live + [(steps, live[-1][1])]


def _draws(counts, block_size: int, seed: int, batch_size: int, steps: int):
    """(draws, extent) per component over the budget, counted by the mixture the trainer uses."""
    schedule = _closed([(s, {n: float(c) for n, c in w.items()}) for s, w in counts], steps)
    sequences = steps * batch_size
    mixture = mixture_for(schedule, block_size, seed, batch_size)
    return mixture.draws_in_prefix(sequences), mixture.extent_in_prefix(sequences)


def resolve(phases: list[tuple[int, dict[str, float]]], windows: dict[str, int], *, steps: int,
            batch_size: int, block_size: int, seed: int, max_epochs: dict[str, float] | None = None) -> MixturePlan:
    """Exact phases for ``steps`` x ``batch_size`` sequences, every cap held (see the module docstring)."""
    max_epochs = dict(max_epochs or {})
    unknown = sorted(set(max_epochs) - set(windows))
    if unknown:
        raise MixtureError(f"max_epochs names {', '.join(unknown)}, not a mixture component "
                           f"(components: {', '.join(sorted(windows))})")
    sequences = steps * batch_size
    caps = {n: math.floor(e * windows[n]) for n, e in max_epochs.items()}
    live = {n for _, w in phases for n, v in w.items() if v > 0}
    room = sum(caps.get(n, sequences) for n in live)
    if room < sequences:
        raise MixtureError(f"the caps allow {room} sequences but the budget is {sequences} "
                           f"({steps} steps x {batch_size}); raise max_epochs, add data or lower train.steps")
    scale: dict[str, float] = {}
    for _ in range(_MAX_ROUNDS):
        counts = _counts(phases, scale, block_size)
        draws, extent = _draws(counts, block_size, seed, batch_size, steps)
        over = {n: d for n, d in extent.items() if n in caps and d > caps[n]}
        if not over:
            return _plan(counts, windows, draws, tuple(sorted(scale)), block_size, steps, batch_size)
        if not _can_shrink(over, counts, phases):  # only phases mixing nothing but capped components are left
            raise MixtureError(
                "max_epochs cannot hold: " + ", ".join(f"{n} needs {d} windows, its cap allows {caps[n]}"
                                                       for n, d in sorted(over.items()))
                + " (a phase mixes only capped components, so nothing can take their share); give that phase "
                  "other components, shorten it, or raise max_epochs")
        for n, d in over.items():
            # proportional shrink, and at least one unit of a block, so rounding cannot stall it
            scale[n] = scale.get(n, 1.0) * min(caps[n] / d, 1.0 - 1.0 / block_size)
    raise MixtureError(f"could not meet the max_epochs caps {max_epochs} within {_MAX_ROUNDS} rounds; "
                       "loosen them or raise the mixture block size")


def _can_shrink(over: dict[str, int], counts, phases) -> bool:
    """Is there a phase where an over-cap component still draws and another (not over) could take its
    share?"""
    for (_, c), (_, w) in zip(counts, phases):
        takers = [m for m, v in w.items() if v > 0 and m not in over]
        if takers and any(c.get(n, 0) > 0 for n in over):
            return True
    return False


def _plan(counts, windows, draws, capped, block_size, steps, batch_size) -> MixturePlan:
    full = {n: draws.get(n, 0) for n in sorted(windows)}
    epochs = {n: (full[n] / windows[n] if windows[n] else 0.0) for n in full}
    return MixturePlan(tuple((s, dict(sorted(c.items()))) for s, c in counts), dict(sorted(windows.items())),
                       full, epochs, capped, block_size, steps * batch_size, steps)
