"""The validator's plumbing: check results, the run context every stage check reads through.

A stage check is a function ``(ctx: RunContext, ref: PlanStep, source) -> None`` (checks_data.py,
checks_tokens.py) that calls ``ctx.check(stage, name, fn)`` once per property; ``fn`` returns a short
"what was verified" message or raises CheckFailed with what the operator should read. RunContext owns
the DuckDB connection, the artifact records of built steps, which steps are no longer trustworthy
(``broken``), and the summary that goes into the history record.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

import duckdb

from .envelopes import Envelopes
from .plan import RunPlan
from datakit.core.fsio import sha256_file  # noqa: F401  (the checks import it from here)
from datakit.core.layout import AttributesDir, parquet_names
from datakit.core.results import DocumentsResult
from datakit.steps import StepRecord

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
# The whitespace class of DuckDB's RE2 `\s`, used on both sides of the planted-text search.
_WS_SQL = "[\\t\\n\\f\\r ]+"
_WS = re.compile(r"[\t\n\f\r ]+")


class CheckFailed(Exception):
    """Raised inside a check with the message the operator should read."""


@dataclass
class Check:
    stage: str      # the step name (normalize-licenses, fuzzy-dups, ...)
    check: str      # built | files | rows | sorted | no_duplicates | no_contamination | counts | ...
    status: str     # ok | failed | skipped
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status != FAILED

    def __str__(self) -> str:
        return f"{self.stage}: {self.check}: {self.message}"


# ----------------------------------------------------------------------------------------------
def eq(a: Any, b: Any, what: str) -> None:
    if a != b:
        raise CheckFailed(f"{what}: {a} != {b}")


def frac(n: float, d: float) -> float:
    return n / d if d else 0.0


def fmt_range(r: tuple[float, float]) -> str:
    return f"[{r[0]:g}, {r[1]:g}]"


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def collapse(text: str) -> str:
    """Lowercase, whitespace runs -> one space: how the planted-text search compares text."""
    return _WS.sub(" ", text).strip().lower()


class RunContext:
    """One validation pass over one run directory (see module docstring)."""

    def __init__(self, run_dir: str, plan: RunPlan, env: Envelopes):
        self.run_dir, self.plan, self.env = run_dir, plan, env
        self.checks: list[Check] = []
        self.broken: set[str] = set()
        self.artifacts: dict[str, dict] = {}
        self.con = duckdb.connect()
        self._needles: list[tuple[str, str]] | None = None
        self.summary: dict = {"stages": {}, "sources": {s: {} for s in plan.sources}, "planted": {},
                              "loss": {}}

    # ------------------------------------------------------------------ plumbing
    def check(self, stage: str, name: str, fn: Callable[[], str | None], needs: tuple[str, ...] = (),
              breaks: bool = False) -> bool:
        blocked = [n for n in (stage, *needs) if n in self.broken]
        if blocked:
            self.checks.append(Check(stage, name, SKIPPED, f"not checked: {blocked[0]} failed an earlier check"))
            return False
        try:
            msg = fn() or "ok"
        except CheckFailed as e:
            self.checks.append(Check(stage, name, FAILED, str(e)))
        except Exception as e:  # noqa: BLE001 - an unreadable output is a failed check, not a crash
            self.checks.append(Check(stage, name, FAILED, f"{type(e).__name__}: {e}"))
        else:
            self.checks.append(Check(stage, name, OK, msg))
            return True
        if breaks:
            self.broken.add(stage)
        return False

    def q(self, sql: str, params: list | tuple = ()) -> list[tuple]:
        return self.con.execute(sql, list(params)).fetchall()

    def rows(self, files: list[str]) -> int:
        return int(self.q("select count(*) from read_parquet(?)", [files])[0][0]) if files else 0

    def path(self, step: str, *rel: str) -> str:
        ref = self.plan.step(step)
        assert ref is not None, step
        return os.path.join(self.run_dir, ref.dirname, *rel)

    def res(self, step: str) -> dict:
        return self.artifacts[step].get("result") or {}

    def record(self, step: str) -> StepRecord:
        """A built step as the typed results read it: ``TokensResult.of(ctx.record(name))``."""
        ref = self.plan.step(step)
        assert ref is not None, step
        return StepRecord(step, ref.identity, self.path(step), self.res(step), self.cnt(step))

    def cnt(self, step: str) -> dict:
        return self.artifacts[step].get("counters") or {}

    def has(self, step: str) -> bool:
        return self.plan.step(step) is not None

    def stage_info(self, step: str, **kv: Any) -> None:
        self.summary["stages"].setdefault(step, {}).update(kv)

    def src_info(self, src: str, **kv: Any) -> None:
        self.summary["sources"].setdefault(src, {}).update(kv)

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.run_dir)

    # ------------------------------------------------------------------ shared by the stage checks
    def docs_step(self, src: str) -> str:
        """The step whose documents the corpus-level stages (the attribute steps: exact, fuzzy,
        decontaminate; then consolidate) read for ``src``: the link of its chain in the plan that they
        depend on (the chain's last step when there are none)."""
        step = self.plan.plan.read_by_attributes(src)
        assert step is not None, f"source {src} has no documents step in the plan"
        return step

    def docs_count(self, src: str) -> int | None:
        """How many documents ``docs_step(src)`` holds, by its own counters."""
        return self.cnt(self.docs_step(src)).get("docs_out")

    def documents(self, step: str) -> list[str]:
        """The main documents files a step wrote: as its result lists them, else its main dir's parts."""
        res = DocumentsResult.of(self.record(step))
        if res.main_files:
            return [self.path(step, r) for r in res.main_files]
        main = self.path(step, res.main_dir)
        return [os.path.join(main, n) for n in parquet_names(main)]

    def norm_files(self, src: str) -> list[str]:
        """The documents the corpus-level stages read for ``src`` (see docs_step)."""
        return self.documents(self.docs_step(src))

    def norm_names(self, src: str) -> list[str]:
        return [os.path.basename(p) for p in self.norm_files(src)]

    def attr_files(self, step: str, src: str, rel: str) -> list[str]:
        """The attribute files of one source, paired by name with its normalized main files."""
        return AttributesDir(self.path(step, rel)).files(self.norm_names(src))

    def check_attr_dir(self, step: str, src: str, rel: str | None) -> str:
        """Attribute dir of one source: co-partitioned with the normalized files (same names)."""
        if not rel:
            raise CheckFailed(f"source {src}: the result names no attribute directory")
        d = self.path(step, rel)
        attrs = AttributesDir(d)
        want = self.norm_names(src)
        have = attrs.parquet_names()
        if have != want:
            missing = sorted(set(want) - set(have))
            extra = sorted(set(have) - set(want))
            raise CheckFailed(f"{self.rel(d)}: {len(have)} parquet files, expected the {len(want)} of "
                              f"{self.docs_step(src)}" + (f"; missing {', '.join(missing[:3])}" if missing else "")
                              + (f"; unexpected {', '.join(extra[:3])}" if extra else ""))
        meta_path = attrs.meta
        if not os.path.exists(meta_path):
            raise CheckFailed(f"{self.rel(meta_path)} missing")
        meta = read_json(meta_path)
        eq(meta.get("files"), want, f"{self.rel(meta_path)} files vs {self.docs_step(src)} main files")
        return d

    def sources_with(self, stage: str) -> list[str]:
        """The sources, in manifest order, that have a step of ``stage`` in the plan."""
        have = {ref.source for ref in self.plan.steps if ref.stage == stage}
        return [s for s in self.plan.sources if s in have]

    def _decontaminate_step(self) -> str | None:
        """The decontaminate stage's step in the plan (the benchmarks' recorded digests and n-gram size)."""
        from datakit.stages.decontaminate import STAGE

        return next((ref.name for ref in self.plan.steps if ref.stage == STAGE.name), None)

    def needles(self) -> list[tuple[str, str]]:
        """(item label, collapsed text) of every benchmark text with at least `ngram` words: the texts
        decontamination is able to catch, so their verbatim presence downstream is a real miss."""
        if self._needles is not None:
            return self._needles
        from datakit.dedup.decontaminate import _iter_records, _segments
        from datakit.dedup.shingles import normalize_text

        out: list[tuple[str, str]] = []
        cfg = self.artifacts.get(self._decontaminate_step() or "", {}).get("config") or {}
        ngram = int(cfg.get("ngram", 13))
        recorded = {b.get("name"): b.get("sha256") for b in cfg.get("benchmarks", [])}
        for b in self.plan.benchmarks:
            digest = sha256_file(b.path)
            if recorded.get(b.name) not in (None, digest):
                raise CheckFailed(f"benchmark {b.name}: {b.path} changed since the run (sha256 {digest[:12]} != "
                                  f"{recorded[b.name][:12]} recorded by decontaminate)")
            for index, (_, rec) in enumerate(_iter_records(b.path)):
                for fld in b.text_fields:
                    for seg in _segments(rec.get(fld)) or []:
                        if len(normalize_text(seg).split()) >= ngram:
                            out.append((f"{b.name}:{index}", collapse(seg)))
        self._needles = out
        return out

    def find_planted(self, files: list[str]) -> list[tuple[str, str, str]]:
        """(item label, doc id, file) for every doc in ``files`` containing a benchmark text verbatim."""
        needles = self.needles()
        if not files or not needles:
            return []
        rows = self.q(
            f"select n.item, t.id, t.filename from read_parquet(?, filename=true) t, "
            f"(select unnest(?::VARCHAR[]) as needle, unnest(?::VARCHAR[]) as item) n "
            f"where contains(lower(regexp_replace(t.text, '{_WS_SQL}', ' ', 'g')), n.needle) order by 1, 2",
            [files, [n for _, n in needles], [i for i, _ in needles]])
        return [(i, d, f) for i, d, f in rows]
