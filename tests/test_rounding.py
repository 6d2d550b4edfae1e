"""`rounded` against Python's `round`, bit for bit, where numpy's own rounding goes astray."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from rms_retrieval.nodes.helpers.rounding import rounded


def _python(values, decimals):
    return np.array([round(value, decimals) for value in values], dtype=float)


def _same_bits(a, b):
    return a.tobytes() == b.tobytes()


def test_a_value_whose_scaled_double_is_a_half_rounds_as_python_does_not_as_numpy():
    # 5e-11 lies just above 0.5e-10, but 5e-11 * 1e10 is exactly 0.5, which rint takes to 0.
    assert np.round(5e-11, 10) == 0.0 and round(5e-11, 10) == 1e-10
    assert rounded(np.array([5e-11]), 10)[0] == 1e-10


@given(st.lists(st.integers(min_value=-10**12, max_value=10**12), min_size=1, max_size=50),
       st.sampled_from([-1, 0, 1]), st.integers(min_value=0, max_value=12))
def test_values_next_to_a_half_round_as_python_rounds_them(wholes, step, decimals):
    values = [(w + 0.5) / 10 ** decimals for w in wholes]
    values = [math.nextafter(v, math.inf if step > 0 else -math.inf) if step else v for v in values]
    assert _same_bits(rounded(np.array(values), decimals), _python(values, decimals))


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=0, max_size=50),
       st.integers(min_value=0, max_value=22))
def test_any_float_rounds_as_python_rounds_it(values, decimals):
    expected = _python(values, decimals)
    got = rounded(np.array(values, dtype=float), decimals)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    assert _same_bits(got[~np.isnan(got)], expected[~np.isnan(expected)])


def test_scores_in_the_unit_interval_round_as_python_rounds_them():
    values = np.random.default_rng(7).random(100_000) ** 3
    assert _same_bits(rounded(values, 10), _python(values.tolist(), 10))


def test_decimals_beyond_an_exact_power_of_ten_are_refused():
    with pytest.raises(ValueError, match="between 0 and 22"):
        rounded(np.array([0.5]), 23)
