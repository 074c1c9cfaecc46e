"""The bundled example is what today's capture writes: the README's figures are this file's, so a capture change
that does not re-capture it (and regenerate what is measured on it) fails here, not in a user's hands."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.cli.helpers import RESNET, ROOT, run  # noqa: E402


def test_the_bundled_resnet18_is_the_command_its_readme_names(tmp_path: Path) -> None:
    text = " ".join((ROOT / "examples" / "README.md").read_text().split())
    command = re.search(r"`hybrid capture (--model resnet-18 [^`]*) --out examples/resnet18-b32\.json`", text)
    assert command, "examples/README.md no longer names the command that writes resnet18-b32.json"
    out = tmp_path / "r18.json"
    r = run("capture", *command.group(1).split(), "--out", out)
    assert r.exit_code == 0, r.output
    fresh, bundled = json.loads(out.read_text()), json.loads(RESNET.read_text())
    for g in (fresh, bundled):   # the same pinned torch built for CUDA (2.13.0+cu...) captures the same graph
        g["capture"]["torch"] = g["capture"]["torch"].split("+")[0]
    assert fresh == bundled, ("examples/resnet18-b32.json differs from what its capture command writes today: "
                              "re-capture it, then regenerate the README's figures and results/arena_static_quick.md")
