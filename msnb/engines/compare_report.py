"""`msnb compare`'s result for CI: JUnit XML (one test case per request, grouped by model) and JSON, each row equal,
a documented difference (``msnb.engines.compare.documented``) or a difference that fails the check."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

from msnb.engines.compare import documented, undocumented


def outcome(row: tuple, strict: bool) -> tuple[str, str | None]:
    """(``equal`` | ``documented`` | ``differs``, what documents it or the difference)."""
    request, left, right, diff = row
    if diff is None:
        return "equal", None
    known = documented(request, left, right)
    return ("documented" if known and not strict else "differs"), (f"{known.says} ({diff})" if known else diff)


def as_json(rows: list, unserved: list[str], strict: bool) -> dict:
    """The whole check as one JSON object: ``ok``, the counts, each request's row and the archives not served on
    both engines."""
    items = []
    for row in rows:
        request, left, right, diff = row
        kind, why = outcome(row, strict)
        items.append(
            {
                "line": request.line,
                "model": request.model,
                "path": request.path,
                "stream": request.stream,
                "torchserve": left.status,
                "ray": right.status,
                "outcome": kind,
                "detail": why,
            }
        )
    counts = {kind: sum(item["outcome"] == kind for item in items) for kind in ("equal", "documented", "differs")}
    ok = not undocumented(rows, strict) and not unserved
    return {"ok": ok, "strict": strict, **counts, "not_served": unserved, "requests": items}


def junit_xml(rows: list, unserved: list[str], strict: bool) -> str:
    """JUnit XML: a test suite per model, a test case per request (a documented difference passes and says so in
    its system-out; with ``strict`` it fails), and a failing case for each archive not served on both engines."""
    suites = ElementTree.Element("testsuites", name="msnb compare")
    by_model: dict[str, ElementTree.Element] = {}
    for row in rows:
        request = row[0]
        suite = by_model.get(request.model)
        if suite is None:
            suite = by_model[request.model] = ElementTree.SubElement(suites, "testsuite", name=request.model)
        case = ElementTree.SubElement(
            suite, "testcase", classname=f"msnb.compare.{request.model}", name=request.label()
        )
        kind, why = outcome(row, strict)
        if kind == "differs":
            ElementTree.SubElement(case, "failure", message=why or "").text = why
        elif kind == "documented":
            ElementTree.SubElement(case, "system-out").text = f"documented difference: {why}"
    for name in unserved:
        suite = ElementTree.SubElement(suites, "testsuite", name=name)
        case = ElementTree.SubElement(suite, "testcase", classname=f"msnb.compare.{name}", name="served on both")
        ElementTree.SubElement(case, "failure", message=f"{name} was not served on both engines")
    for suite in suites:
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True)


def write(rows: list, unserved: list[str], strict: bool, junit: Path | None, json_path: Path | None) -> None:
    """The JUnit XML and JSON files asked for (None: not written)."""
    if junit is not None:
        Path(junit).write_text(junit_xml(rows, unserved, strict) + "\n")
    if json_path is not None:
        Path(json_path).write_text(json.dumps(as_json(rows, unserved, strict), indent=1) + "\n")
