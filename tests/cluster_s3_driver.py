"""The driver of the cluster tests, run as its own process: a 3-node Ray cluster, then one `datakit run`.

Why a subprocess: the test session already holds a single-node Ray (tests/conftest.py `ray_cluster`),
and one Python process can be connected to one Ray cluster only. A separate driver process owns its
cluster from start to shutdown, can be SIGKILLed mid-run like a lost laptop (its process group takes
the raylets with it), and leaves the session's Ray untouched.

The cluster is `ray.cluster_utils.Cluster`: a head and two worker nodes, each a real raylet with its
own CPU and a custom resource naming it (`node_head`, `node_a`, `node_b`). Each node has 1 CPU, so the
3 attempts the backend keeps in flight can only run by spreading over all three nodes.

    python tests/cluster_s3_driver.py CONFIG.json

CONFIG: {"manifest": {...}, "prefix": "s3://...", "result": "out.json", "ray_temp": "/tmp/rc-xx",
         "kill_node_after": "<glob of store objects>" | null}
With ``kill_node_after`` a thread waits until an object matching the glob exists (e.g. the first map
output of a shuffle) and worker node A runs an attempt, checked while the node is frozen (SIGSTOP), then
SIGKILLs the node's raylet and workers by pid: mid-shuffle node loss that took a running attempt with it.
The result file gets the run summary, attempts per node name, retry events and what was killed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time

NODE_ARGS = {"num_cpus": 1, "object_store_memory": 80 * 2**20}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(temp_dir: str):
    """Head + 2 worker nodes, each with its own raylet, CPU and named resource."""
    from ray.cluster_utils import Cluster

    for attempt in range(3):  # a loaded 2-core CI machine was seen to miss Ray's GCS start-up timeout once
        try:
            # its own GCS port: the test session's local Ray (tests/conftest.py) may hold the default one
            cluster = Cluster(initialize_head=True, head_node_args={
                **NODE_ARGS, "resources": {"node_head": 1}, "include_dashboard": False, "temp_dir": temp_dir,
                "gcs_server_port": _free_port()})
            break
        except RuntimeError as e:
            if attempt == 2 or "Timed out" not in str(e):
                raise
            print(f"ray head did not start ({e}); retrying", flush=True)
    workers = [cluster.add_node(**NODE_ARGS, resources={name: 1}) for name in ("node_a", "node_b")]
    cluster.wait_for_nodes()
    return cluster, workers


def node_names() -> dict[str, str]:
    """Ray node id -> our name for it (from each node's custom resource)."""
    import ray

    names = {}
    for n in ray.nodes():
        tag = next((r for r in n["Resources"] if r.startswith("node_") and r != "node_id" and ":" not in r), None)
        names[n["NodeID"]] = tag or n["NodeID"][:8]
    return names


def raylet_pid(node) -> int:
    from ray._private import ray_constants

    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def _node_processes(raylet: int) -> list:
    """The node's raylet and every process under it (its workers): a lost machine takes all of them."""
    import psutil

    try:
        root = psutil.Process(raylet)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _runs_attempt(proc) -> bool:
    """Whether a worker process is inside our Ray task now (Ray titles it ``ray::_run_attempt`` for the
    whole execution, results stored included, and ``ray::IDLE`` after; the reply to the driver is sent
    only once the task function has returned, so a worker stopped under this title has not reported)."""
    import psutil

    try:
        return any("_run_attempt" in part for part in proc.cmdline())
    except psutil.Error:
        return False


def _signal_all(procs: list, sig: int) -> None:
    import psutil

    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def kill_when(pattern: str, pid: int, killed: dict) -> None:
    """Once `pattern` matches an object in the store (a shuffle has started writing) and the node runs an
    attempt, SIGKILL the node (its raylet and every worker under it, by pid): node loss mid-shuffle.

    Why the node is frozen first: an attempt seen running may finish and report between the look and
    the kill (a lost race failed CI). A SIGSTOPped worker can neither finish nor report, so the node is
    stopped whole (raylet first, so it starts no new worker), the titles are read while it cannot move,
    and only a node that holds a running attempt at that moment is killed; otherwise it is let go."""
    import fsspec
    import psutil

    fs = fsspec.filesystem("s3", use_listings_cache=False, skip_instance_cache=True)
    deadline = time.monotonic() + 600
    found: str | None = None
    while time.monotonic() < deadline:
        if found is None:  # the store is asked until the pattern matches; a match stays (a run deletes its
            try:           # shuffle files only when it succeeds), so from then on only the node is watched
                hits = fs.glob(pattern)
            except OSError:
                hits = []
            if not hits:
                time.sleep(0.05)
                continue
            found = hits[0]
        # polled without a store call between looks (each took ~0.1 s): an attempt of a few tens of ms
        # on node A is seen, where a glob per look could miss every one of them (it failed CI once)
        if any(_runs_attempt(p) for p in _node_processes(pid)[1:]):
            node = _node_processes(pid)
            _signal_all(node[:1], signal.SIGSTOP)
            node = _node_processes(pid)  # complete now: a stopped raylet forks no more workers
            _signal_all(node[1:], signal.SIGSTOP)
            running = [p.pid for p in node[1:] if _runs_attempt(p)]
            if running:
                _signal_all(node, signal.SIGKILL)
                gone, alive = psutil.wait_procs(node, timeout=30)
                killed.update({"pid": pid, "workers": [p.pid for p in node[1:]], "running": running,
                               "after": found, "raylet_gone": not psutil.pid_exists(pid) and not alive})
                return
            _signal_all(node, signal.SIGCONT)
        time.sleep(0.01)


def main(config_path: str) -> None:
    import ray

    import datakit
    from datakit import pipeline
    from datakit.shuffle import ray_backend

    cfg = json.load(open(config_path))
    cluster, workers = start_cluster(cfg["ray_temp"])
    ray.init(address=cluster.address, log_to_driver=False)
    killed: dict = {}
    if cfg.get("kill_node_after"):
        threading.Thread(target=kill_when, args=(cfg["kill_node_after"], raylet_pid(workers[0]), killed),
                         daemon=True).start()
    events: list[dict] = []
    names = node_names()
    manifest = datakit.manifest_from_dict(cfg["manifest"])
    summary = pipeline.run(manifest, prefix=cfg["prefix"], backend="ray", on_event=events.append,
                           backend_options={"address": cluster.address})
    alive = sum(1 for n in ray.nodes() if n["Alive"])
    result = {
        "summary": summary.to_dict(),
        "tasks_per_node": {names.get(k, k): v for k, v in ray_backend.TASKS_PER_NODE.items()},
        "retries": [e for e in events if e.get("event") == "step_worker_retried"],
        "killed": killed,
        "alive_nodes": alive,
    }
    with open(cfg["result"], "w") as f:
        json.dump(result, f, default=str)
    ray.shutdown()
    cluster.shutdown()
    sys.exit(0 if summary.ok else 1)


if __name__ == "__main__":
    main(sys.argv[1])
