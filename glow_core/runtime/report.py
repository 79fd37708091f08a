"""A partition plan as text (``glow partition``) and as Graphviz DOT."""

from __future__ import annotations

from glow_core.runtime.devices import format_bytes
from glow_core.runtime.partitioner import PartitionPlan, Refusal


def moved_bytes(plan: PartitionPlan) -> int:
    """Bytes copied per request between the host and the devices: every partition's inputs in, outputs out."""
    return sum(v.type.nbytes for p in plan.partitions for v in (*p.inputs, *p.outputs))


def refusal_lines(plan: PartitionPlan) -> list[str]:
    """What backends did not take, and why: compile-time refusals and runs below a minimum (or cheaper
    elsewhere), one line per backend and reason with the counts."""
    groups: dict[tuple[bool, str, str], list[Refusal]] = {}
    for r in plan.refusals:
        groups.setdefault((bool(r.partition), r.backend, r.reason), []).append(r)
    lines = []
    for (refused, backend, reason), items in groups.items():
        nodes = sum(r.nodes for r in items)
        if refused and len(items) == 1:
            lines.append(f"refused: {backend} refused partition {items[0].partition} ({nodes} node(s)), sent to the "
                         f"next device: {reason}")
        elif refused:
            lines.append(f"refused: {backend} refused {len(items)} partition(s) of {nodes} node(s) in all, sent to "
                         f"the next device: {reason}")
        else:
            lines.append(f"not offloaded: {len(items)} run(s) of {nodes} node(s) on {backend}, {reason}; "
                         "sent to the next device")
    return lines


def format_plan(plan: PartitionPlan, *, max_tensors: int = 8) -> str:
    """One block per partition: backend, device, node count, memory, the tensors it receives and sends."""
    cut = plan.cut_tensors()
    lines = [f"{len(plan.partitions)} partition(s) of {len(plan.function.nodes)} node(s) on "
             f"{len(plan.devices)} device(s); {len(cut)} tensor(s) cut "
             f"({format_bytes(sum(v.type.nbytes for v, _, _ in cut))} per request); "
             f"{format_bytes(moved_bytes(plan))} moved between host and devices per request"]
    for d in plan.devices:
        used = sum(p.memory.total for p in plan.partitions if p.device == d.id)
        lines.append(f"  device {d.id:<14} {d.backend:<14} {format_bytes(used):>11} used of {format_bytes(d.memory_bytes)}")
    for p in plan.partitions:
        m = p.memory
        kinds: dict[str, int] = {}
        for n in p.nodes:
            kinds[n.kind.name] = kinds.get(n.kind.name, 0) + 1
        top = ", ".join(f"{k} x{c}" for k, c in sorted(kinds.items(), key=lambda kv: -kv[1])[:6])
        lines.append(f"{p.name}: backend {p.backend}, device {p.device}, {len(p.nodes)} node(s) ({top})")
        lines.append(f"    memory {format_bytes(m.total)} = {format_bytes(m.constant_bytes)} constants + "
                     f"{format_bytes(m.activation_bytes)} activations + {format_bytes(m.io_bytes)} inputs/outputs")
        if p.deps:
            lines.append("    after " + ", ".join(f"p{d}" for d in p.deps))
        for label, vals in (("in ", p.inputs), ("out", p.outputs)):
            shown = ", ".join(f"{v.name} {v.type}" for v in vals[:max_tensors])
            more = f", ... ({len(vals) - max_tensors} more)" if len(vals) > max_tensors else ""
            lines.append(f"    {label} {shown or '-'}{more}")
    if plan.fallback:
        falls: dict[tuple[str, str], int] = {}
        for n, b in plan.fallback:
            falls[(n.kind.name, b)] = falls.get((n.kind.name, b), 0) + 1
        first = plan.devices[0].backend
        lines.append(f"fallback: {len(plan.fallback)} node(s) not run by {first}: "
                     + ", ".join(f"{k} x{c} -> {b}" for (k, b), c in sorted(falls.items())))
    lines.extend(refusal_lines(plan))
    if plan.estimate is not None:
        e = plan.estimate
        lines.append(f"estimated time per request: {e.total_s * 1e3:.3f} ms ({e.compute_s * 1e3:.3f} ms compute, "
                     f"{e.transfer_s * 1e3:.3f} ms transfers; one partition after the other)")
    return "\n".join(lines)


def fallback_nodes(plan: PartitionPlan) -> list[str]:
    """Every node that falls back, one line each (``--strict``)."""
    return [f"{n.where()} -> {b}" for n, b in plan.fallback]


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plan_dot(plan: PartitionPlan) -> str:
    """The partition DAG in Graphviz DOT: one box per partition, one edge per cut tensor."""
    colors = ["lightblue", "palegreen", "lightsalmon", "khaki", "plum", "lightgray"]
    backends = sorted({p.backend for p in plan.partitions})
    out = ["digraph partitions {", "  rankdir=TB;", "  node [shape=box, style=filled];"]
    for p in plan.partitions:
        color = colors[backends.index(p.backend) % len(colors)]
        lines = [p.name, f"{p.backend} on {p.device}", f"{len(p.nodes)} nodes", format_bytes(p.memory.total)]
        label = '"' + "\\n".join(_q(t)[1:-1] for t in lines) + '"'
        out.append(f"  {p.name} [label={label}, fillcolor={color}];")
    for v, src, dsts in plan.cut_tensors():
        for d in dsts:
            out.append(f"  p{src} -> p{d} [label={_q(f'{v.name} {v.type}')}];")
    out.append("}")
    return "\n".join(out) + "\n"
