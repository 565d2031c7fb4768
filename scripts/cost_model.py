"""A scaling plan for a datakit run on a Ray cluster with an object store: nodes, core-hours, object-store
requests and bytes, and where the coordinator's limits are.

    python scripts/cost_model.py                       # 1 TB and 100 TB with the measured defaults
    python scripts/cost_model.py --tb 5 --cores-per-node 64 --hours 6
    python scripts/cost_model.py --benchmark pipeline.json   # per-core cost from a `python -m benchmarks.pipeline` run
    python scripts/cost_model.py --json                # the same figures as one JSON object

Why a script: the plan is arithmetic on per-core figures that `benchmarks/` measures, so it is computed,
never hand-edited, and reruns when a benchmark moves. The figures (defaults below, each with its source):

- CPU-seconds per MB of text for normalize -> exact -> MinHash -> fuzzy -> consolidate -> tokenize:
  0.46 (python -m benchmarks.pipeline on 100 MB, 2 workers: 44-48 CPU-s; `datakit.projection.cpu_s_per_mb` in its
  JSON, read with --benchmark).
- The quality layer (Gopher, C4, FineWeb rules): 131 documents per CPU-second (python -m benchmarks.filters).
- Shuffle bytes per input byte, summed over the run's shuffles (exact-dedup hashes, MinHash band keys,
  connected components): 0.15, an estimate from the record layouts (~600 B of keys and ids per 4 KB
  document), not a measurement.

How the engine touches the store (datakit/shuffle, datakit/core/fsio.py): a map task writes one data
file and one sidecar (two PUTs; multipart above 50 MB); every reducer GETs every map task's sidecar of its
shuffle (one GET each) and then only its own byte ranges (one ranged GET per run per 8 MB); listings are
one LIST per 1,000 objects with sizes. So per shuffle: M map tasks, R reducers, M*R sidecar GETs, and each
sidecar holds R targets' ranges, so the index bytes read grow as M*R*R: that, not the data, is the first
limit at 100 TB, and the plan says which shard size keeps it small.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass

MB, GB, TB = 10**6, 10**9, 10**12


@dataclass(frozen=True)
class Figures:
    """Per-core and per-byte figures (measured by benchmarks/, see the module docstring)."""

    cpu_s_per_mb: float = 0.46
    quality_docs_per_cpu_s: float = 131.0
    doc_bytes: int = 4096
    shuffle_ratio: float = 0.15
    shuffles: int = 4
    output_ratio: float = 1.9  # bytes written per input byte: 4 document passes x ~0.35 (parquet zstd) + tokens 0.5


@dataclass(frozen=True)
class Cluster:
    """The cluster and engine settings the plan is for."""

    cores_per_node: int = 32
    hours: float = 12.0
    shard_bytes: int = 64 * 2**20  # input per map task: normalize.target_shard_bytes (64 MiB of text)
    reducer_bytes: int = 1 * GB  # shuffle input per reducer
    map_flush_bytes: int = 128 * 2**20  # ExecConfig.map_flush_bytes: one run per flush
    sidecar_entry_bytes: int = 40  # one [offset, length, rows, raw] entry in a sidecar's JSON
    read_chunk_bytes: int = 8 * 2**20  # fsio.READ_CHUNK_BYTES: one ranged GET per chunk
    multipart_bytes: int = 50 * 2**20  # s3fs part size
    get_rate: float = 5500.0  # S3 GETs/s per prefix (AWS's documented per-prefix rate)
    put_rate: float = 3500.0
    usd_per_1k_get: float = 0.0004  # S3 Standard list prices, us-east-1
    usd_per_1k_put: float = 0.005
    max_tasks_per_stage: int = 100_000  # above this, driver-side task state and Ray scheduling dominate


def shuffle_plan(input_bytes: float, fig: Figures, cl: Cluster) -> dict:
    """One shuffle of the run: tasks, sidecars, requests and bytes (all shuffles are sized alike)."""
    m = max(1, math.ceil(input_bytes / cl.shard_bytes))
    shuffled = input_bytes * fig.shuffle_ratio / fig.shuffles
    r = max(1, math.ceil(shuffled / cl.reducer_bytes))
    map_out = shuffled / m
    runs_per_map = max(1, math.ceil(map_out / cl.map_flush_bytes))
    sidecar_bytes = r * runs_per_map * cl.sidecar_entry_bytes
    range_len = map_out / (r * runs_per_map)
    range_gets = m * r * runs_per_map * max(1, math.ceil(range_len / cl.read_chunk_bytes))
    puts = m * (1 + max(1, math.ceil(map_out / cl.multipart_bytes)))
    return {"map_tasks": m, "reducers": r, "sidecars": m, "runs_per_map": runs_per_map,
            "sidecar_gets": m * r, "range_gets": range_gets, "puts": puts,
            "shuffle_bytes": shuffled, "sidecar_bytes_read": m * r * sidecar_bytes,
            "driver_payload_bytes": r * m * 100}  # each reducer's task carries M sidecar paths (~100 B)


def suggested_sizes(input_bytes: float, fig: Figures, cl: Cluster) -> tuple[float, float]:
    """Map shard and reducer sizes that keep the sidecar bytes every reducer reads under 10% of the
    shuffle's data (M*R^2*runs*entry <= 0.1*B) with about a tenth of the task limit as map
    tasks: larger reducers (the external merge keeps their memory flat) and larger map shards."""
    b = input_bytes * fig.shuffle_ratio / fig.shuffles
    m = max(1, min(math.ceil(input_bytes / cl.shard_bytes), cl.max_tasks_per_stage // 10))
    runs = max(1, math.ceil(b / m / cl.map_flush_bytes))
    r_max = max(1.0, math.sqrt(0.09 * b / (m * runs * cl.sidecar_entry_bytes)))
    return max(cl.shard_bytes, input_bytes / m), max(cl.reducer_bytes, b / r_max)


def plan(input_bytes: float, fig: Figures, cl: Cluster) -> dict:
    """The whole run at ``input_bytes`` of text: compute, nodes, store traffic and coordinator limits."""
    docs = input_bytes / fig.doc_bytes
    core_h_pipeline = input_bytes / MB * fig.cpu_s_per_mb / 3600
    core_h_quality = docs / fig.quality_docs_per_cpu_s / 3600
    core_hours = core_h_pipeline + core_h_quality
    nodes = max(1, math.ceil(core_hours / (cl.hours * cl.cores_per_node)))
    sh = shuffle_plan(input_bytes, fig, cl)
    input_gets = math.ceil(input_bytes / cl.read_chunk_bytes)
    output_bytes = input_bytes * fig.output_ratio
    output_puts = math.ceil(output_bytes / cl.multipart_bytes)
    gets = input_gets + fig.shuffles * (sh["sidecar_gets"] + sh["range_gets"]) + math.ceil(output_bytes / cl.read_chunk_bytes)
    puts = output_puts + fig.shuffles * sh["puts"]
    read_bytes = input_bytes + fig.shuffles * (sh["shuffle_bytes"] + sh["sidecar_bytes_read"]) + output_bytes
    limits = []
    if max(sh["map_tasks"], sh["reducers"]) > cl.max_tasks_per_stage:
        limits.append(f"{max(sh['map_tasks'], sh['reducers']):,} tasks per stage is over ~{cl.max_tasks_per_stage:,}: "
                      "raise the shard size")
    if sh["sidecar_bytes_read"] > 0.1 * sh["shuffle_bytes"]:
        shard, reducer = suggested_sizes(input_bytes, fig, cl)
        limits.append(f"sidecar reads ({_h(sh['sidecar_bytes_read'])}) exceed 10% of the shuffle's data "
                      f"({_h(sh['shuffle_bytes'])}): use --shard-bytes {shard:.0f} --reducer-bytes {reducer:.0f} "
                      f"({_h(shard)} map shards, {_h(reducer)} per reducer)")
    return {
        "input_bytes": input_bytes, "documents": round(docs), "core_hours": round(core_hours),
        "core_hours_pipeline": round(core_h_pipeline), "core_hours_quality": round(core_h_quality),
        "nodes": nodes, "cores": nodes * cl.cores_per_node, "wall_hours": round(core_hours / (nodes * cl.cores_per_node), 1),
        "per_shuffle": sh, "store_gets": gets, "store_puts": puts, "store_bytes_read": read_bytes,
        "store_bytes_written": output_bytes + fig.shuffles * sh["shuffle_bytes"],
        "store_usd_requests": round(gets / 1000 * cl.usd_per_1k_get + puts / 1000 * cl.usd_per_1k_put, 2),
        "shuffle_get_hours_at_prefix_rate": round(fig.shuffles * (sh["sidecar_gets"] + sh["range_gets"]) / cl.get_rate / 3600, 2),
        "limits": limits or ["none reached"],
    }


def _h(n: float) -> str:
    for unit, size in (("TB", TB), ("GB", GB), ("MB", MB), ("kB", 1000)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def table(plans: dict[str, dict]) -> str:
    """The plans side by side as a markdown table (what runbooks/ray-cluster.md shows)."""
    names = list(plans)
    rows = [
        ("documents", lambda p: f"{p['documents']:,}"),
        ("core-hours (pipeline + quality)", lambda p: f"{p['core_hours']:,} ({p['core_hours_pipeline']:,} + {p['core_hours_quality']:,})"),
        ("nodes x cores, wall", lambda p: f"{p['nodes']:,} x {p['cores'] // p['nodes']}, {p['wall_hours']} h"),
        ("map tasks / reducers per shuffle", lambda p: f"{p['per_shuffle']['map_tasks']:,} / {p['per_shuffle']['reducers']:,}"),
        ("sidecars per shuffle / sidecar GETs", lambda p: f"{p['per_shuffle']['sidecars']:,} / {p['per_shuffle']['sidecar_gets']:,}"),
        ("sidecar bytes read per shuffle", lambda p: _h(p["per_shuffle"]["sidecar_bytes_read"])),
        ("driver task payload per shuffle", lambda p: _h(p["per_shuffle"]["driver_payload_bytes"])),
        ("store GETs / PUTs (whole run)", lambda p: f"{p['store_gets']:,} / {p['store_puts']:,}"),
        ("store bytes read / written", lambda p: f"{_h(p['store_bytes_read'])} / {_h(p['store_bytes_written'])}"),
        ("request cost (S3 list prices)", lambda p: f"${p['store_usd_requests']:,}"),
        ("shuffle GETs at one prefix's rate", lambda p: f"{p['shuffle_get_hours_at_prefix_rate']} h"),
        ("coordinator limits", lambda p: "; ".join(p["limits"])),
    ]
    out = ["| quantity | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    out += [f"| {label} | " + " | ".join(fn(plans[n]) for n in names) + " |" for label, fn in rows]
    return "\n".join(out)


def figures_from_benchmark(path: str, base: Figures) -> Figures:
    """Per-core cost from the JSON `python -m benchmarks.pipeline` prints (its `datakit.projection`)."""
    with open(path) as f:
        report = json.load(f)
    per_mb = report["datakit"]["projection"]["cpu_s_per_mb"]
    corpus = report.get("corpus", {})
    doc_bytes = round(corpus["mb_text"] * MB / corpus["docs"]) if corpus.get("docs") else base.doc_bytes
    return Figures(**{**asdict(base), "cpu_s_per_mb": per_mb, "doc_bytes": doc_bytes})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tb", type=float, nargs="+", default=[1, 100], help="input sizes in TB of text (default 1 100)")
    ap.add_argument("--benchmark", help="a `python -m benchmarks.pipeline` JSON report to take CPU-s per MB from")
    for name, default in asdict(Figures()).items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=None, help=f"default {default}")
    for name, default in asdict(Cluster()).items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=None, help=f"default {default}")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = vars(ap.parse_args())
    fig = figures_from_benchmark(args["benchmark"], Figures()) if args["benchmark"] else Figures()
    fig = Figures(**{k: args[k] if args[k] is not None else v for k, v in asdict(fig).items()})
    cl = Cluster(**{k: args[k] if args[k] is not None else v for k, v in asdict(Cluster()).items()})
    plans = {f"{tb:g} TB": plan(tb * TB, fig, cl) for tb in args["tb"]}
    if args["json"]:
        print(json.dumps({"figures": asdict(fig), "cluster": asdict(cl), "plans": plans}, indent=1))
    else:
        print(table(plans))


if __name__ == "__main__":
    main()
