"""What a build shows its reader: the schedule's timeline as a Perfetto / Chrome trace (timeline.json) and as an
SVG preview with a colour legend (timeline.svg), and a short Markdown report (report.md)."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from html import escape
from typing import Any, Iterable, Literal, Sequence

import numpy as np
from kernel_corpus.bindings import In
from toolchain.jsonio import dumps
from vdevice.program import Program, Wait

from .plan import StepKind
from .simulate import Barrier, StepCosts, simulate

LEFT, RIGHT, WIDTH, TOP = 110, 40, 1400, 40  # px: room for the row labels and the last tick's text
MAX_RECTS = 40000  # above this, consecutive rTasks of one op type on a vEU are drawn as one box
LEGEND_COLUMNS = 6
SliceKind = Literal["rtask", "wait", "library"]
LABEL_ROW_H, MIN_ROW_H = 12, 6  # a row tall enough for its own label; the smallest row (many vEUs)
MAX_ROWS_LABELLED = 40          # above this many vEUs, rows are labelled in groups ("vEUs 8-15 (8)")
# Kenneth Kelly's 22 colours of maximum contrast (1965), white and black left out: neighbours in a legend differ in
# hue and lightness, unlike hashed hues (Add and FusedConv came out nearly the same)
PALETTE = ("#f3c300", "#875692", "#f38400", "#a1caf1", "#be0032", "#c2b280", "#848482", "#008856", "#e68fac",
           "#0067a5", "#f99379", "#604e97", "#f6a600", "#b3446c", "#dcd300", "#882d17", "#8db600", "#654522",
           "#e25822", "#2b3d26")


def palette(kinds: list[str]) -> dict[str, str]:
    """One colour per kind, in the legend's order: all distinct up to len(PALETTE) kinds; beyond that the palette
    repeats, lighter on each round, so that every kind still has its own swatch."""
    out = {}
    for i, kind in enumerate(kinds):
        r, g, b = (int(PALETTE[i % len(PALETTE)][k:k + 2], 16) for k in (1, 3, 5))
        mix = 1 - 0.6 ** (i // len(PALETTE))  # 0 on the first round: the palette as it is
        r, g, b = (int(c + (255 - c) * mix) for c in (r, g, b))
        out[kind] = f"#{r:02x}{g:02x}{b:02x}"
    return out


def schedule_source(target: str) -> str:
    """What the timeline's times are: predicted GPU microseconds, or for a CPU build only the cost model's order."""
    return "predicted" if target == "gpu" else "planned order"


@dataclass(frozen=True)
class Slice:
    """One timed thing in predicted µs: a vEU's rTask (`kind` "rtask") or barrier-rTask wait ("wait"), or a library
    call between the rPrograms ("library")."""

    program: int
    veu: int
    start: float
    end: float
    name: str                  # the node (rTask) or "wait"
    kind: SliceKind = "rtask"
    args: dict = field(default_factory=dict)  # op type, variant, rtask id, launch (rTasks); awaited tasks (waits)


def schedule_slices(plan: Any, programs: Sequence[Program], barrier_us: Barrier | StepCosts) -> list[Slice]:
    """Every rTask, every barrier wait, every library call and launch segment of the plan in predicted time, steps
    back to back (library calls and launch segments as slices of their own process, after the rPrograms' ones).
    `barrier_us`: the simulation's costs (the plan's rTask times replace their durations) or a barrier cost
    alone."""
    out, t0 = [], 0.0
    for step in plan.steps:
        if step.kind == StepKind.LIBRARY:
            call = plan.calls[step.index]
            out.append(Slice(len(programs), 0, t0, t0 + call.us, call.node, "library",
                             {"op": call.op_type, "function": call.function, "backend": call.backend}))
            t0 += call.us
            continue
        if step.kind == StepKind.LAUNCHES:
            group = plan.launches[step.index]
            nodes = list(dict.fromkeys(plan.ops[i].node for i in group.ops))
            out.append(Slice(len(programs), 0, t0, t0 + group.us, f"launch segment {step.index}", "library",
                             {"op": "launch segment", "function": f"{len(group.ops)} legacy launches",
                              "backend": "launch", "nodes": nodes}))
            t0 += group.us
            continue
        pi = step.index
        prog = programs[pi]
        dur = lambda op: plan.ops[op].rtask_us  # noqa: E731
        costs = (dataclasses.replace(barrier_us, duration=dur) if isinstance(barrier_us, StepCosts)
                 else StepCosts(dur, barrier_us))
        timeline = simulate(prog, costs)
        ends = timeline.ends
        for v, instrs in enumerate(prog.veus):
            runs, free, waiting = iter(zip(timeline.starts[v], ends[v])), 0.0, None
            for instr in instrs:
                if isinstance(instr, Wait):
                    waiting = waiting or (free, instr.targets)
                    continue
                start, end = next(runs)
                if waiting is not None and start > waiting[0] + 1e-9:
                    awaits = ", ".join(f"vEU {u} task {k}" for u, k in waiting[1])  # one string: compact
                    out.append(Slice(pi, v, t0 + waiting[0], t0 + start, "wait", "wait", {"awaits": awaits}))
                waiting = None
                op = plan.ops[instr.task.op]
                out.append(Slice(pi, v, t0 + start, t0 + end, op.node, "rtask",
                                 {"op": op.op_type, "variant": op.variant, "rtask": instr.task.rtask,
                                  "launch": op.launch_index}))
                free = end
        t0 += plan.program_us[pi] if pi < len(plan.program_us) else max((e[-1] for e in ends if e), default=0.0)
    return out


def schedule_boxes(plan: Any, programs: Sequence[Program], barrier_us: Barrier | StepCosts
                   ) -> list[tuple[int, int, float, float, str]]:
    """(program, vEU, start µs, end µs, op type) of every rTask, programs back to back in predicted time."""
    return [(s.program, s.veu, s.start, s.end, s.args["op"])
            for s in schedule_slices(plan, programs, barrier_us) if s.kind == "rtask"]


def trace_events(slices: Iterable[Slice], source: str = "predicted", pid_base: int = 0) -> list[dict]:
    """Trace-event format (Perfetto, chrome://tracing): a process per rProgram, a thread per vEU, one complete
    ("X") event per slice; `source` labels the processes ("predicted" here, "measured" for GPU timestamps)."""
    events: list[dict] = []
    named: set[tuple[int, int]] = set()
    for s in slices:
        pid = pid_base + s.program
        if (pid, -1) not in named:
            named.add((pid, -1))
            what = f"library calls ({source})" if s.kind == "library" else f"rProgram {s.program} ({source})"
            events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": what}})
            events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        if (pid, s.veu) not in named:
            named.add((pid, s.veu))
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": s.veu,
                           "args": {"name": "stream" if s.kind == "library" else f"vEU {s.veu}"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": s.veu,
                           "args": {"sort_index": s.veu}})
        events.append({"ph": "X", "name": s.name, "cat": s.kind, "pid": pid, "tid": s.veu, "ts": round(s.start, 4),
                       "dur": round(max(s.end - s.start, 0.0), 4), "args": dict(s.args, source=source)})
    return events


def timeline_trace(runs: dict[str, list[Slice]], meta: dict | None = None) -> str:
    """timeline.json: the slices of each source ("predicted", later "measured") side by side, as trace-event JSON."""
    events: list[dict] = []
    for k, (source, slices) in enumerate(runs.items()):
        events += trace_events(slices, source, pid_base=1000 * k)
    return dumps({"traceEvents": events, "displayTimeUnit": "ns", "otherData": meta or {}})


def _merge(boxes: list[tuple[int, int, float, float, str]]) -> list[tuple[int, int, float, float, str]]:
    """Join touching boxes of the same op type on the same vEU (keeps big schedules drawable)."""
    out: list[list] = []
    for b in sorted(boxes, key=lambda b: (b[1], b[2])):
        if out and out[-1][1] == b[1] and out[-1][4] == b[4] and b[2] - out[-1][3] < 1e-9:
            out[-1][3] = b[3]
        else:
            out.append(list(b))
    return [tuple(b) for b in out]


def row_labels(num_veus: int, row_h: int) -> list[tuple[float, str]]:
    """(y of the text, label) for the vEU rows: every row when there are few, else groups of consecutive rows
    with their count, so that every row is covered by a label."""
    if num_veus <= MAX_ROWS_LABELLED:
        return [(TOP + v * row_h + row_h - 2, f"vEU {v}") for v in range(num_veus)]
    group = max(-(-num_veus // 20), -(-12 // row_h))  # about 20 labels, each at least one text height apart
    out = []
    for first in range(0, num_veus, group):
        last = min(first + group, num_veus) - 1
        out.append((TOP + (first + last + 1) / 2 * row_h + 4, f"vEUs {first}-{last} ({last - first + 1})"))
    return out


def axis_ticks(span: float, count: int = 6) -> list[float]:
    """Tick positions from 0 to the span, ending exactly at the span (the last one is drawn right-aligned)."""
    return [span * k / (count - 1) for k in range(count)]


def call_label(c: Slice) -> str:
    """A step outside the rPrograms as the legend names it: 'library Conv', 'launch segment'."""
    return c.args["op"] if c.args.get("backend") == "launch" else f"library {c.args['op']}"


def timeline_svg(plan: Any, programs: Sequence[Program], barrier_us: Barrier | StepCosts, target: str = "gpu",
                 slices: list[Slice] | None = None) -> str:
    """vEUs (rows) x predicted time (columns), one colour per op type with a legend; hover a box for its times.
    The full detail (every rTask with its node, variant and rtask id) is in timeline.json. A CPU build's columns are
    the plan's order in cost-model units, labelled so: the emulator's run has no predicted time. `slices`: the
    schedule_slices already worked out, if they were."""
    slices = schedule_slices(plan, programs, barrier_us) if slices is None else slices
    boxes = [(sl.program, sl.veu, sl.start, sl.end, sl.args["op"]) for sl in slices if sl.kind == "rtask"]
    calls = [sl for sl in slices if sl.kind == "library"]
    if len(boxes) > MAX_RECTS:
        boxes = _merge(boxes)
    gpu = target == "gpu"
    unit = "us" if gpu else "u"
    num_veus = max((p.num_veus for p in programs), default=1)
    row_h = LABEL_ROW_H if num_veus <= MAX_ROWS_LABELLED else MIN_ROW_H
    span = max([b[3] for b in boxes] + [c.end for c in calls], default=1.0) or 1.0
    scale = (WIDTH - LEFT - RIGHT) / span
    kinds = sorted({b[4] for b in boxes} | {call_label(c) for c in calls})
    colours = palette(kinds)
    legend_rows = -(-len(kinds) // LEGEND_COLUMNS)
    rows_bottom = TOP + num_veus * row_h
    axis_y = rows_bottom + 16
    legend_top = axis_y + 26
    height = legend_top + legend_rows * 16 + 8
    what = (f"predicted {plan.predicted_us:.1f} us" if gpu else
            "target cpu: no time is predicted, columns are the plan's order in cost-model units (u)")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" '
             f'font-size="11">',
             f'<text x="{LEFT}" y="16">{escape(plan.policy)}: {len(programs)} rProgram(s), {num_veus} vEUs, '
             f'{what} (boxes = rTasks, colour = op type; full-height hatched boxes = library calls; detail in '
             f'timeline.json)</text>',
             '<defs><pattern id="lib" width="6" height="6" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="3" height="6" fill="#fff" fill-opacity="0.5"/></pattern>'
             '</defs>']
    starts, t = [], 0.0
    for step in plan.steps:
        starts.append(t)
        t += plan.step_us(step)
    for s in starts[1:]:
        x = LEFT + s * scale
        parts.append(f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{rows_bottom + 4}" '
                     f'stroke="#000" stroke-dasharray="3,2"/>')
    for _, v, a, b, kind in boxes:
        x, w = LEFT + a * scale, max((b - a) * scale, 0.5)
        parts.append(f'<rect class="rtask" x="{x:.2f}" y="{TOP + v * row_h}" width="{w:.2f}" height="{row_h - 1}" '
                     f'fill="{colours[kind]}"><title>{escape(kind)} {a:.2f}-{b:.2f} {unit}</title></rect>')
    for c in calls:  # a library call has the whole device: one box over every vEU row
        x, w, kind = LEFT + c.start * scale, max((c.end - c.start) * scale, 0.5), call_label(c)
        for fill in (colours[kind], "url(#lib)"):
            parts.append(f'<rect class="library" x="{x:.2f}" y="{TOP}" width="{w:.2f}" '
                         f'height="{num_veus * row_h - 1}" fill="{fill}"><title>{escape(c.name)}: {escape(kind)} '
                         f'({escape(c.args["function"])}) {c.start:.2f}-{c.end:.2f} {unit}</title></rect>')
    for y, label in row_labels(num_veus, row_h):
        parts.append(f'<text class="row-label" x="{LEFT - 6}" y="{y:.1f}" text-anchor="end">{label}</text>')
    parts.append(f'<line x1="{LEFT}" y1="{rows_bottom + 2}" x2="{WIDTH - RIGHT}" y2="{rows_bottom + 2}" '
                 f'stroke="#000"/>')
    ticks = axis_ticks(span)
    for k, us in enumerate(ticks):
        anchor = "start" if k == 0 else "end" if k == len(ticks) - 1 else "middle"
        parts.append(f'<text class="tick" x="{LEFT + us * scale:.1f}" y="{axis_y}" text-anchor="{anchor}">'
                     f'{us:.1f} {unit}</text>')
    x_title = "predicted time on the GPU (us, cost model or measured rTask times)" if gpu else \
        "plan order (cost-model units, u: not a time; a CPU build predicts none)"
    parts.append(f'<text class="axis-title" x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{axis_y + 15}" '
                 f'text-anchor="middle">{x_title}</text>')
    parts.append(f'<text class="axis-title" x="14" y="{(TOP + rows_bottom) / 2:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(TOP + rows_bottom) / 2:.0f})">vEU</text>')
    for i, kind in enumerate(kinds):
        x = LEFT + (i % LEGEND_COLUMNS) * (WIDTH - LEFT - RIGHT) / LEGEND_COLUMNS
        y = legend_top + (i // LEGEND_COLUMNS) * 16
        parts.append(f'<rect class="legend" x="{x:.1f}" y="{y}" width="10" height="10" fill="{colours[kind]}"/>'
                     f'<text x="{x + 14:.1f}" y="{y + 9}">{escape(kind)}</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)


def _prediction_lines(manifest: Any, plan: Any) -> list[str]:
    """The report's predicted times: the plan's, and each baseline's (scheduler/baselines.py), the strongest
    named."""
    s = manifest.stats
    strongest = s.get("strongest_baseline")
    return [f"- predicted time {s['predicted_us']:.1f} us (per program: "
            f"{', '.join(f'{u:.1f}' for u in plan.program_us)}); vEUs busy {s.get('predicted_busy_pct', 0):.1f}% "
            "of the predicted time",
            *[f"- baseline {name}: predicted {us:.1f} us (rammer {us / max(s['predicted_us'], 1e-9):.2f}x)"
              + (" — the strongest" if name == strongest else "") for name, us in plan.baselines_us.items()],
            *([f"- no baseline: {s['baselines_unavailable']}"] if s.get("baselines_unavailable") else [])]


def weight_bytes_read(plan: Any, graph: Any) -> int:
    """Bytes of weights (constant tensors) the plan's launches and library calls read from global memory in one
    inference: each weight a launch takes counts whole, except resident operands of a pinned launch, which count
    once, at the family's load (its readers find them in shared memory), and nothing for an unpinned load (it does
    nothing). docs/ARCHITECTURE.md §7."""
    def nbytes(name: str) -> int:
        t = graph.tensors[name]
        return t.size * np.dtype(t.dtype).itemsize

    total = 0
    for op in plan.ops:
        use = getattr(op.launch, "resident", None)
        for i in {a.index for a in op.launch.args if isinstance(a, In)}:
            name = op.inputs[i] if i < len(op.inputs) else ""
            if not name or not graph.is_constant(name):
                continue
            if use is not None and i in use.inputs and op.pinned != use.load:
                continue  # pinned readers use the region; an unpinned load does not run its copy
            total += nbytes(name)
    for call in plan.calls:
        total += sum(nbytes(n) for n in dict.fromkeys(call.inputs) if n and graph.is_constant(n))
    return total


def _weight_lines(s: dict) -> list[str]:
    """The weight traffic line: bytes read per inference against the model's own weights."""
    read, own = s["weight_bytes_read"], s["model_weight_bytes"]
    return [f"- weights read per inference {read / 1e6:.2f} MB, the model's weights {own / 1e6:.2f} MB "
            f"({read / max(1, own):.2f}x; {s.get('resident_families', 0)} resident families pinned)"]


def setup_line(setup: list) -> str:
    """The setup launches (tables and counters of a node's shape) the build runs once when it loads, by kernel."""
    kernels = sorted({op.launch.kernel for op in setup})
    return (f"- setup: {len(setup)} launch(es) of {', '.join(kernels)} run once when the build loads (what they "
            f"write depends on shapes alone), not in any step")


def render_report(manifest: Any, plan: Any, workload: Any) -> str:
    """report.md: what was built, how it is scheduled, what each node runs, and the build's notes."""
    s = manifest.stats
    lines = [f"# rammer build of `{manifest.model}`", "",
             f"- target {manifest.target}, policy {manifest.policy}, {manifest.veus} vEUs",
             f"- {s['operators']} operators, {s['launches']} launches, {s['rtasks']} rTasks, {s['programs']} "
             f"rProgram(s), {s['barrier_rtasks']} barrier-rTasks, {len(plan.calls)} library call(s)",
             f"- backends {', '.join(s.get('backends', ['rtask']))}, placement {s.get('placement', 'rtask-only')}; "
             f"steps: {steps_text(plan, manifest.target == 'gpu')}",
             *([setup_line(plan.setup)] if plan.setup else []),
             *(_prediction_lines(manifest, plan) if manifest.target == "gpu" else [
                 "- no time prediction: a CPU build runs on the emulator, whose times say nothing about a GPU "
                 "(build with --target gpu for the cost model's prediction); the placement reasons below weigh "
                 "cost-model units (u), which only order the plan"]),
             *(_weight_lines(s) if "weight_bytes_read" in s else []),
             f"- {s.get('profiler', plan.profiler)}",
             *([f"- vEUs per SM: {s['occupancy']}"] if s.get("occupancy") else []),
             *([f"- {s['resident_search']['line']}"] if s.get("resident_search") else []),
             *([f"- {s['register_budget']['line']}"] if s.get("register_budget") else []),
             f"- build time {s.get('build_s', 0):.1f} s: "
             + ", ".join(f"{k} {v:.1f} s" for k, v in s.get("step_s", {}).items()),
             "", "## Operators", "", "| node | op | backend | rKernel variant / call | launches | rTasks | why |",
             "|---|---|---|---|---|---|---|"]
    per_node: dict[str, list] = {}
    for op in plan.ops:
        per_node.setdefault(op.node, []).append(op)
    for spec in workload.ops:
        ops = per_node.get(spec.name, [])
        choice = plan.choices.get(spec.name)
        backend = choice.backend if choice else "-"
        why = choice.why if choice else ""
        lines.append(f"| {spec.name} | {spec.op_type} | {backend} | {choice.variant if choice else '-'} | "
                     f"{len(ops) if backend != 'library' else 'call'} | {sum(o.rtasks for o in ops)} | "
                     f"{why if manifest.target == 'gpu' else model_units(why)} |")
    if s.get("passes"):
        lines += ["", "## Graph passes", "", "| pass | changes | seconds |", "|---|---|---|"]
        lines += [f"| {r['name']} | {r.get('skipped') or r['changes']} | {r['seconds']:.3f} |" for r in s["passes"]]
    fallback = [c for c in plan.calls if c.function == "onnxruntime"]
    if fallback:
        lines += ["", "## Nodes without an rKernel (run through onnxruntime: the next kernels to write)", "",
                  "| node | op | inputs -> outputs |", "|---|---|---|"]
        lines += [f"| {c.node} | {c.op_type} | {c.input_shapes} -> {c.output_shapes} |" for c in fallback]
    if plan.notes:
        lines += ["", "## Notes", ""] + [f"- {n if manifest.target == 'gpu' else model_units(n)}" for n in plan.notes]
    lines += ["", "Files: `program.cu` (generated interpreter + rKernels), `rkernels/` (converted sources), "
              "`plan.json`, `programs.json`, `weights.npz`, `timeline.json` (open in https://ui.perfetto.dev), "
              "`timeline.svg` (preview), `build.json`, `model.onnx`.", ""]
    return "\n".join(lines)


def steps_text(plan: Any, times: bool = True) -> str:
    """The plan's steps in order: 'rProgram 0 (12.3 us) -> library matmul of n3 (4.1 us) -> ...' (without the
    times for a CPU build, which predicts none)."""
    out = []
    for step in plan.steps:
        if step.kind == StepKind.PROGRAM:
            out.append(f"rProgram {step.index}" + (f" ({plan.program_us[step.index]:.1f} us)" if times else ""))
        elif step.kind == StepKind.LAUNCHES:
            g = plan.launches[step.index]
            how = ", a PDL chain" if getattr(g, "chain", False) else ""
            out.append(f"launch segment {step.index} of {len(g.ops)} launches{how}"
                       + (f" ({g.us:.1f} us)" if times else ""))
        else:
            c = plan.calls[step.index]
            out.append(f"library {c.function} of {c.node}" + (f" ({c.us:.1f} us)" if times else ""))
    return " -> ".join(out) or "none"


_MICROSECONDS = re.compile(r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?) ?(?:us|µs)\b")


def model_units(text: str) -> str:
    """A planner's reason with its microseconds relabelled as cost-model units (u): in a CPU build they order the
    plan and are no time of anything that runs."""
    return _MICROSECONDS.sub(r"\1 u", text)


__all__ = ["Slice", "model_units", "render_report", "schedule_boxes", "schedule_slices", "schedule_source",
           "timeline_svg", "timeline_trace", "trace_events"]
