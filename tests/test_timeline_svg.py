"""timeline.svg read back as XML: every vEU row is labelled (one by one, or in groups whose counts add up to the
vEUs), both axes have titles, every op type has its own clearly different colour, no text runs past the picture,
and a CPU build quotes no time (its report.md neither)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from scheduler.pipeline import load_workload, plan_workload
from scheduler.profiler import H100, Profiler
from scheduler.report import PALETTE, palette, timeline_svg

SVG = "{http://www.w3.org/2000/svg}"
CHAR_W = 6.5  # px per character at font-size 11, an upper bound for the sans-serif digits and letters used


def planned_svg(model: str, veus: int, target: str) -> ET.Element:
    """The timeline of a zoo model planned on `veus` vEUs (no conversion: the SVG needs only the plan)."""
    from rammer.zoo import generate
    prof = Profiler(H100, veus)
    graph, workload = load_workload(generate(model, small=True), target=target)
    sch = plan_workload(graph, workload, "wavefront", prof, num_veus=veus)
    return ET.fromstring(timeline_svg(sch.plan, sch.plan.programs, prof.barrier_cost_us, target))


def texts(root: ET.Element, cls: str | None = None) -> list[ET.Element]:
    return [t for t in root.iter(f"{SVG}text") if cls is None or t.get("class") == cls]


def rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[k:k + 2], 16) for k in (1, 3, 5)], dtype=float)


@pytest.mark.parametrize("veus", [3, 8, 40, 132])
def test_every_veu_row_is_labelled(veus: int) -> None:
    root = planned_svg("resnext", veus, "gpu")
    labels = [t.text or "" for t in texts(root, "row-label")]
    covered: list[int] = []
    for label in labels:
        one = re.fullmatch(r"vEU (\d+)", label)
        group = re.fullmatch(r"vEUs (\d+)-(\d+) \((\d+)\)", label)
        assert one or group, label
        if one:
            covered.append(int(one.group(1)))
        else:
            first, last, count = (int(g) for g in group.groups())
            assert count == last - first + 1
            covered += range(first, last + 1)
    assert covered == list(range(veus))
    ys = [float(t.get("y")) for t in texts(root, "row-label")]
    assert all(b - a >= 10 for a, b in zip(ys, ys[1:])), "row labels overlap"


def test_axes_have_titles_and_the_last_tick_stays_inside() -> None:
    root = planned_svg("resnext", 8, "gpu")
    width = float(root.get("width"))
    titles = [t.text for t in texts(root, "axis-title")]
    assert len(titles) == 2 and any("time" in t for t in titles) and any("vEU" in t for t in titles)
    ticks = texts(root, "tick")
    last = ticks[-1]
    assert last.get("text-anchor") == "end" and float(last.get("x")) <= width
    for t in texts(root):  # every text ends inside the picture, whatever its anchor
        x, n = float(t.get("x")), len(t.text or "") * CHAR_W
        start = {"start": x, "middle": x - n / 2, "end": x - n}[t.get("text-anchor", "start")]
        if t.get("transform") is None:
            assert start >= 0 and start + n <= width + 1, t.text


def test_op_types_get_clearly_different_colours() -> None:
    root = planned_svg("resnext", 8, "gpu")
    legend = [r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("class") == "legend"]
    assert len(legend) >= 3 and len(set(legend)) == len(legend)
    boxes = {r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("class") == "rtask"}
    assert boxes <= set(legend)
    closest = min(np.linalg.norm(rgb(a) - rgb(b)) for i, a in enumerate(legend) for b in legend[i + 1:])
    assert closest > 40, f"two op types' colours are {closest:.0f} apart in RGB"


def test_palette_stays_distinct_past_its_length() -> None:
    kinds = [f"Op{i}" for i in range(len(PALETTE) * 2 + 3)]
    colours = palette(kinds)
    assert len(set(colours.values())) == len(kinds)
    assert [colours[k] for k in kinds[:len(PALETTE)]] == list(PALETTE)


def test_cpu_build_quotes_no_time(tmp_path: Path) -> None:
    """A --target cpu build: no 'us' in timeline.svg, report.md or the profiler line, and the profiler says the
    CPU runs the build (it used to print `device=NVIDIA H100`)."""
    import onnx

    from rammer.build import build_model
    from rammer.zoo import generate
    onnx.save(generate("lstm-tc", small=True), tmp_path / "m.onnx")
    built = build_model(tmp_path / "m.onnx", tmp_path / "out", target="cpu", quiet=True, profile="model")
    us = re.compile(r"\d(?:\.\d+)? ?(?:us|µs)\b")
    svg = (tmp_path / "out" / "timeline.svg").read_text()
    assert not us.search(svg) and "no time is predicted" in svg
    report = (tmp_path / "out" / "report.md").read_text()
    assert not us.search(report), us.search(report)
    assert "target cpu" in built.manifest.stats["profiler"] and "barrier=" not in built.manifest.stats["profiler"]
    trace = (tmp_path / "out" / "timeline.json").read_text()
    assert '"source": "predicted"' not in trace and '"source": "planned order"' in trace
