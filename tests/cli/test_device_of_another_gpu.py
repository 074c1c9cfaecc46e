"""A graph's op times are its capture device's: `--device` naming another card says it changes the memory and
the link, not them."""
from __future__ import annotations

from tests.cli.helpers import RESNET, run


def test_another_cards_preset_warns_that_op_times_stay_the_graphs() -> None:
    r = run("info", "--graph", RESNET, "--device", "h100-80gb")
    assert r.exit_code == 0
    warn = [ln for ln in r.output.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "v100-16gb" in warn[0] and "--device h100-80gb" in warn[0] and "capture it again" in warn[0]


def test_the_graphs_own_card_or_no_preset_says_nothing() -> None:
    for args in (("--device", "v100-16gb"), ("--memory", "64MiB"), ()):
        r = run("info", "--graph", RESNET, *args)
        assert r.exit_code == 0 and "warning:" not in r.output
