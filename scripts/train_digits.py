"""Train the ``zoo:digits`` model: a small CNN on scikit-learn's 8x8 handwritten digits, exported to ONNX.

Needs scikit-learn for the data set (it ships inside the package, nothing is downloaded)::

    pip install scikit-learn          # or: pip install ".[train]"
    python scripts/train_digits.py    # writes glow_core/zoo_data/digits.onnx and digits_test.npz

Everything is seeded, so a rerun writes the same split and (up to floating-point rounding of the
BLAS in use) the same weights. The held-out split is the first :data:`HELD_OUT` digits of a seeded
permutation of the 1797 images; it is never used for training.

The network, in ONNX operators (input ``image``: float32[1,1,8,8], pixels scaled to [0, 1])::

    Conv(16 filters 3x3, pads 1) -> Relu -> MaxPool(2x2, stride 2) -> Flatten -> Gemm(256 -> 10) -> Softmax

trained with plain minibatch gradient descent (no momentum, fixed learning rate) on the softmax
cross-entropy, written in numpy here (forward and backward passes), then exported with
``onnx.helper``. The script checks the exported file with the onnx checker and with
``onnx.reference`` (its predictions must equal the numpy forward pass) before writing it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: held-out images (20% of the 1797)
HELD_OUT = 360
#: output folder: the zoo data shipped inside glow_core
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "glow_core" / "zoo_data"
FILTERS = 16
CLASSES = 10
OPSET = 13


@dataclass
class Params:
    """Weights in ONNX layouts: conv ``w1`` [F,1,3,3], ``b1`` [F]; gemm ``w2`` [10, F*16] (transB), ``b2`` [10]."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray

    @staticmethod
    def init(rng: np.random.Generator) -> Params:
        fan1, fan2 = 9, FILTERS * 16
        return Params(rng.standard_normal((FILTERS, 1, 3, 3)) * np.sqrt(2.0 / fan1), np.zeros(FILTERS),
                      rng.standard_normal((CLASSES, fan2)) * np.sqrt(1.0 / fan2), np.zeros(CLASSES))

    def astype(self, dtype: type) -> Params:
        return Params(*(a.astype(dtype) for a in (self.w1, self.b1, self.w2, self.b2)))


def load_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): images float32 [N,1,8,8] in [0, 1], labels int64 [N]."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("train_digits.py needs scikit-learn for the digits data set: pip install scikit-learn")
    digits = load_digits()
    x = (np.asarray(digits.images, np.float64) / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = np.asarray(digits.target, np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:HELD_OUT], order[HELD_OUT:]
    return x[train], y[train], x[test], y[test]


def im2col(x: np.ndarray) -> np.ndarray:
    """[N,1,8,8] -> [N,8,8,9]: the 3x3 neighbourhood (zero padded) of every pixel, row-major taps."""
    p = np.pad(x[:, 0], ((0, 0), (1, 1), (1, 1)))
    return np.stack([p[:, i:i + 8, j:j + 8] for i in range(3) for j in range(3)], axis=-1)


def forward(p: Params, x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Softmax probabilities [N,10] and what the backward pass needs."""
    n = x.shape[0]
    cols = im2col(x)                                                   # [N,8,8,9]
    conv = cols @ p.w1.reshape(FILTERS, 9).T + p.b1                    # [N,8,8,F]
    act = np.maximum(conv, 0)
    win = act.reshape(n, 4, 2, 4, 2, FILTERS).transpose(0, 5, 1, 3, 2, 4).reshape(n, FILTERS, 4, 4, 4)
    arg = win.argmax(axis=-1)                                          # first maximum of each 2x2 window
    pooled = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]  # [N,F,4,4]
    flat = pooled.reshape(n, -1)                                       # ONNX Flatten order (C, H, W)
    logits = flat @ p.w2.T + p.b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    return probs, {"cols": cols, "conv": conv, "arg": arg, "flat": flat}


def backward(p: Params, cache: dict[str, np.ndarray], probs: np.ndarray, y: np.ndarray) -> Params:
    """Gradients of the mean cross-entropy."""
    n = probs.shape[0]
    dlogits = probs.copy()
    dlogits[np.arange(n), y] -= 1.0
    dlogits /= n
    dw2, db2 = dlogits.T @ cache["flat"], dlogits.sum(axis=0)
    dpooled = (dlogits @ p.w2).reshape(n, FILTERS, 4, 4)
    dwin = np.zeros((n, FILTERS, 4, 4, 4))
    np.put_along_axis(dwin, cache["arg"][..., None], dpooled[..., None], axis=-1)
    dact = dwin.reshape(n, FILTERS, 4, 4, 2, 2).transpose(0, 2, 4, 3, 5, 1).reshape(n, 8, 8, FILTERS)
    dconv = dact * (cache["conv"] > 0)
    dw1 = np.einsum("nhwk,nhwf->fk", cache["cols"], dconv).reshape(FILTERS, 1, 3, 3)
    return Params(dw1, dconv.sum(axis=(0, 1, 2)), dw2, db2)


def train(x: np.ndarray, y: np.ndarray, seed: int, epochs: int, batch: int, lr: float) -> Params:
    """Minibatch gradient descent in float64 from seeded He-style initial weights."""
    rng = np.random.default_rng(seed + 1)
    p = Params.init(rng)
    xd = x.astype(np.float64)
    for epoch in range(epochs):
        order = rng.permutation(len(y))
        for s in range(0, len(y), batch):
            idx = order[s:s + batch]
            probs, cache = forward(p, xd[idx])
            g = backward(p, cache, probs, y[idx])
            p = Params(p.w1 - lr * g.w1, p.b1 - lr * g.b1, p.w2 - lr * g.w2, p.b2 - lr * g.b2)
        if (epoch + 1) % 10 == 0:
            probs, _ = forward(p, xd)
            loss = -np.log(probs[np.arange(len(y)), y] + 1e-12).mean()
            print(f"epoch {epoch + 1:3d}  loss {loss:.4f}  train accuracy {np.mean(probs.argmax(1) == y):.2%}")
    return p


def export(p: Params, seed: int, accuracy: float):  # type: ignore[no-untyped-def]
    """The ONNX model (float32 weights) of the trained network."""
    from onnx import TensorProto, helper, numpy_helper

    w = p.astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], name="conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("MaxPool", ["relu"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    inits = [numpy_helper.from_array(a, name) for a, name in
             ((w.w1, "conv_w"), (w.b1, "conv_b"), (w.w2, "fc_w"), (w.b2, "fc_b"))]
    graph = helper.make_graph(
        nodes, "digits",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, CLASSES])],
        initializer=inits,
        doc_string="8x8 handwritten digit classifier (scikit-learn's digits); input: pixels / 16",
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                              producer_name="glow scripts/train_digits.py")
    helper.set_model_props(model, {"seed": str(seed), "held_out": str(HELD_OUT),
                                   "held_out_accuracy": f"{accuracy:.4f}"})
    return model


def check_export(model, p: Params, x: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Checker plus onnx.reference: the exported model must predict what the float32 numpy net predicts."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    onnx.checker.check_model(model, full_check=True)
    ref: Any = ReferenceEvaluator(model)  # run() returns the list of outputs
    got = np.array([int(np.argmax(ref.run(None, {"image": x[i:i + 1]})[0])) for i in range(len(x))])
    want = forward(p.astype(np.float32), x)[0].argmax(axis=1)
    if not np.array_equal(got, want):
        sys.exit(f"export check failed: onnx.reference disagrees with numpy on {int(np.sum(got != want))} digits")
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help=f"where to write (default {DEFAULT_OUT})")
    ap.add_argument("--seed", type=int, default=0, help="seed of the split, the initial weights and the batches")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1, help="learning rate")
    args = ap.parse_args(argv)

    import onnx

    x_train, y_train, x_test, y_test = load_split(args.seed)
    params = train(x_train, y_train, args.seed, args.epochs, args.batch, args.lr)
    pred = forward(params.astype(np.float32), x_test)[0].argmax(axis=1)
    accuracy = float(np.mean(pred == y_test))
    model = export(params, args.seed, accuracy)
    check_export(model, params, x_test)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(args.out_dir / "digits.onnx"))
    np.savez_compressed(args.out_dir / "digits_test.npz", x=x_test, y=y_test)
    print(f"accuracy on the {len(y_test)} held-out digits: {accuracy:.1%}")
    print(f"wrote {args.out_dir / 'digits.onnx'} and {args.out_dir / 'digits_test.npz'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
