"""Typed step results (datakit.core.results): every kind's type reads the artifact.json results of a real
run and writes back exactly the same dict (so builds made before the types existed load, skip and read as
before), readers get typed values through a dependency's record, and reading a record as the wrong kind
fails naming the step, the kind asked for and the keys it has."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

import pytest
import yaml

from datakit.core import results as R
from datakit.mix.fixtures import write_corpus
from datakit.pipeline import load_manifest, run
from datakit.stages.mixture_steps import FitResult, ProxyRun
from datakit.stages.plan import read_plan

TYPES = {R.FILES: R.FilesResult, R.DOCUMENTS: R.DocumentsResult, R.SIGNATURES: R.SignaturesResult,
         R.ATTRIBUTES: R.AttributesResult,
         R.TOKENIZER: R.TokenizerResult, R.TOKENS: R.TokensResult, R.MIXTURE: R.MixtureResult,
         R.MODEL: R.ModelResult}
PROXY = {"preset": "nano", "steps": 3, "warmup": 0, "seq_len": 32, "batch_size": 2, "log_every": 1,
         "d_model": 32, "d_ff": 64, "eval_every": 0, "checkpoint_every": 0}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        """Serve without a log line per request."""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A small run producing every kind: a downloaded source (files, from a local HTTP server), a local
    one, exact and fuzzy dedup (attributes), tokenizer, tokens, a three-proxy mixture search, training."""
    root = tmp_path_factory.mktemp("results")
    write_corpus(str(root))
    handler = functools.partial(_Quiet, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        manifest = {
            "prefix": "out",
            "sources": [{"name": "clean", "uri": "clean.jsonl", "format": "jsonl"},
                        {"name": "noise", "uri": f"http://127.0.0.1:{httpd.server_port}/noise.jsonl",
                         "format": "jsonl"}],
            "tokenize": {"vocab_size": 300, "validation_fraction": 0.05},
            "mixture": {"weights": "search",
                        "search": {"proxies": 3, "seed": 1, "rounds": 1, "seeds": 2, "noise_proxies": 1,
                                   "proxy": PROXY, "target": {"validation": ["clean"]}}},
            "train": PROXY,
        }
        (root / "sources.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        summary = run(load_manifest(root / "sources.yaml"), backend="inline")
    finally:
        httpd.shutdown()
    assert summary.ok, [s for s in summary.to_dict()["steps"] if s["status"] != "succeeded"]
    prefix = str(root / "out")
    return summary, read_plan(prefix), prefix


def _artifact(prefix: str, dirname: str) -> dict:
    return json.loads((Path(prefix) / dirname / "artifact.json").read_text())


def test_every_kind_round_trips_the_artifact_results_of_a_real_run(built):
    _, plan, prefix = built
    seen = set()
    for step in plan.steps:
        if step.kind is None:
            continue
        result = _artifact(prefix, step.dirname)["result"]
        typed = TYPES[step.kind].from_dict(result, step.name)
        assert typed.to_dict() == result, step.name
        assert json.dumps(typed.to_dict(), sort_keys=True) == json.dumps(result, sort_keys=True)
        seen.add(step.kind)
    assert seen == set(R.KINDS)


def test_the_search_steps_records_round_trip_too(built):
    summary, plan, prefix = built
    runs = [s for s in plan.steps if s.name.startswith(("mix-proxy-", "mix-verify-"))]
    fit = next(s for s in plan.steps if s.name == "mix-fit")
    assert len(runs) == 3 + 1 + 2  # three proxies, proportional's second seed, the candidate under two seeds
    for step, kind in [*((p, ProxyRun) for p in runs), (fit, FitResult)]:
        result = _artifact(prefix, step.dirname)["result"]
        assert kind.from_dict(result, step.name).to_dict() == result


def test_readers_get_typed_values_through_a_dependency_record(built):
    summary, plan, _ = built
    cache = R.TokensResult.of(summary.records[plan.tokens["clean"]])
    rec = summary.records[plan.tokens["clean"]]
    assert Path(cache.split_dir(rec.output, "train")).is_dir()
    assert cache.tokens_in("train") > 0 and cache.has_documents("validation")
    assert cache.total_tokens == cache.tokens_in("train") + cache.tokens_in("validation")
    stats = json.loads((Path(cache.split_dir(rec.output, "train")) / ".stats.json").read_text())
    assert cache.split("train").tokens == stats["total_tokens"]
    mixture = R.MixtureResult.of(summary.records[plan.mixture])
    assert set(mixture.chosen.weights) == {"clean", "noise"} and mixture.baseline.weights
    model = R.ModelResult.of(summary.records[plan.model])
    assert model.steps == PROXY["steps"] and set(model.phases[0]["weights"]) <= set(mixture.chosen.weights)
    files = R.FilesResult.of(summary.records[plan.files["noise"]])
    assert [f.name for f in files.files] == ["noise.jsonl"] and files.files[0].sha256
    attrs = [R.AttributesResult.of(summary.records[a]) for a in plan.attributes]
    assert attrs and all(a.attributes("clean").startswith("attributes/") for a in attrs)
    tokenizer = R.TokenizerResult.of(summary.records[plan.tokenizer])
    assert tokenizer.vocab == 300 and tokenizer.tokenizer == "tokenizer.json"
    docs = R.DocumentsResult.of(summary.records[plan.documents("clean")])
    assert docs.source == "clean" and docs.main_dir == "outputs/main"  # consolidate names its dir
    first = R.DocumentsResult.of(summary.records[plan.chain("clean")[0]])
    assert first.main_files and first.main_dir == "outputs/main"  # normalize lists its files


def test_a_reader_given_the_wrong_kind_fails_naming_step_kind_and_keys(built):
    summary, plan, _ = built
    with pytest.raises(R.WrongResult) as e:
        R.TokensResult.of(summary.records[plan.tokenizer])
    message = str(e.value)
    assert f"step {plan.tokenizer}" in message and "not tokens" in message and "no splits" in message
    assert "sha256" in message  # the keys it has
    with pytest.raises(R.WrongResult, match="not documents"):
        R.DocumentsResult.of(summary.records[plan.tokens["clean"]])
    with pytest.raises(R.WrongResult, match="not attributes"):
        R.AttributesResult.of(summary.records[plan.model])
    with pytest.raises(R.WrongResult, match="not a proxy run"):
        ProxyRun.of(summary.records[plan.mixture])
    with pytest.raises(R.WrongResult, match="expected an object of a token cache split, got list"):
        R.TokensResult.from_dict({"splits": []}, "step x")


def test_written_keeps_counters_apart_and_a_built_record_writes_only_what_it_has():
    raw = {"splits": {"train": {"path": "train", "tokens": 5}}, "engine": "hf", "counters": {"docs": 2}}
    assert R.TokensResult.written(raw) == raw
    with pytest.raises(R.WrongResult, match="a tokens step: its result is not tokens"):
        R.TokensResult.written({"tokenizer": "tokenizer.json", "counters": {}})
    made = R.TokenizerResult(tokenizer="tokenizer.json", identity={"vocab_size": 7})
    assert made.to_dict() == {"tokenizer": "tokenizer.json", "identity": {"vocab_size": 7}}
    assert made.vocab == 7
    # a key read as null is written back as null; an absent one stays absent
    assert R.TokenizerResult.from_dict({"tokenizer": "t", "sha256": None}).to_dict() == {"tokenizer": "t",
                                                                                          "sha256": None}
