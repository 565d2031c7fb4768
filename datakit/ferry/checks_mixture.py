"""Ferry checks of the mixture stage's steps: each proxy run (and each verification run) measured a
finite target loss; the mixture file parses, its weights sum to 1, name the same components as the
proportional baseline it records, and it states its decision with a reason."""

from __future__ import annotations

import math

from .checking import CheckFailed, RunContext
from datakit.stages.plan import PlanStep


def check_mixture(ctx: RunContext, ref: PlanStep, _src: None) -> None:
    name, res = ref.name, ctx.res(ref.name)

    def target() -> str:
        bpb = res.get("target_bpb")
        if not isinstance(bpb, (int, float)) or not math.isfinite(bpb) or bpb <= 0:
            raise CheckFailed(f"target bits per byte {bpb!r}: expected a finite positive number")
        return f"target {bpb:.4f} bits per byte on {res.get('weights')}"

    def mixture_file() -> str:
        from datakit.mix.file import read_mixture_file

        data = read_mixture_file(ctx.path(name, res["file"]))
        total = sum(data["weights"].values())
        if abs(total - 1.0) > 1e-4:
            raise CheckFailed(f"{res['file']}: chosen weights sum to {total}, expected 1")
        if set(data["weights"]) != set(data["baseline"]["weights"]):
            raise CheckFailed(f"{res['file']}: chosen components {sorted(data['weights'])} differ from the "
                              f"baseline's {sorted(data['baseline']['weights'])}")
        decision = data.get("decision") or {}
        if decision.get("returned") not in ("candidate", "proportional") or not decision.get("reason"):
            raise CheckFailed(f"{res['file']}: no decision with a reason (got {decision!r})")
        return f"{len(data['proxies'])} proxies; returned {decision['returned']} {data['weights']}"

    if name.startswith(("mix-proxy-", "mix-verify-")):
        ctx.check(name, "target loss", target)
    elif name == "mix-search":
        ctx.check(name, "mixture file", mixture_file)
