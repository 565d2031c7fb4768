"""The proxy-model mixture search end to end, on a corpus whose answer is known by construction.

`clean` is English prose (the common-licenses texts, one document per paragraph); `noise` is random
letter strings, three times as much (datakit.mix.fixtures). The target is `clean`'s validation split,
so the token-proportional mixture (mostly noise) is a poor one and a search must move weight to `clean`.
The candidate is trained for the same budget as the proportional baseline under each seed and must
measure better on the target by more than the noise; the same settings give the same mixture file,
byte for byte, on another backend; a rerun reuses every finished proxy. (The harder known-answer cases
on real text are in test_mix_known_answer.py.)
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from click.testing import CliRunner

from datakit.cli import main
from datakit.mix.file import read_mixture_file
from datakit.mix.fixtures import write_corpus
from datakit.pipeline import build_plan, build_steps, load_manifest, run

pytestmark = pytest.mark.slow

PROXY = {"preset": "nano", "steps": 40, "warmup": 4, "seq_len": 64, "batch_size": 8, "log_every": 20,
         "d_model": 32, "d_ff": 64}
SEARCH = {"proxies": 6, "seed": 1, "rounds": 2, "refine": 2, "seeds": 2, "noise_proxies": 1}
ROUND_ONE = ["mix-proxy-00", "mix-proxy-00-s1", *(f"mix-proxy-{i:02d}" for i in range(1, 6))]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixsearch")
    write_corpus(str(root))
    manifest = {
        "prefix": "out",
        "sources": [{"name": n, "uri": f"{n}.jsonl", "format": "jsonl"} for n in ("clean", "noise")],
        "dedup": {"fuzzy": False},
        "tokenize": {"vocab_size": 512, "validation_fraction": 0.05},
        "mixture": {"weights": "search", "max_epochs": {"clean": 50},
                    "search": {**SEARCH, "proxy": PROXY, "target": {"validation": ["clean"]}}},
        "train": {**PROXY, "steps": 20},
    }
    path = root / "sources.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    m = load_manifest(path)
    summary = run(m, backend="inline")
    assert summary.ok, [s for s in summary.to_dict()["steps"] if s["status"] != "succeeded"]
    return {"root": root, "manifest": m, "path": path, "summary": summary}


def test_the_searched_mixture_beats_proportional_on_the_target(corpus):
    res = corpus["summary"].result("mix-search")
    base, chosen = res["baseline"], res["chosen"]
    print(f"proportional {base['weights']} -> {base['measured_bpb']:.4f} bpb; chosen {chosen['weights']} -> "
          f"predicted {chosen['predicted_bpb']:.4f}, measured {chosen['measured_bpb']:.4f} bpb")
    assert base["weights"]["noise"] > 0.5  # by construction proportional is mostly noise
    assert chosen["weights"]["clean"] > base["weights"]["clean"]
    assert chosen["measured_bpb"] < base["measured_bpb"]
    assert res["decision"]["returned"] == "candidate" and res["gain"]["measured"]["lo"] > 0
    # the mixture file records every proxy (two rounds), the fit, the noise and the baseline
    data = read_mixture_file(corpus["summary"].records["mix-search"].path("mixture.yaml"))
    assert [p["round"] for p in data["proxies"]] == [1] * 6 + [2] * 2
    assert data["proxies"][0]["weights"] == data["baseline"]["weights"] and len(data["baseline"]["runs"]) == 2
    assert data["fit"]["model"] in ("linear", "quadratic", "law") and data["fit"]["accepted"]
    assert data["weights"] == chosen["weights"] == data["candidate"]["weights"]
    assert data["format"] == "datakit-mixture/2"
    assert data["noise"]["seed_sd"] > 0 and data["search"]["runs"]["total"] == 6 + 2 + 1 + 2
    # the train step trained on the searched weights, caps held, and says so
    mix = corpus["summary"].result("train")["mixture"]
    used = mix["phases"][0]["weights"]
    assert {n: used.get(n, 0.0) for n in chosen["weights"]} == pytest.approx(chosen["weights"], abs=1e-3)
    assert mix["epochs"]["clean"] <= 50


def _mixture_file(summary) -> bytes:
    with open(summary.records["mix-search"].path("mixture.yaml"), "rb") as f:
        return f.read()


def test_a_rerun_reuses_every_proxy_and_the_same_settings_give_the_same_file(corpus):
    m = corpus["manifest"]
    again = run(m, backend="inline")
    statuses = {s["name"]: s["status"] for s in again.to_dict()["steps"]}
    assert all(statuses[n] == "skipped" for n in statuses if n.startswith("mix-")), statuses
    # the same settings elsewhere, on the local backend with 2 workers: the proxies train in parallel
    # (mix-proxies dispatches them), and the mixture file is the same, byte for byte
    other = run(m, prefix=str(corpus["root"] / "out2"), backend="local", workers=2)
    assert other.ok
    assert other.result("mix-proxies")["built"] == sorted(ROUND_ONE)
    assert other.result("mix-verify")["built"] == ["mix-verify-s0", "mix-verify-s1"]
    assert _mixture_file(other) == _mixture_file(corpus["summary"])
    # one more proxy: `datakit mix search --proxies 7` trains only the new round-one proxy (and, around
    # the new round-one fit, round two and the verification again), never the finished round-one ones
    res = CliRunner().invoke(main, ["mix", "search", str(corpus["path"]), "--proxies", "7"])
    assert res.exit_code == 0, res.output
    assert "mix-proxy-06" in res.output and "decision:     returned" in res.output
    counts = re.search(r"(\d+) steps to build, (\d+) reused", res.output)  # reused steps get no line of their own
    assert counts and int(counts[2]) >= len(ROUND_ONE), res.output
    with open(corpus["root"] / "out" / "events.jsonl") as f:
        events = [json.loads(line) for line in f][-80:]
    built = {e["step"] for e in events if e.get("event") == "step_succeeded"}
    assert "mix-proxy-06" in built and not built & set(ROUND_ONE)


def test_mix_show_prints_counts_weights_and_epochs(corpus):
    res = CliRunner().invoke(main, ["mix", "show", str(corpus["path"]), "--json"])
    assert res.exit_code == 0, res.output
    view = json.loads(res.output)
    rows = {r["component"]: r for r in view["rows"]}
    assert set(rows) == {"clean", "noise"} and view["mode"] == "search"
    assert rows["noise"]["tokens"] > rows["clean"]["tokens"] > 0 and rows["clean"]["documents"] > 0
    assert rows["clean"]["proportional"] + rows["noise"]["proportional"] == pytest.approx(1.0)
    searched = corpus["summary"].result("mix-search")["chosen"]["weights"]
    assert rows["clean"]["weight"] == pytest.approx(searched["clean"], abs=1e-3)
    text = CliRunner().invoke(main, ["mix", "show", str(corpus["path"]), "--warn-epochs", "0.001"]).output
    assert "clean" in text and "warning: clean is repeated" in text
    # the search: its decision, the fit, the trust region and every proxy with its seeds' runs
    assert view["search"]["decision"]["returned"] == "candidate" and len(view["search"]["proxies"]) == 8
    assert "decision:     returned candidate" in text and "trust region: the hull of 8 proxies" in text
    assert "leave-one-out RMSE" in text and "mix-proxy-r2-01" in text
    assert max(len(line) for line in text.split("mixture search:")[1].splitlines()) <= 100


def test_mix_show_says_what_to_run_when_caches_are_missing(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "hello world"}) + "\n")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"prefix": "out", "sources": [{"name": "a", "uri": "a.jsonl", "format": "jsonl"}]}))
    res = CliRunner().invoke(main, ["mix", "show", str(path)])
    assert res.exit_code == 2
    assert "token caches are not built for: a" in res.output and f"datakit run {path}" in res.output


def test_the_run_report_plots_the_search(corpus):
    from datakit.report.run_report import render_run_report

    m = corpus["manifest"]
    page = render_run_report(m.prefix, build_plan(m, write_cache=False))
    assert 'id="mixture-search"' in page and 'id="mix-proxies-chart"' in page and 'id="mix-choice-chart"' in page
    assert "leave-one-out RMSE" in page and "returned candidate" in page and "trust region" in page
    assert "seed SD" in page and "mix-proxy-r2-00" in page


def test_mix_search_cli_with_a_jsonl_target_writes_a_file_a_manifest_includes(corpus, tmp_path):
    root = corpus["root"]
    with open(root / "clean.jsonl") as f:
        (root / "target.jsonl").write_text("".join(f.readlines()[:40]))
    data = yaml.safe_load(corpus["path"].read_text())
    data["mixture"] = {"search": {"proxies": 3, "seed": 2, "verify": False, "rounds": 1, "seeds": 2,
                                  "noise_proxies": 1, "proxy": PROXY, "target": {"jsonl": "target.jsonl"}}}
    data.pop("train")
    path = root / "search.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "chosen.yaml"
    res = CliRunner().invoke(main, ["mix", "search", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "proportional:" in res.output and "chosen:" in res.output and "not verified" in res.output
    chosen = read_mixture_file(str(out))
    assert chosen["search"]["target"]["jsonl"] == "target.jsonl" and len(chosen["proxies"]) == 3
    assert chosen["gain"]["measured"] is None and "not verified" in chosen["decision"]["reason"] + res.output
    # a manifest includes the file: its weights (content, not path) are the train step's mixture
    data["mixture"] = {"file": str(out)}
    data["train"] = {**PROXY, "steps": 20}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    train = next(s for s in build_steps(load_manifest(path), write_cache=False) if s.name == "train")
    assert train.config["mixture"]["file_weights"] == chosen["weights"]


def test_the_train_step_resolves_proportional_staged_and_capped_weights(corpus):
    import math

    # phase 2 (steps 10..19) is all clean: 80 sequences; phase 1 would add about 23 more, the cap allows 90
    windows = (corpus["summary"].result("tokenize-clean")["splits"]["train"]["tokens"] - 1) // PROXY["seq_len"]
    max_epochs = 90.5 / windows
    data = yaml.safe_load(corpus["path"].read_text())
    data["mixture"] = {"weights": "proportional", "temperature": 2.0, "max_epochs": {"clean": max_epochs},
                       "schedule": [{"start": 10, "weights": {"clean": 1.0, "noise": 0.0}}]}
    path = corpus["root"] / "staged.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    summary = run(load_manifest(path), backend="inline")
    assert summary.ok
    mix = summary.result("train")["mixture"]
    assert mix["windows"]["clean"] == windows and math.floor(max_epochs * windows) == 90
    assert [p["start"] for p in mix["phases"]] == [0, 10] and mix["capped"] == ["clean"]
    assert 80 < mix["draws"]["clean"] <= 90 and sum(mix["draws"].values()) == 20 * 8
    tokens = {n: summary.result(f"tokenize-{n}")["splits"]["train"]["tokens"] for n in ("clean", "noise")}
    flat = math.sqrt(tokens["clean"]) / (math.sqrt(tokens["clean"]) + math.sqrt(tokens["noise"]))
    assert mix["phases"][0]["weights"]["clean"] <= flat + 1e-3  # temperature 2 (then capped, never raised)
    statuses = {s["name"]: s["status"] for s in summary.to_dict()["steps"]}
    assert statuses["train"] == "succeeded" and statuses["tokenize-clean"] == "skipped"
