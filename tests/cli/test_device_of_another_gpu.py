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


def test_an_alignment_the_executor_does_not_run_is_said_when_planning() -> None:
    """Plans at 16 B validate (rule 5 allows any power of two) but `execute` refuses them: said up front."""
    r = run("info", "--graph", RESNET, "--memory", "64MiB", "--alignment", "16")
    assert r.exit_code == 0
    note = [ln for ln in r.output.splitlines() if ln.startswith("note: alignment")]
    assert len(note) == 1 and "16 B" in note[0] and "64 B" in note[0] and "hybrid execute" in note[0]
    r = run("info", "--graph", RESNET, "--memory", "64MiB", "--alignment", "64")
    assert r.exit_code == 0 and "note: alignment" not in r.output
