"""datakit's glob rule (core/walk.glob_regex) matches exactly the paths fsspec's glob_translate matches:
on the patterns sources use, and on a seeded sweep of random patterns and paths over glob's special
characters (a property test without a framework: the same 4,000 cases every run)."""

from __future__ import annotations

import random
import re

import pytest
from fsspec.utils import glob_translate

from datakit.core.walk import glob_matcher, glob_regex

PATHS = ["data/a.jsonl", "data/a.jsonl.zst", "data/sub/b.jsonl", "data/sub/deeper/c.jsonl", "data/.hidden.jsonl",
         "data/", "data", "other/a.jsonl", "data/part-00001.parquet", "data/part-0000x.parquet", "data/[x].txt",
         "data/x.txt", "data/a b.txt", "data/sub/", "/abs/data/a.jsonl", "data/a.jsonl/extra"]
PATTERNS = ["data/*.jsonl", "data/*.jsonl*", "data/**", "data/**/*.jsonl", "data/*/*.jsonl", "**/*.jsonl", "data/*",
            "data/part-0000?.parquet", "data/part-[0-9]*.parquet", "data/part-[!0-9]*.parquet", "data/[[]x].txt",
            "data/[x].txt", "data/*.[jt]*", "/abs/**/a.jsonl", "*/a.jsonl", "data/**/", "data/[!]x].txt", "data/a b.txt"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_patterns_sources_use_match_what_fsspec_matches(pattern):
    theirs = re.compile(glob_translate(pattern))
    mine = glob_matcher(pattern)
    for path in PATHS:
        assert mine(path) == (theirs.match(path) is not None), (pattern, path)


def test_random_patterns_match_what_fsspec_matches():
    rng = random.Random(7)
    pattern_chars = ["a", "b", ".", "*", "?", "/", "[", "]", "!", "**"]
    path_chars = ["a", "b", ".", "/", "[", "]", "!"]
    checked = 0
    for _ in range(400):
        pattern = "".join(rng.choice(pattern_chars) for _ in range(rng.randint(1, 8)))
        try:
            theirs = re.compile(glob_translate(pattern))
        except (ValueError, re.error):
            with pytest.raises(ValueError):
                glob_regex(pattern)
            continue
        mine = glob_matcher(pattern)
        for _ in range(10):
            path = "".join(rng.choice(path_chars) for _ in range(rng.randint(0, 8)))
            assert mine(path) == (theirs.match(path) is not None), (pattern, path)
            checked += 1
    assert checked > 2000


def test_a_double_star_inside_a_name_is_refused_with_the_pattern_named():
    with pytest.raises(ValueError, match=r"data/a\*\*b"):
        glob_regex("data/a**b")
