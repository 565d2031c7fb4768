"""The character-class table shingling builds from Unicode categories: the generated runs
(datakit/dedup/_unicode_categories.py, scripts/gen_unicode_categories.py) give exactly what
`unicodedata` gives one code point at a time, so loading them instead changes no shingle."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest

from datakit.dedup import _unicode_categories as gen
from datakit.dedup import shingles


def test_the_table_shingling_uses_is_unicodedatas_own():
    names, index = shingles._categories()
    want_names, want_index = shingles._computed_categories()
    assert names == want_names
    np.testing.assert_array_equal(index, want_index)


def test_the_generated_runs_are_this_pythons_unicode_or_are_not_used():
    if gen.UNIDATA_VERSION != unicodedata.unidata_version:
        pytest.skip(f"the runs were generated from Unicode {gen.UNIDATA_VERSION}, this Python has "
                    f"{unicodedata.unidata_version}: shingling computes the table (regenerate them with "
                    "python scripts/gen_unicode_categories.py)")
    names, index = shingles._computed_categories()
    starts = np.asarray(gen.RUN_STARTS)
    assert gen.SIZE == len(index) and starts[0] == 0 and np.all(np.diff(starts) > 0)
    assert list(gen.CATEGORIES) == names
    # every run starts where the category changes, and only there
    np.testing.assert_array_equal(starts, np.concatenate([[0], np.flatnonzero(np.diff(index)) + 1]))
    np.testing.assert_array_equal(index[starts], gen.RUN_CATEGORIES)
