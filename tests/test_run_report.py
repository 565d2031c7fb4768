"""What happened to the data: the run summary's figures against DuckDB's own counts, the warning for an
emptied source, `datakit report` rendered in headless Chromium, and `datakit gc` on a prefix holding two
builds of every step."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import duckdb
import numpy as np
import pytest

from datakit.steps import Lease
from system_packages import needs, program

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _corpus(tmp_path: Path, *, train: bool = True, whitespace: int = 128) -> Path:
    """The README's custom-corpus flow: jsonl with a planted copy and a malformed line, stdlib code as
    text, the same code again as jsonl (emptied by cross-source exact dedup), a benchmark to remove."""
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    for name in ("heapq.py", "bisect.py", "textwrap.py", "shlex.py", "fnmatch.py", "colorsys.py"):
        (code / name).write_text((STDLIB / name).read_text())
    web = tmp_path / "web"
    web.mkdir(exist_ok=True)
    rows = [{"text": (STDLIB / n).read_text(), "id": n} for n in ("string.py", "glob.py", "copy.py", "keyword.py")]
    lines = [json.dumps(r) for r in rows] + [json.dumps(rows[0]), '{"text": "broken']
    (web / "part-0.jsonl").write_text("\n".join(lines) + "\n")
    mirror = tmp_path / "mirror"
    mirror.mkdir(exist_ok=True)
    (mirror / "code.jsonl").write_text("".join(json.dumps({"text": (code / n).read_text()}) + "\n"
                                               for n in sorted(p.name for p in code.iterdir())))
    (tmp_path / "bench.jsonl").write_text(json.dumps({"question": "Heaps are arrays for which a[k] <= a[2*k+1] and "
                                                      "a[k] <= a[2*k+2] for all k, counting elements from 0."}) + "\n")
    train_section = "train: {preset: nano, seq_len: 32, batch_size: 4, steps: 3, warmup: 1}\n" if train else ""
    manifest = tmp_path / "sources.yaml"
    manifest.write_text(f"""\
prefix: out
sources:
  - {{name: code, uri: code/*.py, format: text, weight: 2}}
  - {{name: web, uri: web/*.jsonl, format: jsonl, id_field: id}}
  - {{name: code-again, uri: mirror/*.jsonl, format: jsonl}}
normalize: {{max_whitespace_run: {whitespace}, reject_fraction: 0.5}}
decontaminate:
  benchmarks: [{{name: heap-bench, path: bench.jsonl, text_fields: [question]}}]
tokenize: {{vocab_size: 512, validation_fraction: 0.2}}
""" + train_section)
    return manifest


def _datakit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "datakit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


def _rows(con, files: list[Path]) -> int:
    files = [str(f) for f in files]
    return int(con.execute("select count(*) from read_parquet(?)", [files]).fetchone()[0]) if files else 0


def _step_dir(out: Path, name: str) -> Path:
    (d,) = [p for p in out.iterdir() if re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{10}}", p.name)]
    return d


def _tokens(cache: Path) -> int:
    return sum(len(np.load(f, mmap_mode="r")) for f in cache.glob("*/*.tokens.npy"))


@pytest.mark.slow
def test_the_summary_tells_what_happened_to_every_source(tmp_path):
    manifest = _corpus(tmp_path)
    r = _datakit("run", str(manifest), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    human = r.stderr
    # A rerun skips every step; its --json summary still carries every figure, from the steps' records.
    again = _datakit("run", str(manifest), "--json", cwd=tmp_path)
    data = json.loads(again.stdout.strip().splitlines()[-1])["data"]
    out, con = tmp_path / "out", duckdb.connect()
    for src in ("code", "web", "code-again"):
        norm, cons = _step_dir(out, f"normalize-{src}"), _step_dir(out, f"consolidate-{src}")
        f = data["sources"][src]
        rejects = _rows(con, list((norm / "outputs" / "rejects").glob("*.parquet")))
        dups = _rows(con, list((norm / "outputs" / "dups").glob("*.parquet")))
        normalized = _rows(con, list((norm / "outputs" / "main").glob("*.parquet")))
        assert f["docs_in"] == normalized + dups + rejects
        assert (f["removed"]["rejects"], f["removed"]["in-source dups"]) == (rejects, dups)
        removed = dict(con.execute("select reason, count(*) from read_parquet(?) group by 1",
                                   [[str(p) for p in (cons / "outputs" / "removed").glob("*.parquet")]]).fetchall())
        assert f["removed"]["exact dups"] == removed.get("exact", 0)
        assert f["removed"]["fuzzy dups"] == removed.get("fuzzy", 0)
        assert f["removed"]["contaminated"] == removed.get("decontaminate", 0)
        assert f["docs_out"] == _rows(con, list((cons / "outputs" / "main").glob("*.parquet")))
        assert f["tokens"] == _tokens(_step_dir(out, f"tokenize-{src}"))
    assert data["sources"]["web"]["removed"] == {**data["sources"]["web"]["removed"], "rejects": 1,
                                                 "in-source dups": 1}
    assert data["sources"]["code"]["removed"]["contaminated"] == 1  # heapq.py holds the benchmark item
    assert data["sources"]["code-again"]["docs_out"] == 0  # every document is also in `code`
    assert any("source code-again: emptied by consolidate-code-again" in w for w in data["warnings"])
    assert data["train"]["steps"] == 3 and data["train"]["final_loss"] > 0
    assert data["train"]["skipped_sources"] == ["code-again"]
    assert data["train"]["loss_plot"].startswith("train-") and (out / data["train"]["loss_plot"]).exists()
    assert data["tokenizer"]["vocab_size"] == 512
    assert data["contamination"]["heap-bench"]["code"] == 1
    assert data["contamination"]["heap-bench"].get("web", 0) == 0
    assert data["contamination"]["heap-bench"]["code-again"] == 1  # the same heapq.py, as jsonl
    # The human summary: the same figures, paths relative to the prefix, the warning said when it happened.
    assert re.search(r"^documents\s+code\s+web\s+code-again$", human, re.M)
    assert re.search(r"^tokens\s+[\d,]+\s+[\d,]+\s+0$", human, re.M)
    assert "warning: source code-again: emptied by consolidate-code-again" in human
    assert re.search(r"^contamination: heap-bench: 2 documents flagged \(.*code 1", human, re.M)
    assert "train: step 3/3: loss" in human and f"loss plot {data['train']['loss_plot']}" in human
    assert str(out) + "/" not in human.split("step  ")[-1].split("documents")[0]  # outputs shown relative


@pytest.mark.slow
@needs("chromium")
def test_report_renders_every_section_in_headless_chromium(tmp_path):
    manifest = _corpus(tmp_path)
    assert _datakit("run", str(manifest), cwd=tmp_path).returncode == 0
    r = _datakit("report", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    page = Path(r.stdout.strip())
    assert page == tmp_path / "out" / "report.html"
    common = [program("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1280,3000"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180).stdout
    for section in ("funnel", "removals", "histograms", "mixture", "loss", "time"):
        assert f'<section id="{section}">' in dom, section
    for chart in ("funnel-chart", "hist-length", "hist-clusters", "tokens-chart", "loss-chart", "time-chart"):
        assert f'id="{chart}"' in dom, chart
    reasons = set(re.findall(r'data-step="([^"]+)" data-reason="([^"]+)"', dom))
    assert ("consolidate-code", "decontaminate") in reasons and ("consolidate-code-again", "exact") in reasons
    assert ("normalize-web", "in-source dups") in reasons
    assert any(step == "normalize-web" and reason not in ("in-source dups",) for step, reason in reasons)  # reject
    # Each reason shows excerpts of the documents it removed: the contaminated one is heapq.py.
    contaminated = dom.split('data-step="consolidate-code" data-reason="decontaminate"')[1].split("</details>")[0]
    assert "Heap queue algorithm" in contaminated and "heap-bench:1" in contaminated  # line 1 of bench.jsonl
    shot = tmp_path / "report.png"
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=180)
    assert shot.exists() and shot.stat().st_size > 20_000


@pytest.mark.slow
def test_gc_removes_every_outdated_build_and_nothing_current_or_running(tmp_path):
    manifest = _corpus(tmp_path, train=False, whitespace=128)
    assert _datakit("run", str(manifest), cwd=tmp_path).returncode == 0
    out = tmp_path / "out"
    first = {p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")}
    manifest = _corpus(tmp_path, train=False, whitespace=64)  # new normalize identity: every step rebuilds
    assert _datakit("run", str(manifest), cwd=tmp_path).returncode == 0
    second = {p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")} - first
    assert len(second) == len(first)  # two builds of every step
    running = sorted(first)[0]
    lease = Lease(str(out / running), timeout_s=60)
    lease.acquire()
    try:
        r = _datakit("gc", str(manifest), "--dry-run", "--json", cwd=tmp_path)
        report = json.loads(r.stdout)
        assert set(report["removed"]) == first - {running} and report["kept_running"] == [running]
        assert {p.name for p in out.iterdir() if p.is_dir()} >= first  # a dry run removes nothing
        r = _datakit("gc", str(manifest), cwd=tmp_path)
        assert r.returncode == 0 and f"kept {running} (a run is building it)" in r.stdout
    finally:
        lease.release()
    left = {p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert left == second | {running}
    again = _datakit("run", str(manifest), "--json", cwd=tmp_path)
    assert {s["status"] for s in json.loads(again.stdout.strip().splitlines()[-1])["steps"]} == {"skipped"}
    status = _datakit("status", str(manifest), cwd=tmp_path).stdout
    assert all(line.startswith("succeeded") for line in status.splitlines())


USER_STAGES = 24  # user filters, each removing the web document that holds its marker: 24 removal reasons
LICENSES = Path("/usr/share/common-licenses")


def _many_reasons_corpus(tmp_path: Path) -> Path:
    """A corpus with 30+ removal reasons: normalize's, 24 user filters', the quality layer's language ID,
    consolidate's; a source of records `t0` ... `t999` that fuzzy dedup folds to three texts (digits fold
    to 0 in shingles); and stdlib code with a planted benchmark item."""
    code = tmp_path / "code"
    code.mkdir()
    for name in ("heapq.py", "bisect.py", "textwrap.py", "shlex.py", "fnmatch.py", "colorsys.py"):
        (code / name).write_text((STDLIB / name).read_text())
    modules = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 3000)[:USER_STAGES]
    rows = [{"text": f"zqmark{k:02d} " + p.read_text()[:2000]} for k, p in enumerate(modules)]
    rows += [{"text": (LICENSES / n).read_text()} for n in ("Apache-2.0", "Artistic", "BSD", "MPL-2.0")]
    rows.append({"text": "Der Leuchtturm am nördlichen Kap wurde nach drei Schiffsunglücken gebaut. Sein Turm "
                         "besteht aus Granitblöcken, die auf dem Festland gebrochen und über die Meerenge gebracht "
                         "wurden. Fast ein Jahrhundert lang lebte ein Wärter mit seiner Familie im kleinen Haus."})
    (tmp_path / "web.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "counters.jsonl").write_text("".join(json.dumps({"text": f"t{i}"}) + "\n" for i in range(1000)))
    (tmp_path / "bench.jsonl").write_text(json.dumps({"question": "Heaps are arrays for which a[k] <= a[2*k+1] and "
                                                      "a[k] <= a[2*k+2] for all k, counting elements from 0."}) + "\n")
    (tmp_path / "marks.py").write_text("def drop_marked(doc, config):\n    return config['marker'] not in doc['text']\n")
    stages = "".join(f"  - {{name: drop-{k:02d}, call: marks:drop_marked, kind: filter, place: after_normalize, "
                     f"sources: [web], config: {{marker: zqmark{k:02d}}}}}\n" for k in range(USER_STAGES))
    off = "{enabled: false}"
    manifest = tmp_path / "sources.yaml"
    manifest.write_text(f"""\
prefix: out
sources:
  - {{name: code, uri: code/*.py, format: text, weight: 2}}
  - {{name: web, uri: web.jsonl, format: jsonl}}
  - {{name: counters, uri: counters.jsonl, format: jsonl, weight: 0}}
stages:
{stages}quality:
  langid: {{languages: [en]}}
  sources:
    code: {off}
    counters: {off}
    web: {{gopher_repetition: {off}, gopher_quality: {off}, c4: {off}, fineweb: {off}}}
decontaminate:
  benchmarks: [{{name: heap-bench, path: bench.jsonl, text_fields: [question]}}]
tokenize: {{vocab_size: 512, validation_fraction: 0.2}}
train: {{preset: nano, seq_len: 32, batch_size: 4, steps: 3, warmup: 1}}
""")
    return manifest


def _cells(row_html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row_html)]


@pytest.mark.slow
@needs("chromium")
@pytest.mark.skipif(not LICENSES.is_dir(), reason="needs /usr/share/common-licenses (apt-get install base-files)")
def test_report_reads_at_thirty_removal_reasons(tmp_path):
    from datakit.report.mix_show import mix_view
    from datakit.pipeline import load_manifest
    from datakit.report.text import format_summary
    from datakit.stages.plan import read_plan

    manifest = _many_reasons_corpus(tmp_path)
    r = _datakit("run", str(manifest), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    data = summary["data"]
    # The collapse is explained where it happens, in lines that fit 100 columns.
    collapse = " ".join(next(w for w in data["warnings"] if "fuzzy dedup removed" in w).split())
    assert "99.7% of source counters (997 of 1,000 documents)" in collapse
    assert "largest cluster has 900 documents" in collapse and "fold every digit to 0" in collapse
    text = format_summary(summary, str(tmp_path / "out"))
    human = text[text.index("warning: fuzzy dedup"):].split("\nwarning:")[0]
    assert len(human.splitlines()) > 1 and all(len(line) <= 100 for line in human.splitlines())
    short = [n for n, f in data["sources"].items() if f["tokenized_docs"] and not f["validation_docs"]]
    assert short and data["sources"]["code"]["validation_docs"]  # a component the split left without any
    novalid = next(w for w in data["warnings"] if w.startswith("no validation documents"))
    assert all(n in novalid for n in short) and all(len(line) <= 91 for line in novalid.splitlines())

    out = tmp_path / "out"
    page = Path(_datakit("report", str(out), cwd=tmp_path).stdout.strip())
    common = [program("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1280,3000"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180).stdout
    # Every removal reason has a colour of its own, listed under its stage, and drawn in the funnel.
    funnel = dom.split('<section id="funnel">')[1].split("</section>")[0]
    legend = funnel.split("class=\"legend\"")[1].split("<table")[0]
    colours = dict(re.findall(r'data-reason="([^"]+)" data-colour="([^"]+)"', legend))
    assert len(colours) >= 31 and len(set(colours.values())) == len(colours)
    assert 'data-stage="after_normalize"' in legend and 'data-stage="consolidate"' in legend
    svg = funnel.split("</svg>")[0]
    for reason in ("drop-00", "drop-23", "langid.languages", "fuzzy dups", "contaminated", "kept"):
        assert f"fill: {colours[reason]}" in svg, reason
    assert 'class="scroll"' in funnel  # the table scrolls inside its box
    # Histograms per source.
    for chart in ("hist-length-code", "hist-length-web", "hist-length-counters", "hist-lang-web"):
        assert f'id="{chart}"' in dom, chart
    # Time per stage, steps folded.
    plan = read_plan(str(out))
    bars = len(re.findall(r'id="time-chart-bar-\d+"', dom))
    assert 0 < bars <= len({s.stage for s in plan.steps}) < len(plan.steps)
    # The largest cluster with a sample of its kept copy and of a removed one.
    dedup = dom.split('<section id="dedup">')[1].split("</section>")[0]
    first = dedup.split('<tr class="cluster"')[1].split("</tr>")[0]
    assert first.startswith(' data-size="900"')
    kept, removed = re.findall(r"<pre class=\"excerpt\">([^<]*)</pre>", first)
    assert re.fullmatch(r"t\d{3}", kept) and re.fullmatch(r"t\d{3}", removed) and kept != removed
    # The S-curve for the bands and rows the fuzzy step recorded.
    (fuzzy,) = [s for s in plan.steps if s.kind == "attributes" and "cluster" in
                (out / s.dirname / "artifact.json").read_text()]
    params = json.loads((out / fuzzy.dirname / "artifact.json").read_text())["result"]["params"]
    b, rows_, threshold = params["minhash"]["bands"], params["minhash"]["rows"], params["verify_threshold"]
    points = {float(s): float(p) for s, p in re.findall(r'data-s="([^"]+)" data-p="([^"]+)"', dedup)}
    assert len(points) >= 4
    for s, p in points.items():
        assert p == pytest.approx(0.0 if s < threshold else 1 - (1 - s ** rows_) ** b, abs=1e-6), s
    # The mixture weights are mix show's.
    mixture = dom.split('<section id="mixture">')[1].split("</section>")[0]
    shown = {c[0]: c[4] for c in map(_cells, re.findall(r"<tr>(.*?)</tr>", mixture)) if len(c) == 5}
    m = load_manifest(manifest)
    view = mix_view(m, read_plan(str(out)), str(out))
    assert {row["component"] for row in view.rows} == set(shown)
    for row in view.rows:
        assert float(shown[row["component"]]) == pytest.approx(row["weight"], abs=5e-5), row
    assert novalid.split(":")[0] in dom
    shot = tmp_path / "report.png"
    subprocess.run([*common, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=180)
    assert shot.exists()
