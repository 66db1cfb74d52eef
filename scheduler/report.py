"""What a build shows its reader: a timeline of the predicted schedule (SVG) and a short Markdown report."""
from __future__ import annotations

import colorsys
import hashlib
from html import escape
from typing import Any

from vdevice.program import Program, Run

from .simulate import veu_ends

ROW_H, LEFT, WIDTH, TOP = 6, 60, 1400, 40
MAX_RECTS = 40000  # above this, consecutive rTasks of one op on a vEU are drawn as one box


def colour(name: str) -> str:
    """A stable, distinct-enough colour per operator (hashed hue)."""
    h = int(hashlib.md5(name.encode()).hexdigest()[:6], 16) / 0xFFFFFF
    r, g, b = colorsys.hls_to_rgb(h, 0.55, 0.65)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def schedule_boxes(plan: Any, programs: list[Program], barrier_us: float) -> list[tuple[int, int, float, float, str]]:
    """(program, vEU, start µs, end µs, op node) of every rTask, programs back to back in predicted time."""
    boxes, t0 = [], 0.0
    for pi, prog in enumerate(programs):
        dur = lambda op: plan.ops[op].rtask_us  # noqa: E731
        ends = veu_ends(prog, dur, barrier_us)
        for v, instrs in enumerate(prog.veus):
            runs = [i for i in instrs if isinstance(i, Run)]
            for instr, end in zip(runs, ends[v]):
                d = dur(instr.task.op)
                boxes.append((pi, v, t0 + end - d, t0 + end, plan.ops[instr.task.op].node))
        t0 += plan.program_us[pi] if pi < len(plan.program_us) else max((e[-1] for e in ends if e), default=0.0)
    return boxes


def _merge(boxes: list[tuple[int, int, float, float, str]]) -> list[tuple[int, int, float, float, str]]:
    """Join touching boxes of the same op on the same vEU (keeps big schedules drawable)."""
    out: list[list] = []
    for b in sorted(boxes, key=lambda b: (b[1], b[2])):
        if out and out[-1][1] == b[1] and out[-1][4] == b[4] and b[2] - out[-1][3] < 1e-9:
            out[-1][3] = b[3]
        else:
            out.append(list(b))
    return [tuple(b) for b in out]


def timeline_svg(plan: Any, programs: list[Program], barrier_us: float) -> str:
    """vEUs (rows) x predicted time (columns), one colour per operator; hover a box for its op and times."""
    boxes = schedule_boxes(plan, programs, barrier_us)
    if len(boxes) > MAX_RECTS:
        boxes = _merge(boxes)
    num_veus = max((p.num_veus for p in programs), default=1)
    span = max((b[3] for b in boxes), default=1.0) or 1.0
    scale = (WIDTH - LEFT - 10) / span
    height = TOP + num_veus * ROW_H + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" '
             f'font-size="11">',
             f'<text x="{LEFT}" y="16">{escape(plan.policy)}: {len(programs)} rProgram(s), {num_veus} vEUs, '
             f'predicted {plan.predicted_us:.1f} us (boxes = rTasks, colour = operator)</text>']
    starts, t = [], 0.0
    for us in plan.program_us:
        starts.append(t)
        t += us
    for s in starts[1:]:
        x = LEFT + s * scale
        parts.append(f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{height - 26}" stroke="#000" '
                     f'stroke-dasharray="3,2"/>')
    for _, v, a, b, node in boxes:
        x, w = LEFT + a * scale, max((b - a) * scale, 0.5)
        parts.append(f'<rect x="{x:.2f}" y="{TOP + v * ROW_H}" width="{w:.2f}" height="{ROW_H - 1}" '
                     f'fill="{colour(node)}"><title>{escape(node)} {a:.2f}-{b:.2f} us</title></rect>')
    parts.append(f'<text x="4" y="{TOP + 8}">vEU 0</text>')
    parts.append(f'<text x="4" y="{TOP + num_veus * ROW_H}">vEU {num_veus - 1}</text>')
    for k in range(6):
        us = span * k / 5
        parts.append(f'<text x="{LEFT + us * scale:.1f}" y="{height - 10}">{us:.1f} us</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)


def render_report(manifest: Any, plan: Any, workload: Any) -> str:
    """report.md: what was built, how it is scheduled, what each node runs, and the build's notes."""
    s = manifest.stats
    lines = [f"# rammer build of `{manifest.model}`", "",
             f"- target {manifest.target}, policy {manifest.policy}, {manifest.num_veus} vEUs",
             f"- {s['operators']} operators, {s['launches']} launches, {s['rtasks']} rTasks, {s['programs']} "
             f"rProgram(s), {s['barrier_rtasks']} barrier-rTasks",
             f"- predicted time {s['predicted_us']:.1f} us (per program: "
             f"{', '.join(f'{u:.1f}' for u in plan.program_us)}); vEUs busy {s.get('predicted_busy_pct', 0):.1f}% "
             "of the predicted time",
             *[f"- the same launches {name}: predicted {us:.1f} us (rammer {us / max(s['predicted_us'], 1e-9):.2f}x "
               "faster)" for name, us in plan.baselines_us.items()],
             f"- {s.get('profiler', plan.profiler)}",
             f"- build time {s.get('build_s', 0):.1f} s: "
             + ", ".join(f"{k} {v:.1f} s" for k, v in s.get("step_s", {}).items()),
             "", "## Operators", "", "| node | op | rKernel variant | launches | rTasks | why |", "|---|---|---|---|---|---|"]
    per_node: dict[str, list] = {}
    for op in plan.ops:
        per_node.setdefault(op.node, []).append(op)
    for spec in workload.ops:
        ops = per_node.get(spec.name, [])
        choice = plan.choices.get(spec.name)
        lines.append(f"| {spec.name} | {spec.op_type} | {choice.variant if choice else '-'} | {len(ops)} | "
                     f"{sum(o.rtasks for o in ops)} | {choice.why if choice else ''} |")
    if plan.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in plan.notes]
    lines += ["", "Files: `program.cu` (generated interpreter + rKernels), `rkernels/` (converted sources), "
              "`plan.json`, `programs.json`, `weights.npz`, `timeline.svg`, `build.json`, `model.onnx`.", ""]
    return "\n".join(lines)


__all__ = ["timeline_svg", "render_report", "schedule_boxes"]
