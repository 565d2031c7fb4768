"""The tokenizer pin (datakit/tokenize/pin.py, stages/tokenizer.py) through the pipeline, on real text: once
trained under a prefix, a tokenizer is kept when the data changes (so the caches of unchanged sources are
reused), `retrain: true` trains the from-scratch tokenizer and rebuilds the caches, a changed vocabulary
size is another pin, gc never takes a pinned tokenizer, and the dry run says which tokenizer is pinned."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import sysconfig
from pathlib import Path

import pytest
from click.testing import CliRunner

from datakit import pipeline
from datakit.cli import main
from datakit.stages.tokenizer import VERSION
from datakit.steps.gc import collect_garbage
from datakit.tokenize.pin import PinError, pin_name, read_pin, write_pin

STDLIB = sysconfig.get_paths()["stdlib"]


def _data(tmp_path) -> None:
    lic, code = tmp_path / "licenses", tmp_path / "code"
    lic.mkdir()
    code.mkdir()
    for name in ("Apache-2.0", "GPL-3", "MPL-2.0"):
        shutil.copy(f"/usr/share/common-licenses/{name}", lic / f"{name}.txt")
    for path in sorted(glob.glob(f"{STDLIB}/json/*.py")):
        shutil.copy(path, code / os.path.basename(path))


def _change_data(tmp_path) -> None:
    """Edit one file of `code` and add a source of the email package's modules."""
    target = tmp_path / "code" / "decoder.py"
    target.write_text(target.read_text() + "\n# an edited line\n")
    more = tmp_path / "more"
    more.mkdir()
    for path in sorted(glob.glob(f"{STDLIB}/email/*.py"))[:8]:
        shutil.copy(path, more / os.path.basename(path))


def _manifest_dict(tmp_path, prefix: str, vocab: int = 300, retrain: bool = False) -> dict:
    sources = [{"name": "licenses", "uri": f"{tmp_path}/licenses/*.txt", "format": "text"},
               {"name": "code", "uri": f"{tmp_path}/code/*.py", "format": "text"}]
    if (tmp_path / "more").exists():
        sources.append({"name": "more", "uri": f"{tmp_path}/more/*.py", "format": "text"})
    tokenize = {"vocab_size": vocab, **({"retrain": True} if retrain else {})}
    return {"prefix": str(tmp_path / prefix), "sources": sources, "normalize": {"target_shard_bytes": 20_000},
            "dedup": {"fuzzy": False}, "tokenize": tokenize}


def _run(tmp_path, prefix: str = "p", **kw):
    m = pipeline.manifest_from_dict(_manifest_dict(tmp_path, prefix, **kw))
    only = [s.name for s in pipeline.build_steps(m) if s.stage != "train"]
    s = pipeline.run(m, workers=2, only=only)
    assert s.ok, s.to_dict()
    return s


def _step(summary, name: str) -> dict:
    return next(s for s in summary.to_dict()["steps"] if s["name"] == name)


def _tokenizer_sha(summary) -> str:
    with open(os.path.join(_step(summary, "tokenizer")["output"], "tokenizer.json"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _cache_files(summary, name: str) -> dict[str, str]:
    d = _step(summary, name)["output"]
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "*", "shard-*"))):
        with open(path, "rb") as f:
            out[os.path.relpath(path, d)] = hashlib.sha256(f.read()).hexdigest()
    assert out, d
    return out


def test_pinned_tokenizer_survives_a_data_change_and_retrain_is_explicit(tmp_path):
    _data(tmp_path)
    first = _run(tmp_path)
    sha = _tokenizer_sha(first)
    prefix = str(tmp_path / "p")
    pin = read_pin(prefix, pin_name(_config(tmp_path), VERSION))
    assert pin is not None and pin.sha256 == sha and pin.step == os.path.basename(_step(first, "tokenizer")["output"])

    _change_data(tmp_path)
    second = _run(tmp_path)
    assert _tokenizer_sha(second) == sha  # the pinned tokenizer, not one trained on the changed data
    assert _step(second, "tokenizer")["output"] != _step(first, "tokenizer")["output"]  # a copy step
    lic = _step(second, "tokenize-licenses")
    assert lic["status"] == "succeeded" and lic["counters"]["files/computed"] == 0, lic["counters"]
    assert lic["counters"]["files/reused"] >= 1
    assert _cache_files(second, "tokenize-licenses") == _cache_files(first, "tokenize-licenses")

    # gc removes the step dir that trained the pinned tokenizer; the pin holds the tokenizer itself
    plan = pipeline.build_plan(pipeline.manifest_from_dict(_manifest_dict(tmp_path, "p")), prefix)
    report = collect_garbage(plan.runnable, prefix)
    assert pin.step in report.removed
    assert read_pin(prefix, pin_name(_config(tmp_path), VERSION)).sha256 == sha

    # The one accepted difference: a fresh prefix trains on the final data. retrain gives exactly that.
    fresh = _run(tmp_path, "fresh")
    assert _tokenizer_sha(fresh) != sha
    retrained = _run(tmp_path, retrain=True)
    assert _tokenizer_sha(retrained) == _tokenizer_sha(fresh)
    lic = _step(retrained, "tokenize-licenses")
    assert lic["counters"]["files/reused"] == 0 and lic["counters"]["files/computed"] >= 1
    assert _cache_files(retrained, "tokenize-licenses") == _cache_files(fresh, "tokenize-licenses")
    assert read_pin(prefix, pin_name(_config(tmp_path), VERSION)).sha256 == _tokenizer_sha(fresh)  # moved

    # Without retrain again: the run that pinned it keeps its training step, so nothing rebuilds.
    again = pipeline.run(pipeline.manifest_from_dict(_manifest_dict(tmp_path, "p")), dry_run=True)
    assert _step(again, "tokenizer")["status"] == "would_skip"
    assert _step(again, "tokenize-licenses")["status"] == "would_skip"

    # Other training settings are another pin: a new tokenizer, the old pin kept.
    other = _run(tmp_path, vocab=320)
    assert _tokenizer_sha(other) not in (sha, _tokenizer_sha(fresh))
    assert read_pin(prefix, pin_name(_config(tmp_path, vocab=320), VERSION)).sha256 == _tokenizer_sha(other)
    assert read_pin(prefix, pin_name(_config(tmp_path), VERSION)).sha256 == _tokenizer_sha(fresh)


def _config(tmp_path, vocab: int = 300):
    return pipeline.manifest_from_dict(_manifest_dict(tmp_path, "p", vocab=vocab)).sections["tokenize"]


def test_the_dry_run_names_the_pin_and_how_to_retrain(tmp_path):
    _data(tmp_path)
    manifest = tmp_path / "sources.yaml"
    manifest.write_text(json.dumps(_manifest_dict(tmp_path, "p")))  # JSON is YAML
    res = CliRunner().invoke(main, ["run", str(manifest), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "note: tokenizer: none pinned yet: trained on the current data, then pinned for later runs" in res.output
    first = _run(tmp_path)
    res = CliRunner().invoke(main, ["run", str(manifest), "--dry-run"])
    tokenizer_dir = os.path.basename(_step(first, "tokenizer")["output"])
    assert (f"note: tokenizer: pinned {_tokenizer_sha(first)[:12]} from {tokenizer_dir} (" in res.output
            and "retrain with `tokenize: {retrain: true}`" in res.output), res.output


def test_an_earlier_trainers_pin_is_said_not_used(tmp_path, caplog):
    """A prefix pinned by an earlier version of the trainer (say, before the split pattern changed): the
    new trainer trains anew (a pin never keeps an old tokenizer silently, nor is one dropped silently):
    the dry run and the run say so, that every cache is rebuilt, and how to keep the old tokenizer."""
    _data(tmp_path)
    prefix = str(tmp_path / "p")
    old = Path("/usr/share/common-licenses/GPL-3").read_bytes()  # any bytes: the old pin is never loaded
    earlier = str(int(VERSION) - 1)
    assert write_pin(prefix, pin_name(_config(tmp_path), earlier), old, "tokenizer-0123456789", replace=False)
    kept = read_pin(prefix, pin_name(_config(tmp_path), earlier))
    manifest = tmp_path / "sources.yaml"
    manifest.write_text(json.dumps(_manifest_dict(tmp_path, "p")))  # JSON is YAML
    res = CliRunner().invoke(main, ["run", str(manifest), "--dry-run"])
    said = (f"was trained by tokenizer stage version {earlier}, and this datakit's trainer is version {VERSION}: "
            "a new tokenizer is trained")
    assert said in res.output and f"tokenize: {{tokenizer: {kept.path}}}" in res.output, res.output
    with caplog.at_level("WARNING", logger="datakit.stages.tokenizer"):
        first = _run(tmp_path)
    assert any(said in r.getMessage() for r in caplog.records), caplog.text
    assert _tokenizer_sha(first) != hashlib.sha256(old).hexdigest()
    assert read_pin(prefix, pin_name(_config(tmp_path), VERSION)).sha256 == _tokenizer_sha(first)
    assert read_pin(prefix, pin_name(_config(tmp_path), earlier)).sha256 == kept.sha256  # left as it was
    res = CliRunner().invoke(main, ["run", str(manifest), "--dry-run"])
    assert f"note: tokenizer: pinned {_tokenizer_sha(first)[:12]}" in res.output and said not in res.output


def test_a_first_pin_is_kept_a_retrain_moves_it_and_a_damaged_pin_is_refused(tmp_path):
    """The first run to pin wins (two runs training at once leave one complete pin); a retrain replaces
    it; a pin whose tokenizer changed or whose record is unreadable stops the plan, saying what to do."""
    prefix = str(tmp_path / "p")
    a = Path("/usr/share/common-licenses/GPL-3").read_bytes()  # any bytes: the pin checks content only
    b = Path("/usr/share/common-licenses/Apache-2.0").read_bytes()
    assert read_pin(prefix, "s") is None
    assert write_pin(prefix, "s", a, "tokenizer-aaaaaaaaaa", replace=False)
    assert not write_pin(prefix, "s", b, "tokenizer-bbbbbbbbbb", replace=False)
    pin = read_pin(prefix, "s")
    assert (pin.sha256, pin.step) == (hashlib.sha256(a).hexdigest(), "tokenizer-aaaaaaaaaa")
    assert write_pin(prefix, "s", b, "tokenizer-bbbbbbbbbb", replace=True)
    assert read_pin(prefix, "s").sha256 == hashlib.sha256(b).hexdigest()
    with open(read_pin(prefix, "s").path, "r+b") as f:  # same size, one byte changed
        f.write(b"X")
    with pytest.raises(PinError, match="no longer has sha256.*retrain: true"):
        read_pin(prefix, "s")
    (tmp_path / "p" / ".datakit" / "tokenizer-pins" / "s.json").write_text("{not json")
    with pytest.raises(PinError, match="unreadable.*delete"):
        read_pin(prefix, "s")
