"""`datakit run` on an s3:// prefix whose store dies or stops answering mid-run, through the CLI.

The store is moto's S3 server in its own process (tests/helpers_s3.py), so it can be killed (connections
refused: a dead store) or paused with SIGSTOP (connections accepted, never answered: a hung store). The
run is held at a gate after consolidate (tests/helpers_gate.py), so the fault lands at a known point:
every earlier step built, one step running, more to come.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers_gate import datakit, gate_env, gated_corpus, open_gate, wait_for_gate
from helpers_s3 import free_port

HERE = Path(__file__).parent
BUCKET = "datakit-faults"


@pytest.fixture
def store():
    """moto's S3 in a subprocess on a free loopback port, with BUCKET created; killed at the end."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "helpers_s3.py"), str(port), BUCKET],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=30)


def _env(tmp: Path, endpoint: str, retry_s: int) -> dict[str, str]:
    return {**gate_env(tmp), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
            "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required", "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
            "DATAKIT_STORE_RETRY_S": str(retry_s), "DATAKIT_STORE_TIMEOUT_S": "2"}


@pytest.mark.timeout(300)
def test_a_store_that_dies_mid_run_fails_it_in_one_line_with_the_summary(store, tmp_path):
    server, endpoint = store
    manifest = gated_corpus(tmp_path, f"s3://{BUCKET}/out")
    run = datakit("run", str(manifest), "--workers", "2", cwd=tmp_path, env=_env(tmp_path, endpoint, retry_s=4))
    try:
        wait_for_gate(tmp_path, run)  # normalize ... consolidate are built in the store; the gate step runs
        server.kill()
        server.wait(timeout=30)
        open_gate(tmp_path)  # the gate step now writes its output to a store that is gone
        _, err = run.communicate(timeout=200)  # a hang fails here, well inside the test's timeout
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, err
    assert "Traceback" not in err, err
    failed = [line for line in err.splitlines() if "] failed: " in line]
    assert len(failed) == 1, err
    assert "object store unavailable" in failed[0] and f"s3://{BUCKET}" in failed[0] and endpoint in failed[0]
    assert "datakit run: failed" in err  # the summary is printed
    # the steps after it: one line for the cascade, and each in the summary table as cascaded
    assert sum("steps not run" in line for line in err.splitlines()) == 1, err
    assert "2 steps not run: dependency failed: gate-code" in err, err
    for later in ("tokenizer", "tokenize-code"):
        assert re.search(rf"^{re.escape(later)} +cascaded ", err, re.M), err
    assert "succeeded  " in err and "consolidate-code" in err  # what was built before is in the summary


def _lines_until(proc: subprocess.Popen, needle: str, timeout_s: float) -> list[str]:
    """``proc``'s stderr lines up to and including the first holding ``needle`` (read on a thread, so the
    wait is bounded); fails naming what was read when none came in ``timeout_s``. The rest of stderr stays
    in ``proc.stderr`` (the same buffered file) for ``communicate``."""
    import queue
    import threading

    lines: "queue.Queue[str | None]" = queue.Queue()

    def pump() -> None:
        for line in iter(proc.stderr.readline, ""):
            lines.put(line)
            if needle in line:
                break
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no line with {needle!r} in {timeout_s:g} s; stderr so far:\n{''.join(seen)}")
        if line is None:
            pytest.fail(f"stderr ended without {needle!r}:\n{''.join(seen)}")
        seen.append(line)
        if needle in line:
            return seen


@pytest.mark.timeout(300)
def test_a_store_paused_mid_run_is_waited_for_and_said_so(store, tmp_path):
    server, endpoint = store
    manifest = gated_corpus(tmp_path, f"s3://{BUCKET}/out")
    run = datakit("run", str(manifest), "--workers", "2", cwd=tmp_path, env=_env(tmp_path, endpoint, retry_s=60))
    try:
        wait_for_gate(tmp_path, run)
        os.kill(server.pid, signal.SIGSTOP)  # connections are accepted and never answered
        try:
            open_gate(tmp_path)
            # the store stays paused until the run says it is waiting for it (after one 2 s call timeout),
            # however long the run takes to get there: no sleep that a slow or fast machine could outrun
            err_lines = _lines_until(run, "not answering for ", timeout_s=120)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        out, rest = run.communicate(timeout=200)
        err = "".join(err_lines) + rest
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert f"store s3://{BUCKET} (endpoint {endpoint}) not answering for " in err, err
    assert "(retrying until " in err
    assert "Traceback" not in err, err
    assert "datakit run: succeeded" in err


def test_only_the_store_module_reaches_fsspec_and_never_opens_a_remote_file():
    """Every store call has a deadline and a retry budget only if it goes through datakit.core.fsio
    (listing.py lists sources with fsio's bounded calls); and no remote file object is ever opened, so
    none can be flushed by a destructor waiting on fsspec's event loop (writes upload closed local files)."""
    import ast

    import datakit

    root = Path(datakit.__file__).parent
    importers: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for n in names:
                if n.split(".")[0] == "fsspec":
                    importers.setdefault(path.relative_to(root).as_posix(), set()).add(n)
    # fsio is the one way to a store; elsewhere only fsspec's pure helpers (the local walk's glob
    # translation), which make no call to any filesystem
    assert {rel for rel, mods in importers.items() if mods != {"fsspec.utils"}} == {"core/fsio.py"}, importers
    for rel in importers:
        calls = [n for n in ast.walk(ast.parse((root / rel).read_text())) if isinstance(n, ast.Call)]
        opened = [ast.unparse(c) for c in calls if isinstance(c.func, ast.Attribute) and c.func.attr == "open"
                  and ast.unparse(c.func.value) not in ("os",)]
        assert opened == [], f"{rel} opens a file object through fsspec: {opened}"
