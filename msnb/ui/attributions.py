"""How an explanation looks: attributions as a bar chart (few features) or a heat strip (many), HTML and text."""

from __future__ import annotations

import html
import json
import math
from typing import Any

MAX_BARS = 32  # more features than this are drawn as a heat strip of cells, one per feature
BAR_PX = 160
TEXT_BAR = 24
POSITIVE, NEGATIVE = "#1b5e20", "#b71c1c"


def values(answer: Any) -> list[float] | None:
    """The attributions of an answer, flattened (row-major): its ``attributions`` field or the answer itself
    when it is a (nested) list of numbers; None when there is nothing numeric to draw."""
    data = answer.get("attributions") if isinstance(answer, dict) else answer
    flat: list[float] = []
    if not _flatten(data, flat) or not flat:
        return None
    return flat


def _flatten(data: Any, out: list[float]) -> bool:
    if isinstance(data, bool):
        return False
    if isinstance(data, (int, float)):
        out.append(float(data))
        return math.isfinite(float(data))
    if isinstance(data, list):
        return all(_flatten(v, out) for v in data)
    return False


def summary(answer: Any) -> str:
    """One line about how the attributions were computed (the default method's fields), or ''."""
    if not isinstance(answer, dict) or "method" not in answer:
        return ""
    parts = [str(answer["method"]).replace("_", " ")]
    for key in ("target", "n_steps", "baseline", "delta"):
        if answer.get(key) is not None:
            value = answer[key]
            parts.append(f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}")
    return " · ".join(parts)


def bars_html(answer: Any) -> str:
    """The attributions as HTML (bars, or a heat strip for many features); the JSON when not numeric."""
    numbers = values(answer)
    if numbers is None:
        return f"<pre>{html.escape(json.dumps(answer, indent=2, default=str))}</pre>"
    scale = max(abs(v) for v in numbers) or 1.0
    body = (
        _strip(numbers, scale) if len(numbers) > MAX_BARS else "".join(_bar(i, v, scale) for i, v in enumerate(numbers))
    )
    caption = html.escape(summary(answer))
    return f'<div class="msnb-attributions">{body}<div style="color:#555;font-size:90%">{caption}</div></div>'


def _bar(index: int, value: float, scale: float) -> str:
    width = round(BAR_PX * abs(value) / scale)
    colour = POSITIVE if value >= 0 else NEGATIVE
    return (
        f'<div style="display:flex;align-items:center;font-family:monospace;line-height:1.3">'
        f'<span style="width:4em;text-align:right">[{index}]</span>'
        f'<span style="display:inline-block;width:{BAR_PX}px;margin:0 6px">'
        f'<span style="display:inline-block;height:0.8em;width:{width}px;background:{colour}"></span></span>'
        f"<span>{value:+.4g}</span></div>"
    )


def _strip(numbers: list[float], scale: float) -> str:
    cells = []
    for i, value in enumerate(numbers):
        alpha = abs(value) / scale
        rgb = "27,94,32" if value >= 0 else "183,28,28"
        cells.append(
            f'<span title="[{i}] {value:+.4g}" style="display:inline-block;width:6px;height:18px;'
            f'background:rgba({rgb},{alpha:.3f})"></span>'
        )
    return f'<div style="line-height:0">{"".join(cells)}</div>'


def bars_text(answer: Any) -> str:
    """The attributions as text bars, one line per feature (the first ``MAX_BARS``)."""
    numbers = values(answer)
    if numbers is None:
        return json.dumps(answer, indent=2, default=str)
    scale = max(abs(v) for v in numbers) or 1.0
    lines = [
        f"[{i:>3}] {v:+.4g}".ljust(18) + ("+" if v >= 0 else "-") * round(TEXT_BAR * abs(v) / scale)
        for i, v in enumerate(numbers[:MAX_BARS])
    ]
    if len(numbers) > MAX_BARS:
        lines.append(f"... {len(numbers) - MAX_BARS} more features")
    return "\n".join(filter(None, [*lines, summary(answer)]))


class Explanation:
    """An explanation answer as the notebook shows it: bars in HTML and text; ``answer`` holds the data."""

    def __init__(self, answer: Any):
        self.answer = answer

    @property
    def attributions(self) -> list[float] | None:
        return values(self.answer)

    def _repr_html_(self) -> str:
        return bars_html(self.answer)

    def __repr__(self) -> str:
        return bars_text(self.answer)
