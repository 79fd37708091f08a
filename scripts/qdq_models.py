"""Pre-quantized (QDQ) models made by onnxruntime's recommended static quantization flow.

Used by ``scripts/qdq_resnet50_check.py`` and ``scripts/bench_quantized.py``
(needs the ``bench`` or ``test`` extra: onnxruntime):

1. the float model moved to opset 13, with initializers removed from the graph inputs;
2. ``quant_pre_process`` (shape inference and onnxruntime's graph optimizations);
3. ``quantize_static`` in QDQ format, per-channel, uint8 activations and int8 weights,
   calibrated (MinMax) on the given input batches.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import version_converter


def prepare_float(model: onnx.ModelProto, opset: int = 13) -> onnx.ModelProto:
    """Opset ``opset`` (at least), initializers out of the graph inputs, unused initializers dropped."""
    current = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=opset)
    if current < opset:
        model = version_converter.convert_version(model, opset)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name for t in out.graph.initializer}
    used = {i for n in out.graph.node for i in n.input} | {o.name for o in out.graph.output}
    kept = [t for t in out.graph.initializer if t.name in used]  # drop unused ones (onnxruntime rejects them)
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    keep = [i for i in out.graph.input if i.name not in inits]
    out.ir_version = max(out.ir_version, 7)  # opset 13's IR version (initializers need not be inputs)
    del out.graph.input[:]
    out.graph.input.extend(keep)
    return out


def quantize_qdq(model: onnx.ModelProto, batches: Sequence[dict[str, np.ndarray]],
                 per_channel: bool = True) -> onnx.ModelProto:
    """onnxruntime's QDQ model of ``model`` (prepared with :func:`prepare_float`), calibrated on ``batches``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it: Iterator[dict[str, np.ndarray]] = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, pre, dst = Path(tmp, "f.onnx"), Path(tmp, "pre.onnx"), Path(tmp, "q.onnx")
        onnx.save(prepare_float(model), str(src))
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)  # static shapes: onnx inference suffices
        quantize_static(str(pre), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(str(dst))


def resnet50_qdq(seed: int = 0, calibration: int = 4) -> tuple[onnx.ModelProto, onnx.ModelProto, dict]:
    """(float ResNet-50 with seeded random weights, its QDQ model, one seeded input)."""
    fmodel, qmodel, _, feed = resnet50_qdq_calibrated(seed, calibration)
    return fmodel, qmodel, feed


def resnet50_qdq_calibrated(seed: int = 0, calibration: int = 4) -> tuple[onnx.ModelProto, onnx.ModelProto,
                                                                          list[dict], dict]:
    """:func:`resnet50_qdq` with the calibration batches too (for glow's own profile of the same inputs)."""
    from glow_core.zoo import load_with_random_weights

    fmodel = prepare_float(load_with_random_weights("resnet50", seed=seed))
    name = fmodel.graph.input[0].name
    dims = [d.dim_value or 1 for d in fmodel.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed + 1)
    batches = [{name: rng.random(dims, dtype=np.float32)} for _ in range(calibration)]
    feed = {name: rng.random(dims, dtype=np.float32)}
    return fmodel, quantize_qdq(fmodel, batches), batches, feed
