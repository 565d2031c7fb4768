"""The dedup stages' configuration: the manifest's `dedup:` section, read by the exact and fuzzy stages.

One dataclass for the whole concept (exact on/off, fuzzy on/off, the MinHash shingling and LSH
banding, the true-Jaccard verification), and the algorithms take it as it is: `minhash_source` and
`fuzzy_dups` read its fields, and the one value not written in it, bands x rows when ``threshold``
is given, is `DedupConfig.lsh()`. Nothing copies its fields into a second config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .lsh_params import lsh_params


@dataclass(frozen=True)
class DedupConfig:
    """Exact and MinHash fuzzy dedup across sources. With ``threshold`` set, bands x rows are derived
    from it (then bands/rows must not be given); otherwise bands x rows must fit in num_perms.

    ``verify_threshold`` (unset by default) follows the LSH parameters, so candidates and verification
    aim at the same similarity: ``threshold`` when given, else the similarity at which bands x rows
    make a pair a candidate half the time (0.685 for 14 x 8). Set it to verify at another level."""

    exact: bool = True
    fuzzy: bool = True
    ngram: int = field(default=5, metadata={"min": 1})
    ngram_unit: Literal["word", "char"] = "word"
    num_perms: int = field(default=112, metadata={"min": 1})
    bands: int = field(default=14, metadata={"min": 1})
    rows: int = field(default=8, metadata={"min": 1})
    threshold: float | None = field(default=None, metadata={"gt": 0, "lt": 1})
    seed: int = 42
    max_text_chars: int = field(default=500_000, metadata={"min": 1})
    verify: bool = True
    verify_threshold: float | None = field(default=None, metadata={"min": 0, "max": 1})

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        if self.threshold is not None:
            both = sorted({"bands", "rows"} & given)
            if both:
                return [(both[0], "give either threshold or bands/rows, not both")]
            return []
        if self.bands * self.rows > self.num_perms:
            name = "bands" if "bands" in given else ("rows" if "rows" in given else "num_perms")
            return [
                (name, f"bands x rows = {self.bands} x {self.rows} = {self.bands * self.rows} "
                       f"exceeds num_perms = {self.num_perms}")
            ]
        return []

    def lsh(self) -> tuple[int, int]:
        """(bands, rows) the minhash step computes: derived from ``threshold`` when given (the way
        datasketch picks them), else as written; only bands x rows permutations are ever computed."""
        if self.threshold is not None:
            return lsh_params(self.threshold, self.num_perms)
        for name in ("num_perms", "bands", "rows"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.bands * self.rows > self.num_perms:
            raise ValueError(f"bands x rows = {self.bands} x {self.rows} = {self.bands * self.rows} exceeds "
                             f"num_perms {self.num_perms}")
        return self.bands, self.rows
