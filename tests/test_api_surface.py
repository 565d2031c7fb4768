"""The public surface speaks for itself: the API is listed, every Dataset method is documented, and
mistakes that would fail on every worker fail at plan time instead, naming what is wrong."""

from __future__ import annotations

import inspect
import threading

import pytest

import datakit
from datakit.shuffle import Dataset
from datakit.shuffle.plan import PlanError


def test_dir_and_help_list_the_public_api():
    assert set(datakit.__all__) <= set(dir(datakit))
    for name in datakit.__all__:
        assert getattr(datakit, name) is not None
        assert name in datakit.__doc__


def test_every_public_dataset_method_has_a_docstring():
    undocumented = [n for n, f in inspect.getmembers(Dataset)
                    if not n.startswith("_") and (callable(f) or isinstance(f, property)) and not inspect.getdoc(f)]
    assert undocumented == []


def test_an_unpicklable_closure_fails_at_plan_time_naming_what_it_captured():
    guard = threading.Lock()

    def keep(x):
        with guard:
            return x

    with pytest.raises(PlanError, match=r"map\(.*keep\): .*captures 'guard' \(lock\)"):
        Dataset.from_items([1, 2]).map(keep)
    with pytest.raises(PlanError, match=r"group_by reducer"):
        Dataset.from_items([1]).group_by(lambda x: x, lambda k, rows: guard)


def test_a_sink_pattern_without_shard_fails_at_plan_time():
    with pytest.raises(PlanError, match=r"has no \{shard\}"):
        Dataset.from_items([1]).write_parquet("out/all.parquet")
    with pytest.raises(PlanError, match=r"has no \{shard\}"):
        Dataset.from_items([1]).write_jsonl("out/all.jsonl")
    Dataset.from_items([1]).write_jsonl("out/part-{shard}.jsonl")  # the right shape plans fine


def test_step_states_read_the_same_everywhere():
    from datakit.cli import state_word

    assert state_word({"state": "SUCCESS"}) == "succeeded"
    assert state_word({"state": "FAILED", "error": "ValueError: x"}) == "failed"
    assert state_word({"state": "FAILED", "error": "interrupted (KeyboardInterrupt)"}) == "interrupted"
    assert state_word({"state": "RUNNING", "lease": "live"}) == "running"
    assert state_word({"state": "RUNNING", "lease": "dead"}) == "interrupted"  # a crashed run
    assert state_word({"state": "MISSING"}) == "missing"
