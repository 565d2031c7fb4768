"""Ferry checks of the stages whose checks are not record-level data checks: download (every fetched file
present, its size and pinned digest as recorded) and user stages (documents in = kept + removed, listed
files present)."""

from __future__ import annotations

import os

from .checking import CheckFailed, RunContext, eq, sha256_file
from datakit.stages.plan import PlanStep


def check_download(ctx: RunContext, ref: PlanStep, src: str) -> None:
    name, files = ref.name, ctx.res(ref.name).get("files") or []

    def fetched() -> str:
        if not files:
            raise CheckFailed("the result lists no files")
        for f in files:
            path = ctx.path(name, f["path"])
            if not os.path.exists(path):
                raise CheckFailed(f"{ctx.rel(path)} missing")
            eq(os.path.getsize(path), f["size"], f"{f['name']} size vs the recorded size")
            if f.get("sha256"):
                eq(sha256_file(path), f["sha256"], f"{f['name']} sha256 vs the recorded digest")
        return f"{len(files)} files, sizes and digests as recorded"

    ctx.check(name, "files", fetched, breaks=True)


def check_user_stage(ctx: RunContext, ref: PlanStep, src: str) -> None:
    name, res, c = ref.name, ctx.res(ref.name), ctx.cnt(ref.name)
    main = [ctx.path(name, r) for r in res.get("main_files") or []]
    removed = [ctx.path(name, r) for r in res.get("removed_files") or []]

    def files() -> str:
        if not main:
            raise CheckFailed("the result lists no main_files")
        missing = [p for p in main + removed if not os.path.exists(p)]
        if missing:
            raise CheckFailed(f"{len(missing)} declared file(s) missing, first {ctx.rel(missing[0])}")
        return f"{len(main)} main + {len(removed)} removed files"

    def counts() -> str:
        kept, gone = ctx.rows(main), ctx.rows(removed)
        eq(kept, c.get("docs_out"), "main parquet rows vs counters.docs_out")
        eq(gone, c.get("removed"), "removed parquet rows vs counters.removed")
        eq(c.get("docs_in"), kept + gone, "counters.docs_in vs kept + removed")
        ctx.src_info(src, **{f"removed_{res.get('stage', name)}": gone})
        return f"{c.get('docs_in')} in = {kept} kept + {gone} removed"

    if ctx.check(name, "files", files, breaks=True):
        ctx.check(name, "counts", counts)
