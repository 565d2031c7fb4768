"""Manifest loading and validation: every error kind, with its exact line and column."""

from __future__ import annotations

import http.server
import os
import textwrap
import threading
from pathlib import Path

import pytest

from datakit.manifest import Manifest, ManifestError, ManifestInvalid, SourceSpec
from datakit.pipeline import load_manifest, manifest_from_dict, validate_manifest
from datakit.core.uris import SourceNotFound, is_remote, list_source_files

REPO = Path(__file__).resolve().parents[1]


def write(dir: Path, text: str, name: str = "sources.yaml") -> Path:
    path = dir / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    """A manifest directory with a few small data files (and a dot-file that must be ignored)."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.jsonl").write_text('{"text": "alpha"}\n')
    (data / "b.jsonl").write_text('{"text": "beta"}\n')
    (data / "sub" / "c.jsonl").write_text('{"text": "gamma"}\n')
    (data / ".hidden.jsonl").write_text('{"text": "never"}\n')
    (data / "_temporary").mkdir()
    (data / "_temporary" / "d.jsonl").write_text('{"text": "never"}\n')
    (tmp_path / "bench.jsonl").write_text('{"question": "q"}\n')
    return tmp_path


def messages(errors: list[ManifestError]) -> list[str]:
    return [str(e) for e in errors]


# ----------------------------------------------------------------------------------------------
# valid manifests


def test_sources_only_manifest_is_valid_with_defaults(corpus: Path, tmp_path: Path, monkeypatch):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: data/*.jsonl
            format: jsonl
        """,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # relative paths resolve against the manifest, not the cwd
    m = load_manifest(path)
    assert isinstance(m, Manifest)
    assert m.path == str(path)
    (src,) = m.sources
    assert src == SourceSpec(name="web", uri=str(corpus / "data" / "*.jsonl"), format="jsonl")
    assert (src.text_field, src.id_field, src.weight, src.dedup, src.priority) == ("text", None, 1.0, "exact", 0)
    assert not src.remote
    assert m.prefix == str(corpus / "datakit-out")
    assert (m.backend, m.workers, m.mirror, m.train) == ("local", None, None, None)
    assert m.normalize.max_whitespace_run == 128 and m.normalize.target_shard_bytes == 64 << 20
    assert (m.dedup.num_perms, m.dedup.bands, m.dedup.rows, m.dedup.threshold) == (112, 14, 8, None)
    assert m.decontaminate.ngram == 13 and m.decontaminate.benchmarks == ()
    assert m.tokenize.tokenizer is None and m.tokenize.vocab_size == 8192
    assert m.raw == {"sources": [{"name": "web", "uri": "data/*.jsonl", "format": "jsonl"}]}
    assert validate_manifest(path) == []


def test_full_manifest_typed_values(corpus: Path):
    path = write(
        corpus,
        """
        prefix: out
        backend: inline
        workers: 2
        defaults: &common
          format: jsonl
          license: cc-by-4.0
        sources:
          - <<: *common
            name: web
            uri: [data/a.jsonl, data/b.jsonl]
            weight: 3
            exclude: "*.tmp"
            sha256:
              a.jsonl: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
          - name: code
            uri: data
            format: text
            bare: true
            dedup: none
            max_files: 2
        normalize: {strict: true, reject_fraction: 0}
        dedup: {threshold: 0.8, ngram_unit: char, num_perms: 128}
        decontaminate:
          benchmarks:
            - {name: quiz, path: bench.jsonl, text_fields: [question]}
        tokenize: {vocab_size: 1024, validation_fraction: 0.1, bos: true}
        train:
          preset: nano
          steps: 5
          lr: 0.01
          warmup: 1
          qk_norm: true
          grad_clip: null
        """,
    )
    errors = validate_manifest(path)
    # 'defaults' (an anchor holder) is not a manifest key; "x-" keys are free for anchors.
    assert messages(errors) == [
        f"{path}:4:1: defaults: unknown key 'defaults' (allowed: backend, decontaminate, dedup, export, "
        "line_dedup, mirror, mixture, normalize, pii, prefix, quality, quality_classifier, sources, stages, takedown, tokenize, "
        "train, workers)"
    ]
    path.write_text(path.read_text().replace("defaults: &common", "x-common: &common"))
    m = load_manifest(path)
    web, code = m.sources
    assert web.uri == (str(corpus / "data/a.jsonl"), str(corpus / "data/b.jsonl"))
    assert web.uris == web.uri and web.weight == 3.0 and isinstance(web.weight, float)
    assert web.exclude == ("*.tmp",)  # a lone string is a list of one
    assert web.license == "cc-by-4.0" and web.priority == 0
    assert code.bare and code.dedup == "none" and code.max_files == 2 and code.priority == 1
    assert m.prefix == str(corpus / "out") and m.backend == "inline" and m.workers == 2
    assert m.normalize.strict and m.normalize.reject_fraction == 0.0
    assert m.dedup.threshold == 0.8 and m.dedup.ngram_unit == "char"
    (bench,) = m.decontaminate.benchmarks
    assert bench.path == str(corpus / "bench.jsonl") and bench.text_fields == ("question",)
    assert m.tokenize.bos and m.tokenize.vocab_size == 1024
    assert m.weights == {"web": 3.0, "code": 1.0}
    t = m.train
    assert t is not None and t.learning_rate == 0.01 and t.warmup_steps == 1 and t.steps == 5
    assert t.grad_clip is None and t.model.qk_norm and t.preset == "nano"
    assert t.seq_len == 128 and t.model.d_model == 64  # keys left out take the preset's values
    assert m.source("code") is code
    with pytest.raises(KeyError, match="no source named 'nope'"):
        m.source("nope")
    assert m.to_dict()["sources"][0]["uri"] == [str(corpus / "data/a.jsonl"), str(corpus / "data/b.jsonl")]


def test_yaml_anchors_and_merge_keys(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - &web
            name: web
            uri: data/a.jsonl
            format: jsonl
            weight: 2
          - <<: *web
            name: web2
            uri: data/b.jsonl
        """,
    )
    m = load_manifest(path)
    assert [(s.name, s.weight, s.format, s.priority) for s in m.sources] == [
        ("web", 2.0, "jsonl", 0),
        ("web2", 2.0, "jsonl", 1),
    ]


def test_train_section_is_the_train_config():
    """The train section is the train stage's own TrainConfig: the preset picks every default, model-shape
    keys are written flat, short names are aliases; nothing mirrors it."""
    from datakit.train import config

    cfg = manifest_from_dict(
        {"sources": [{"name": "a", "uri": "x", "format": "text"}],
         "train": {"preset": "small", "steps": 300, "lr": 0.5, "d_model": 32, "grad_clip": None}},
        check_uris=False,
    ).train
    assert type(cfg) is config.TrainConfig
    assert (cfg.steps, cfg.learning_rate, cfg.model.d_model, cfg.grad_clip) == (300, 0.5, 32, None)
    assert cfg.seq_len == config.LOOP_PRESETS["small"]["seq_len"]  # unset keys keep the preset's value
    assert cfg.model.n_layers == config.MODEL_PRESETS["small"].n_layers
    assert config.TrainConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ManifestInvalid, match=r"train.n_heads: model.n_heads=3 does not divide"):
        manifest_from_dict({"sources": [{"name": "a", "uri": "x", "format": "text"}],
                            "train": {"n_heads": 3}}, check_uris=False)


# ----------------------------------------------------------------------------------------------
# error kinds, each at its exact line:column


def test_issue_example_error_string(corpus: Path, monkeypatch):
    write(
        corpus,
        """
        # A manifest with a typo in the third source's format.
        prefix: out

        sources:
          - name: one
            uri: data/a.jsonl
            format: jsonl

          - name: two
            uri: data/b.jsonl
            format: jsonl

          - name: three
            format: jsnl
            uri: data/sub/c.jsonl
        """,
    )
    monkeypatch.chdir(corpus)
    errors = validate_manifest("sources.yaml")
    assert messages(errors) == [
        "sources.yaml:14:5: sources[2].format: 'jsnl' is not one of jsonl, parquet, text, html, warc"
    ]
    e = errors[0]
    assert (e.file, e.line, e.column, e.field) == ("sources.yaml", 14, 5, "sources[2].format")
    with pytest.raises(ManifestInvalid) as info:
        load_manifest("sources.yaml")
    assert info.value.errors == errors
    assert str(info.value) == str(errors[0])


def test_unknown_keys_with_suggestions(corpus: Path):
    path = write(
        corpus,
        """
        source:
          - name: a
        sources:
          - name: web
            uri: data/a.jsonl
            fromat: jsonl
            format: jsonl
        dedup:
          ngrams: 5
        train:
          stepz: 3
          learning_rat: 0.1
          zzz: 1
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:1:1: source: unknown key 'source' (did you mean 'sources'?)",
        f"{path}:6:5: sources[0].fromat: unknown key 'fromat' (did you mean 'format'?)",
        f"{path}:9:3: dedup.ngrams: unknown key 'ngrams' (did you mean 'ngram'?)",
        f"{path}:11:3: train.stepz: unknown key 'stepz' (did you mean 'steps'?)",
        f"{path}:12:3: train.learning_rat: unknown key 'learning_rat' (did you mean 'learning_rate'?)",
        str(validate_manifest(path)[-1]),
    ]
    last = validate_manifest(path)[-1]
    assert (last.line, last.field) == (13, "train.zzz") and "unknown key 'zzz' (allowed: " in last.message


def test_wrong_types(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: data/a.jsonl
            format: jsonl
            weight: heavy
            bare: "yes"
            revision: 1234
            exclude: 3
            max_files: 2.5
            text_field: [a, b]
          - just-a-string
        normalize: []
        workers: two
        train: 5
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:5:5: sources[0].weight: expected a number, got a string ('heavy')",
        f"{path}:6:5: sources[0].bare: expected true or false, got a string ('yes')",
        f"{path}:7:5: sources[0].revision: expected a string, got an integer (1234); quote it to keep it a string",
        f"{path}:8:5: sources[0].exclude: expected a list of strings, got an integer (3)",
        f"{path}:9:5: sources[0].max_files: expected an integer, got a number (2.5)",
        f"{path}:10:5: sources[0].text_field: expected a string, got a list",
        f"{path}:11:5: sources[1]: expected a mapping, got a string ('just-a-string')",
        f"{path}:12:1: normalize: expected a mapping, got a list",
        f"{path}:13:1: workers: expected an integer, got a string ('two')",
        f"{path}:14:1: train: expected a mapping, got an integer (5)",
    ]


def test_enum_values(corpus: Path):
    path = write(
        corpus,
        """
        backend: spark
        sources:
          - name: web
            uri: data/a.jsonl
            format: csv
            dedup: fuzzy
        dedup:
          ngram_unit: token
        train:
          schedule: linear
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:1:1: backend: 'spark' is not one of local, ray, inline",
        f"{path}:5:5: sources[0].format: 'csv' is not one of jsonl, parquet, text, html, warc",
        f"{path}:6:5: sources[0].dedup: 'fuzzy' is not one of exact, none",
        f"{path}:8:3: dedup.ngram_unit: 'token' is not one of word, char",
        f"{path}:10:3: train.schedule: 'linear' is not one of wsd, cosine, constant",
    ]


def test_ranges_and_negative_weight(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: data/a.jsonl
            format: jsonl
            weight: -0.5
            max_files: 0
        workers: 0
        normalize:
          reject_fraction: 1.5
        dedup:
          threshold: 1
        tokenize:
          validation_fraction: 1
        train:
          steps: 0
          lr: 0
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:5:5: sources[0].weight: must be >= 0, got -0.5",
        f"{path}:6:5: sources[0].max_files: must be >= 1, got 0",
        f"{path}:7:1: workers: must be >= 1, got 0",
        f"{path}:9:3: normalize.reject_fraction: must be >= 0 and <= 1, got 1.5",
        f"{path}:11:3: dedup.threshold: must be > 0 and < 1, got 1",
        f"{path}:13:3: tokenize.validation_fraction: must be >= 0 and < 1, got 1",
        f"{path}:15:3: train.steps: must be >= 1, got 0",
        f"{path}:16:3: train.lr: must be > 0, got 0",
    ]


def test_missing_required_keys_point_at_the_mapping(corpus: Path):
    path = write(
        corpus,
        """
        prefix: out
        sources:
          - name: web
            format: jsonl
          -   uri: data/a.jsonl
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:3:5: sources[0]: missing required key 'uri'",
        f"{path}:5:7: sources[1]: missing required key 'name'",
        f"{path}:5:7: sources[1]: missing required key 'format'",
    ]


def test_missing_or_empty_sources(corpus: Path):
    path = write(corpus, "prefix: out\n")
    assert messages(validate_manifest(path)) == [f"{path}:1:1: missing required key 'sources'"]
    path = write(corpus, "sources: []\n")
    assert messages(validate_manifest(path)) == [f"{path}:1:1: sources: must list at least one source"]
    path = write(corpus, "sources: data\n")
    assert messages(validate_manifest(path)) == [
        f"{path}:1:1: sources: expected a list of sources, got a string ('data')"
    ]
    path = write(corpus, "# nothing here\n")
    assert messages(validate_manifest(path)) == [
        f"{path}: the manifest is empty; it needs at least a 'sources:' list"
    ]
    path = write(corpus, "- a\n- b\n")
    assert messages(validate_manifest(path)) == [
        f"{path}:1:1: the manifest must be a mapping with a 'sources:' list"
    ]


def test_duplicate_source_names(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: data/a.jsonl
            format: jsonl
          - name: code
            uri: data/b.jsonl
            format: jsonl
          - name: web
            uri: data/sub/c.jsonl
            format: jsonl
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:8:5: sources[2].name: duplicate source name 'web' (also sources[0])"
    ]


def test_duplicate_yaml_keys(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: data/a.jsonl
            format: jsonl
            weight: 1
            weight: 2
        dedup:
          seed: 1
        dedup:
          seed: 2
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:6:5: sources[0].weight: duplicate key 'weight' (first at line 5)",
        f"{path}:9:1: dedup: duplicate key 'dedup' (first at line 7)",
    ]


def test_yaml_syntax_error_has_its_line(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: data/a.jsonl
           format: jsonl
        """,
    )
    (error,) = validate_manifest(path)
    assert (error.line, error.field) == (4, "")
    assert str(error).startswith(f"{path}:4:") and "YAML syntax error" in error.message
    path = write(corpus, 'sources: [\n  {name: "web", uri: data/a.jsonl\n')
    (error,) = validate_manifest(path)
    assert error.line == 3 and "YAML syntax error" in error.message


def test_bad_globs_and_missing_paths(corpus: Path):
    (corpus / "empty").mkdir()
    (corpus / "dots").mkdir()
    (corpus / "dots" / ".only-hidden").write_text("x")
    (corpus / "dots" / "_SUCCESS").write_text("")
    path = write(
        corpus,
        """
        sources:
          - name: nomatch
            uri: data/*.parquet
            format: parquet
          - name: missing
            uri: nowhere/file.jsonl
            format: jsonl
          - name: empty-dir
            uri: empty
            format: text
          - name: dots-only
            uri: dots
            format: text
          - name: all-excluded
            uri: data/*.jsonl
            exclude: ["a.*", "b.jsonl"]
            format: jsonl
          - name: fine
            uri: data/**/*.jsonl
            format: jsonl
        """,
    )
    errors = validate_manifest(path)
    assert [(e.line, e.column, e.field) for e in errors] == [
        (3, 5, "sources[0].uri"),
        (6, 5, "sources[1].uri"),
        (9, 5, "sources[2].uri"),
        (12, 5, "sources[3].uri"),
        (15, 5, "sources[4].uri"),
    ]
    assert errors[0].message == f"{corpus}/data/*.parquet: no files match this pattern"
    assert errors[1].message == f"{corpus}/nowhere/file.jsonl: no such file or directory"
    assert errors[2].message == f"{corpus}/empty: no files under this directory"
    assert "2 hidden (./_) files skipped" in errors[3].message
    assert "2 excluded" in errors[4].message
    assert validate_manifest(path, check_uris=False) == []


def test_uri_checked_even_when_the_item_has_other_errors(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: nowhere/*.jsonl
            format: jsnl
        """,
    )
    assert [(e.line, e.field) for e in validate_manifest(path)] == [(3, "sources[0].uri"), (4, "sources[0].format")]


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):  # noqa: N802 - http.server naming
        codes = {"/ok.jsonl": 200, "/secret.jsonl": 403}
        self.send_response(codes.get(self.path, 404))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def http_base():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_unreachable_urls(corpus: Path, http_base: str):
    path = write(
        corpus,
        f"""
        sources:
          - name: ok
            uri: {http_base}/ok.jsonl
            format: jsonl
          - name: gone
            uri: {http_base}/gone.jsonl
            format: jsonl
          - name: denied
            uri: [{http_base}/ok.jsonl, {http_base}/secret.jsonl]
            format: jsonl
          - name: globbed
            uri: {http_base}/*.jsonl
            format: jsonl
          - name: mixed
            uri: [{http_base}/ok.jsonl, data/a.jsonl]
            format: jsonl
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:6:5: sources[1].uri: unreachable: {http_base}/gone.jsonl: HTTP 404 Not Found",
        f"{path}:9:5: sources[2].uri: unreachable: {http_base}/secret.jsonl: HTTP 403 Forbidden",
        f"{path}:12:5: sources[3].uri: {http_base}/*.jsonl: globs are not supported over http(s); "
        "list the file URLs instead",
        f"{path}:15:5: sources[4].uri: mixes local paths and remote URLs; split it into two sources",
    ]
    # A closed port is unreachable too, and says why.
    with pytest.raises(ManifestInvalid, match=r"sources\[0\]\.uri: unreachable: http://127\.0\.0\.1:9/x"):
        manifest_from_dict({"sources": [{"name": "x", "uri": "http://127.0.0.1:9/x", "format": "text"}]}, timeout=2)


def test_benchmarks_tokenizer_and_section_rules(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: data/a.jsonl
            format: jsonl
            sha256: abc
        dedup:
          bands: 20
        decontaminate:
          benchmarks:
            - name: quiz
              path: missing-bench.jsonl
            - name: quiz
              path: bench.jsonl
              text_fields: []
        tokenize:
          tokenizer: gpt2
        train:
          steps: null
          grad_clip: null
          lr: 0.1
          learning_rate: 0.2
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:5:5: sources[0].sha256: 'abc' is not a sha256 (64 lowercase hex digits)",
        f"{path}:7:3: dedup.bands: bands x rows = 20 x 8 = 160 exceeds num_perms = 112",
        f"{path}:11:7: decontaminate.benchmarks[0].path: file not found: {corpus}/missing-bench.jsonl",
        f"{path}:14:7: decontaminate.benchmarks[1].text_fields: must not be empty",
        f"{path}:16:3: tokenize.tokenizer: tokenizer file not found: {corpus}/gpt2 (hub names like 'gpt2' "
        "cannot be fetched here; point at a tokenizer.json file or leave tokenizer null to train one)",
        f"{path}:18:3: train.steps: expected an integer, got null",
        f"{path}:21:3: train.learning_rate: 'learning_rate' and 'lr' set the same field; give one",
    ]


def test_dedup_threshold_excludes_bands_and_single_sha_needs_single_file(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: data/*.jsonl
            format: jsonl
            sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
        dedup:
          threshold: 0.5
          rows: 4
        decontaminate:
          benchmarks:
            - {name: quiz, path: bench.jsonl, text_fields: [question]}
            - {name: quiz, path: bench.jsonl, text_fields: [question]}
        """,
    )
    assert messages(validate_manifest(path)) == [
        f"{path}:5:5: sources[0].sha256: a single sha256 pins a single file; map file names to digests instead",
        f"{path}:8:3: dedup.rows: give either threshold or bands/rows, not both",
        f"{path}:10:3: decontaminate.benchmarks: duplicate benchmark name 'quiz'",
    ]


def test_all_errors_reported_at_once_in_file_order(corpus: Path):
    path = write(
        corpus,
        """
        backend: spark
        sources:
          - name: web
            uri: nowhere.jsonl
            format: jsnl
            weight: -1
          - name: web
            uri: data/a.jsonl
            format: jsonl
            colour: blue
        dedup:
          ngram: 0
        """,
    )
    errors = validate_manifest(path)
    assert [(e.line, e.field) for e in errors] == [
        (1, "backend"),
        (4, "sources[0].uri"),
        (5, "sources[0].format"),
        (6, "sources[0].weight"),
        (7, "sources[1].name"),
        (10, "sources[1].colour"),
        (12, "dedup.ngram"),
    ]
    with pytest.raises(ManifestInvalid) as info:
        load_manifest(path)
    assert len(info.value.errors) == 7
    assert str(info.value).splitlines() == [str(e) for e in errors]


def test_invalid_source_names(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: "my source"
            uri: data/a.jsonl
            format: jsonl
          - name: ../up
            uri: data/b.jsonl
            format: jsonl
        """,
    )
    errors = validate_manifest(path)
    assert [(e.line, e.field) for e in errors] == [(2, "sources[0].name"), (5, "sources[1].name")]
    assert "invalid name 'my source'" in errors[0].message


@pytest.mark.parametrize("name", ["web\\n", "web\\r", " web"])
def test_names_are_matched_whole(corpus: Path, name: str):
    """A name check anchored with "$" passes "web\\n" ("$" matches before a final newline), which names
    folders gc and verify cannot see: every name is fullmatched (sources, user stages, tiers,
    benchmarks), and so is a sha256 pin."""
    pin = "a" * 64
    path = write(
        corpus,
        f"""
        sources:
          - name: "{name}"
            uri: data/a.jsonl
            format: jsonl
          - name: ok
            uri: data/b.jsonl
            format: jsonl
            sha256: "{pin}{name[3:] if name.startswith('web') else ''}"
        stages:
          - name: "{name}"
            call: mod:fn
        quality_classifier:
          tiers:
            - name: "{name}"
              min_score: 0.5
        decontaminate:
          benchmarks:
            - name: "{name}"
              path: bench.jsonl
        """,
    )
    errors = validate_manifest(path, check_uris=False)
    shown = repr(name.encode().decode("unicode_escape"))
    by_field = {e.field: e.message for e in errors}
    for field in ("sources[0].name", "stages[0].name", "quality_classifier.tiers[0].name",
                  "decontaminate.benchmarks[0].name"):
        assert by_field.get(field, "").startswith(f"invalid name {shown}"), (field, errors)
    if name.startswith("web"):
        assert "is not a sha256" in by_field["sources[1].sha256"]


def test_allow_unsized_is_a_boolean_for_remote_sources_only(corpus: Path):
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: https://example.org/a.jsonl
            format: jsonl
            allow_unsized: true
          - name: local
            uri: data/a.jsonl
            format: jsonl
            allow_unsized: true
          - name: typo
            uri: https://example.org/b.jsonl
            format: jsonl
            allow_unsized: "yes"
        """,
    )
    errors = validate_manifest(path, check_uris=False)
    assert [(e.line, e.field) for e in errors] == [(9, "sources[1].allow_unsized"), (13, "sources[2].allow_unsized")]
    assert "applies only to downloaded (remote) sources" in errors[0].message
    m = manifest_from_dict({"sources": [{"name": "web", "uri": "https://example.org/a.jsonl", "format": "jsonl",
                                         "allow_unsized": True}]}, check_uris=False)
    assert m.sources[0].allow_unsized and not SourceSpec(name="x", uri="y", format="text").allow_unsized


def test_follow_symlinks_is_a_boolean_for_local_sources_and_validation_lists_by_it(corpus: Path, tmp_path: Path):
    (tmp_path / "outside.jsonl").write_text('{"text": "not the source"}\n')
    links = corpus / "links"
    links.mkdir()
    (links / "leak.jsonl").symlink_to(tmp_path / "outside.jsonl")
    path = write(
        corpus,
        """
        sources:
          - name: web
            uri: https://example.org/a.jsonl
            format: jsonl
            follow_symlinks: true
          - name: typo
            uri: data
            format: jsonl
            follow_symlinks: "yes"
          - name: leak
            uri: links
            format: jsonl
        """,
    )
    errors = validate_manifest(path, check_uris=False)
    assert [(e.line, e.field) for e in errors] == [(5, "sources[0].follow_symlinks"), (9, "sources[1].follow_symlinks")]
    assert "applies only to local sources" in errors[0].message
    # the reachability check lists as the run will: a folder holding only a link out of it names nothing
    unreachable = {e.field: e.message for e in validate_manifest(path)}
    assert "1 symlink outside the source skipped (follow_symlinks: true follows them)" in unreachable["sources[2].uri"]
    allowed = write(corpus, """
        sources:
          - name: leak
            uri: links
            format: jsonl
            follow_symlinks: true
        """, name="allowed.yaml")
    assert validate_manifest(allowed) == []
    assert load_manifest(str(allowed)).sources[0].follow_symlinks
    assert not SourceSpec(name="x", uri="y", format="text").follow_symlinks


def test_alias_copies_are_bounded_and_refused_where_the_alias_is():
    """Aliases may copy up to MAX_ALIAS_VALUES values (a list of 999 scalars copies 1,000 with itself);
    one more copy is refused at the alias's key, with nothing built (no value, no positions)."""
    from datakit.manifest.yamlpos import MAX_ALIAS_VALUES, load_located

    anchor = "x-a: &a [" + ", ".join(["v"] * 999) + "]\n"
    copies = MAX_ALIAS_VALUES // 1000
    fits = load_located(anchor + "".join(f"x-{i}: *a\n" for i in range(copies)))
    assert fits.problems == [] and len(fits.value[f"x-{copies - 1}"]) == 999
    over = load_located(anchor + "".join(f"x-{i}: *a\n" for i in range(copies + 1)))
    assert over.value is None and over.marks == {}
    [problem] = over.problems
    assert (problem.pos.line, problem.pos.column, problem.path) == (copies + 2, 1, (f"x-{copies}",))
    assert problem.message.startswith(f"YAML aliases would copy more than {MAX_ALIAS_VALUES:,} values (an alias bomb?)")


def test_missing_manifest_file(tmp_path: Path):
    path = tmp_path / "nope.yaml"
    assert messages(validate_manifest(path)) == [f"{path}: manifest file not found"]
    with pytest.raises(ManifestInvalid, match="manifest file not found"):
        load_manifest(path)


def test_manifest_from_dict(corpus: Path):
    m = manifest_from_dict(
        {"sources": [{"name": "web", "uri": "data/a.jsonl", "format": "jsonl"}], "prefix": "o"}, base_dir=str(corpus)
    )
    assert m.path is None and m.sources[0].uri == str(corpus / "data" / "a.jsonl")
    assert m.prefix == str(corpus / "o")
    with pytest.raises(ManifestInvalid) as info:
        manifest_from_dict({"sources": [{"name": "web", "uri": "x", "format": "csv"}]}, check_uris=False)
    assert str(info.value) == "<manifest>: sources[0].format: 'csv' is not one of jsonl, parquet, text, html, warc"


def test_remote_uris_are_kept_verbatim(corpus: Path):
    m = manifest_from_dict(
        {"sources": [{"name": "r", "uri": "memory://bucket/x/*.jsonl", "format": "jsonl"},
                     {"name": "f", "uri": f"file://{corpus}/data/a.jsonl", "format": "jsonl"}]},
        check_uris=False,
    )
    assert m.sources[0].uri == "memory://bucket/x/*.jsonl" and m.sources[0].remote
    assert m.sources[1].uri == f"file://{corpus}/data/a.jsonl" and not m.sources[1].remote


def test_memory_uri_reachability():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/mtest/present/a.jsonl", b'{"text": "x"}\n')
    try:
        ok = {"name": "ok", "uri": "memory://mtest/present/*.jsonl", "format": "jsonl"}
        bad = {"name": "bad", "uri": "memory://mtest/absent/*.jsonl", "format": "jsonl"}
        assert manifest_from_dict({"sources": [ok]}).sources[0].name == "ok"
        with pytest.raises(ManifestInvalid, match=r"sources\[0\]\.uri: memory://mtest/absent/\*\.jsonl: no files"):
            manifest_from_dict({"sources": [bad]})
    finally:
        fs.rm("/mtest", recursive=True)


# ----------------------------------------------------------------------------------------------
# listing helpers shared with the pipeline


def test_list_files_order_dotfiles_exclude_max(corpus: Path):
    data = corpus / "data"
    files = list_source_files(str(data))
    assert [f.rel for f in files] == ["a.jsonl", "b.jsonl", "sub/c.jsonl"]
    assert files[0].path == str(data / "a.jsonl") and files[0].size == len('{"text": "alpha"}\n')
    assert [f.rel for f in list_source_files(f"{data}/**/*.jsonl", exclude=["sub/*"])] == ["a.jsonl", "b.jsonl"]
    assert [f.rel for f in list_source_files(f"{data}/*.jsonl", max_files=1)] == ["a.jsonl"]
    assert [f.rel for f in list_source_files(f"file://{data}/b.jsonl")] == ["b.jsonl"]
    with pytest.raises(SourceNotFound, match="no data files left"):
        list_source_files(str(data / ".hidden.jsonl"))


def test_is_remote():
    assert is_remote("https://example.com/a.jsonl") and is_remote("gs://b/x") and is_remote("memory://x")
    assert is_remote("s3://bucket/key")
    assert not is_remote("/data/x.jsonl") and not is_remote("data/*.jsonl") and not is_remote("file:///x")


def test_example_manifest_is_valid():
    path = REPO / "examples" / "sources.yaml"
    assert validate_manifest(path) == []
    m = load_manifest(path)
    assert m.sources and all(not s.remote for s in m.sources)
    assert os.path.isabs(m.prefix)


def test_sections_are_the_stage_configs():
    """Every section of the example is the config object its stage runs with (no mirrored specs)."""
    from datakit.dedup.config import DedupConfig
    from datakit.dedup.decontaminate import DecontamConfig
    from datakit.export.config import ExportConfig
    from datakit.mix.config import MixtureConfig
    from datakit.normalize.config import NormalizeConfig
    from datakit.classify.config import ClassifierConfig
    from datakit.quality.config import LineDedupConfig, PiiConfig, QualityConfig
    from datakit.quality.takedown import TakedownConfig
    from datakit.stages.registry import sections
    from datakit.tokenize.config import TokenizeConfig
    from datakit.train.config import TrainConfig

    m = load_manifest(REPO / "examples" / "sources.yaml")
    assert {s.key: s.config for s in sections()} == {
        "normalize": NormalizeConfig, "dedup": DedupConfig, "decontaminate": DecontamConfig,
        "tokenize": TokenizeConfig, "train": TrainConfig, "quality": QualityConfig, "line_dedup": LineDedupConfig,
        "pii": PiiConfig, "mixture": MixtureConfig, "quality_classifier": ClassifierConfig, "export": ExportConfig,
        "takedown": TakedownConfig}
    for s in sections():
        assert type(m.sections[s.key]) is s.config
    m.train.validate()
    assert (m.train.steps, m.train.learning_rate, m.train.warmup_steps, m.train.model.qk_norm) == (50, 0.003, 5, True)