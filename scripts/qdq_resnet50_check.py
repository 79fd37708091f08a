"""A QDQ ResNet-50 on glow's int8 kernels against onnxruntime: how many quantized values agree within 1 LSB.

    python scripts/qdq_resnet50_check.py [--backend cpu] [--inputs 2]

The light zoo ResNet-50 with seeded random weights is quantized by onnxruntime's
recommended flow (``scripts/qdq_models.py``). Every QuantizeLinear result (every
quantized activation, the logits included) becomes a graph output of both runs;
the script prints, over all of them, the share of elements equal and within one
unit of the last place, the largest difference, and checks the target:
>= 99.9 % within 1 LSB. It also prints which kinds glow ran (FusedIntConv: the int8
kernels) and the top-1 agreement of the final softmax.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--inputs", type=int, default=2, help="seeded random inputs to compare on")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import onnxruntime as ort

    import glow_core
    from qdq_models import resnet50_qdq

    _, qmodel, feed = resnet50_qdq()
    names = [n.output[0] for n in qmodel.graph.node if n.op_type == "QuantizeLinear"]
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(qmodel).graph.value_info}
    qmodel.graph.output.extend(typed[n] for n in names)
    sess = ort.InferenceSession(qmodel.SerializeToString(), providers=["CPUExecutionProvider"])
    net = glow_core.compile(qmodel, backend=args.backend, threads=args.threads)
    kinds = collections.Counter(n.kind.name for n in net.function.nodes)
    print("glow ran:", ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())))
    rng = np.random.default_rng(7)
    total = equal = within = 0
    worst = 0
    top1 = 0
    for i in range(args.inputs):
        f = feed if i == 0 else {k: rng.random(v.shape, dtype=np.float32) for k, v in feed.items()}
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, f)))
        got = net.run(f)
        for n in names:
            d = np.abs(got[n].astype(np.int32) - want[n].astype(np.int32))
            total += d.size
            equal += int((d == 0).sum())
            within += int((d <= 1).sum())
            worst = max(worst, int(d.max()))
        out = qmodel.graph.output[0].name
        top1 += int(got[out].argmax() == want[out].argmax())
    share = within / total
    print(f"{len(names)} quantized tensors x {args.inputs} input(s): {total} values; equal {equal / total:.4%}, "
          f"within 1 LSB {share:.4%}, largest difference {worst} LSB; top-1 agreement {top1}/{args.inputs}")
    ok = share >= 0.999
    print("target (>= 99.9 % within 1 LSB):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
