"""Issue 30's hostile inputs (benchmarks/hostile.py): no traceback, no corrupted plan accepted, no invalid plan
written with exit 0, every case its expected exit status, and no deleted or duplicated event accepted."""
from __future__ import annotations

import pytest

from benchmarks import hostile


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return hostile.run_all(tmp_path_factory.mktemp("hostile"))


def test_every_hostile_case_has_its_expected_outcome(results):
    outcomes, edits = results
    wrong = [f"{o.case.name}: expected {o.case.expect}, got {o.exit_code}{' (traceback)' if o.traceback else ''}: "
             f"{o.first_line}" for o in outcomes if not o.as_expected or o.invalid_written]
    assert not wrong, "\n".join(wrong)
    c = hostile.counts(outcomes, edits)
    assert c["tracebacks"] == c["corrupted plans accepted"] == c["invalid plans written with exit 0"] == 0
    assert c["cases"] >= 100 and edits[0] >= 100 and edits[1] == 0


def test_refusals_are_one_line_naming_the_field(results):
    outcomes, _ = results
    for o in outcomes:
        if o.case.expect == hostile.REFUSED:
            assert o.first_line.startswith("error: "), o.case.name
    by_name = {o.case.name: o for o in outcomes}
    assert "tensors[0].bytes" in by_name["info: graph tensors.0.bytes = nan"].first_line
    assert "device.transfer_latency_s" in by_name[
        "validate: plan device.transfer_latency_s NaN, every copy zero-length"].first_line
    assert "--memory" in by_name["info --memory 1e400GiB"].first_line
    assert "nested too deeply" in by_name["validate: plan nested 100000 deep"].first_line
