"""docs/formats.md's example graph and plan are what a user copies first: they load, and the plan is valid for
the graph (only the sha256 placeholder, which names a file the doc has not got, is left out)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.validator import validate

DOC = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def _examples() -> tuple[dict, dict]:
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", DOC.read_text(), re.S)]
    graph = next(b for b in blocks if b.get("format") == "hybrid-graph/1")
    plan = next(b for b in blocks if b.get("format") == "hybrid-plan/1")
    return graph, plan


def test_the_docs_example_plan_is_valid_for_its_example_graph() -> None:
    g_doc, p_doc = _examples()
    g = Graph.from_json(g_doc)
    p_doc["graph_sha256"] = ""
    p = Plan.from_json(p_doc)
    report = validate(g, p, all=True)
    assert report.valid, report.violations
    assert report.peak_bytes == p_doc["metrics"]["peak_bytes"]
