"""The guide's sample report is what `mnemostore conformance memory://` prints today (suite version,
clause counts, skip reasons): a new clause or version fails here until the sample is regenerated."""

from __future__ import annotations

from tests.conformance_sample import documented, real_output


def test_the_guides_sample_report_is_a_real_run_of_this_suite() -> None:
    assert documented() == real_output(), "regenerate it: python -m tests.conformance_sample"
