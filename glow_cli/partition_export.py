"""``glow partition MODEL --devices LIST --export DIR``: every partition as an ONNX model, and a manifest.

Each partition is exported as its backend receives it (extracted from the prepared function; a
partition of a backend other than the first of the list optimized and fused again for it) with
``glow_sdk.export.partition_to_onnx``: ``DIR/pN.onnx``, checked with ``onnx.checker`` (full check).
``DIR/manifest.json`` lists, per partition in execution order, its file, backend, device, the
partitions it waits for and its inputs and outputs (name, element kind, shape): an input that another
partition's output names comes from that partition, the others are the model's inputs; an output that is
one of the model's outputs names it (``model_output``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx

from glow_core.errors import GlowError
from glow_core.runtime.partitioner import PartitionPlan
from glow_core.runtime.refusal import PartitionCompiler
from glow_core.runtime.devices import backend_order
from glow_sdk.export import partition_to_onnx

MANIFEST = "manifest.json"


def _tensors(model: onnx.ModelProto, which: str) -> list[dict[str, Any]]:
    out = []
    for vi in getattr(model.graph, which):
        t = vi.type.tensor_type
        out.append({"name": vi.name, "elem": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name,
                    "shape": [d.dim_value for d in t.shape.dim]})
    return out


def export_partitions(plan: PartitionPlan, out_dir: Path, model_label: str) -> list[Path]:
    """Write ``pN.onnx`` per partition of ``plan`` and ``manifest.json`` into ``out_dir``; the files written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GlowError(f"cannot create '{out_dir}': {e.strerror or e}") from None
    extractor = PartitionCompiler("export", prepared_for=backend_order(list(plan.devices))[0])
    written: list[Path] = []
    entries = []
    returned = {v.name: n for n, v in plan.function.outputs}
    for p in plan.partitions:
        _, sub = extractor.extract(plan, p)
        model = partition_to_onnx(sub, name=f"{p.name}_{p.backend}")
        path = out_dir / f"{p.name}.onnx"
        try:
            onnx.save_model(model, str(path))
        except OSError as e:
            raise GlowError(f"cannot write '{path}': {e.strerror or e}") from None
        written.append(path)
        entries.append({"partition": p.name, "file": path.name, "backend": p.backend, "device": p.device,
                        "nodes": len(sub.nodes), "after": [f"p{d}" for d in p.deps],
                        "inputs": _tensors(model, "input"),
                        "outputs": [{**t, **({"model_output": returned[t["name"]]} if t["name"] in returned else {})}
                                    for t in _tensors(model, "output")]})
    manifest = out_dir / MANIFEST
    manifest.write_text(json.dumps({"model": model_label, "opset": model.opset_import[0].version if entries else None,
                                    "partitions": entries}, indent=2) + "\n", encoding="utf-8")
    return [*written, manifest]
