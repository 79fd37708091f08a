"""Bundles compiled once for symbolic dims: the entry takes the symbols' sizes, the caller's data stays dense.

A model with ``x[batch, sequence, 8]`` (MatMul with a constant weight, Softmax over the last axis, a Reshape
and a Transpose that moves the sequence axis) is bundled once for batch 1..4 and sequence 1..16 and run at
several shapes through ``load_bundle`` and from C, against onnx's reference evaluator.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from glow_backend_cpu.backend import CpuBackend
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.bundle import read_elf, write_bundle
from glow_core.errors import InputError, UnsupportedError
from glow_core.importer.symbols import DimBound, InputShapes
from tests.bundle.util import ALLOWED_UNDEFINED
from tests.cliutil import glow

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="needs a C compiler and make")

DIMS = {"batch": DimBound(1, 4), "sequence": DimBound(1, 16)}
SHAPES = [(1, 1), (2, 5), (4, 16), (3, 9), (1, 16)]


def symbolic_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([0, 0, 4, 4], np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Softmax", ["m"], ["p"], axis=-1),
             helper.make_node("Reshape", ["p", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3])]
    graph = helper.make_graph(
        nodes, "symbolic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "sequence", 4])], [w, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def reference(x: np.ndarray) -> np.ndarray:
    return ReferenceEvaluator(symbolic_model()).run(None, {"x": x})[0]


def feed(batch: int, seq: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + 10 * batch + seq).standard_normal((batch, seq, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("symbolic")
    write_bundle(symbolic_model(), "cpu", d, name="net", input_shapes=InputShapes({}, DIMS))
    return d


def test_manifest_and_header_name_the_symbols(bundle_dir):
    m = json.loads((bundle_dir / "net.json").read_text())
    assert m["format"] == 2
    assert [(s["name"], s["min"], s["max"], s["step"]) for s in m["symbols"]] == [("batch", 1, 4, 1),
                                                                                 ("sequence", 1, 16, 1)]
    io = {i["name"]: i for i in m["io"]}
    # laid out at the bounds (a bound too small for the probe is laid out larger: the entry still refuses 5)
    assert io["x"]["dims"] == ["batch", "sequence", 8] and io["x"]["shape"][0] >= 4 and io["x"]["shape"][1:] == [16, 8]
    assert io["y"]["dims"] == ["batch", 4, "sequence", 4] and io["y"]["size"] == 4 * np.prod(io["y"]["shape"])
    header = (bundle_dir / "net.h").read_text()
    assert ("int net(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations, int64_t batch, "
            "int64_t sequence);") in header
    for macro in ("#define NET_NUM_SYMBOLS 2", "#define NET_SYMBOL_batch_MAX 4", "#define NET_SYMBOL_sequence_MIN 1",
                  "#define GLOW_BUNDLE_BAD_SYMBOLS 4", "#define NET_SIZE_x_AT(batch, sequence)"):
        assert macro in header, macro
    assert "net_config" not in header  # (glow_bundle_config's entry takes the three areas only)
    assert set(read_elf(bundle_dir / "net.o").undefined) <= ALLOWED_UNDEFINED
    assert "net" in read_elf(bundle_dir / "net.o").exported


def test_load_bundle_runs_every_conforming_shape(bundle_dir):
    b = glow_core.load_bundle(bundle_dir)
    for batch, seq in SHAPES:
        x = feed(batch, seq)
        got = b.run({"x": x})["y"]
        assert got.shape == (batch, 4, seq, 4)
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-6, err_msg=f"{(batch, seq)}")


def test_load_bundle_refuses_bad_shapes_before_native_code(bundle_dir):
    b = glow_core.load_bundle(bundle_dir)
    for bad, what in [((5, 3, 8), "input 'x' has 5 at axis 0 \\(symbol 'batch'\\), outside its bound 1..4"),
                      ((1, 17, 8), "input 'x' has 17 at axis 1 \\(symbol 'sequence'\\), outside its bound 1..16"),
                      ((1, 3, 7), "input 'x' has shape"), ((3, 8), "input 'x' has shape")]:
        with pytest.raises(InputError, match=what):
            b.run({"x": np.zeros(bad, np.float32)})
    with pytest.raises(InputError, match="dtype"):
        b.run({"x": np.zeros((1, 3, 8), np.float64)})


def test_bad_symbols_return_the_status_and_touch_nothing(bundle_dir):
    b = glow_core.load_bundle(bundle_dir)
    b._mutable[:] = 0xAB
    before = b._mutable.copy()
    for values in ([5, 3], [0, 3], [1, 17], [1, 0], [-1, 3], [2**62, 1]):
        assert b.call(values) == 4, values
        assert np.array_equal(b._mutable, before), values
    assert b.call([1, 1]) == 0 and not np.array_equal(b._mutable, before)


def test_steps_and_minimums_are_checked(tmp_path):
    dims = {"batch": DimBound(1, 2), "sequence": DimBound(3, 12, multiple_of=4)}
    write_bundle(symbolic_model(), "cpu", tmp_path, name="stepped", input_shapes=InputShapes({}, dims))
    m = json.loads((tmp_path / "stepped.json").read_text())
    assert [(s["symbol"], s["min"], s["max"], s["step"]) for s in m["symbols"]] == [("batch", 1, 2, 1),
                                                                                   ("sequence/4", 4, 12, 4)]
    b = glow_core.load_bundle(tmp_path)
    for batch, seq in [(1, 4), (2, 12), (2, 8)]:
        x = feed(batch, seq)
        np.testing.assert_allclose(b.run({"x": x})["y"], reference(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match="multiples of 4"):
        b.run({"x": feed(1, 6)})
    assert [b.call(v) for v in ([1, 6], [1, 0], [1, 16], [1, 8])] == [4, 4, 4, 0]


def test_threads_run_the_symbolic_entry(tmp_path):
    write_bundle(symbolic_model(), "cpu", tmp_path, name="net2", threads=2, input_shapes=InputShapes({}, DIMS),
                 options={"parallel_threshold": 0})
    b = glow_core.load_bundle(tmp_path)
    for batch, seq in [(4, 16), (2, 3)]:
        x = feed(batch, seq)
        np.testing.assert_allclose(b.run({"x": x})["y"], reference(x), rtol=1e-5, atol=1e-6)


DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "net.h"
static void *area(uint64_t n) { void *p = NULL; return posix_memalign(&p, NET_MEM_ALIGN, n ? n : 64) ? NULL : p; }
static int run(uint8_t *c, uint8_t *m, uint8_t *a, int64_t batch, int64_t seq, const char *in, const char *out) {
  uint64_t n_in = NET_SIZE_x_AT(batch, seq), n_out = NET_SIZE_y_AT(batch, seq);
  FILE *f = fopen(in, "rb");
  if (!f || fread(m + NET_OFFSET_x, 1, n_in, f) != n_in) return -1;
  fclose(f);
  int rc = net(c, m, a, batch, seq);
  if (rc != GLOW_BUNDLE_OK) return rc;
  f = fopen(out, "wb");
  if (!f || fwrite(m + NET_OFFSET_y, 1, n_out, f) != n_out) return -1;
  fclose(f);
  return 0;
}
int main(int argc, char **argv) {
  uint8_t *c = area(NET_CONSTANT_MEM_SIZE), *m = area(NET_MUTABLE_MEM_SIZE), *a = area(NET_ACTIVATIONS_MEM_SIZE);
  FILE *f = fopen(argv[1], "rb");
  if (!c || !m || !a || !f || fread(c, 1, NET_CONSTANT_MEM_SIZE, f) != NET_CONSTANT_MEM_SIZE) return 2;
  fclose(f);
  int rc1 = run(c, m, a, atoi(argv[2]), atoi(argv[3]), "in0.bin", "out0.bin");
  int rc2 = run(c, m, a, atoi(argv[4]), atoi(argv[5]), "in1.bin", "out1.bin");
  /* out of bounds: the status, and not one byte of the areas changed */
  uint8_t *copy = malloc(NET_MUTABLE_MEM_SIZE);
  memcpy(copy, m, NET_MUTABLE_MEM_SIZE);
  int bad = net(c, m, a, NET_SYMBOL_batch_MAX + 1, 1) + net(c, m, a, 1, NET_SYMBOL_sequence_MAX + 1)
          + net(c, m, a, 0, 1) + net(c, m, a, 1, -5);
  printf("%d %d %d %d\n", rc1, rc2, bad, memcmp(copy, m, NET_MUTABLE_MEM_SIZE) == 0);
  return 0;
}
"""


def test_c_program_calls_the_entry_at_two_shapes(bundle_dir, tmp_path):
    (tmp_path / "main.c").write_text(DRIVER)
    subprocess.run(["cc", "-O1", "-Wall", "-Werror", f"-I{bundle_dir}", "-o", "drv", "main.c",
                    str(bundle_dir / "net.o"), "-lm"], cwd=tmp_path, check=True, capture_output=True, text=True)
    shapes = [(3, 11), (1, 2)]
    xs = [feed(*s, seed=7) for s in shapes]
    for k, x in enumerate(xs):
        x.tofile(tmp_path / f"in{k}.bin")
    args = [str(v) for s in shapes for v in s]
    out = subprocess.run(["./drv", str(bundle_dir / "net.weights.bin"), *args], cwd=tmp_path, check=True,
                         capture_output=True, text=True, timeout=60).stdout
    assert out.split() == ["0", "0", "16", "1"]  # ok, ok, 4 x GLOW_BUNDLE_BAD_SYMBOLS, areas untouched
    for k, (x, (batch, seq)) in enumerate(zip(xs, shapes)):
        got = np.fromfile(tmp_path / f"out{k}.bin", dtype=np.float32).reshape(batch, 4, seq, 4)
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-6)


def test_cli_bundles_symbolic_dims(tmp_path):
    onnx.save(symbolic_model(), tmp_path / "m.onnx")
    r = glow(["bundle", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "b"), "--dim", "batch=1:2",
              "--dim", "sequence=1:8"])
    assert r.returncode == 0, r.stderr
    assert "symbolic dims: batch 1..2, sequence 1..8" in r.stdout
    b = glow_core.load_bundle(tmp_path / "b")
    x = feed(2, 8)
    np.testing.assert_allclose(b.run({"x": x})["y"], reference(x), rtol=1e-5, atol=1e-6)
    r = glow(["bundle", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "q"), "--dim", "sequence=4",
              "--dim", "batch=1"])
    assert r.returncode == 0 and "symbolic dims" not in r.stdout  # every symbol fixed: a static bundle
    assert json.loads((tmp_path / "q" / "m.json").read_text())["format"] == 1


class _NoSymbolicKinds(CpuBackend):
    name = "static-only"

    def symbolic_kinds(self) -> frozenset[str]:
        return frozenset()


class _NoSymbolicBundles(CpuBackend):
    """Symbolic kernels (it compiles symbolic functions), but bundles of fixed shapes only (SDK 2.5's default)."""

    name = "static-only"

    def symbolic_bundles(self) -> bool:
        return False


@pytest.mark.parametrize("backend", [_NoSymbolicKinds, _NoSymbolicBundles], ids=["no-symbolic-kinds", "no-symbolic-bundles"])
def test_backend_without_symbolic_bundles_refuses(tmp_path, monkeypatch, backend):
    import glow_core.bundle as bundle_mod

    monkeypatch.setattr(bundle_mod, "get_backend", lambda name: backend())
    with pytest.raises(UnsupportedError) as e:
        write_bundle(symbolic_model(), "static-only", tmp_path)
    assert "'x'" in str(e.value) and "fixed shapes only" in str(e.value)
    assert "--dim batch=1" in e.value.hint and "x float32[batch,sequence,8]" in e.value.hint
    assert not any(tmp_path.iterdir())


def gather_model() -> onnx.ModelProto:
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0)], "gather",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["batch", "sequence", 4])], [table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_index_input_padding_is_zeroed(tmp_path):
    """The entry zeroes the padding it makes as it lays an input out: whatever the caller's area held beyond
    the dense input (here 0x7F bytes: indices out of range) is never read as an index."""
    write_bundle(gather_model(), "cpu", tmp_path, name="emb", input_shapes=InputShapes({}, DIMS))
    b = glow_core.load_bundle(tmp_path)
    for batch, seq in [(2, 3), (4, 16), (1, 5)]:
        b._mutable[:] = 0x7F
        ids = np.random.default_rng(seq).integers(0, 10, (batch, seq))
        got = b.run({"ids": ids})["e"]
        assert np.array_equal(got, np.arange(40, dtype=np.float32).reshape(10, 4)[ids])
        io = b.manifest["io"][0]
        laid = b._mutable[io["offset"]:io["offset"] + io["size"]].view(np.int64).reshape(io["shape"])
        assert np.array_equal(laid[:batch, :seq], ids)  # the corner: the input; the rest: zeros
        assert not laid[batch:].any() and not laid[:, seq:].any()
    with pytest.raises(glow_core.errors.IndexRangeError, match="'ids'"):
        b.run({"ids": np.full((1, 2), 10, np.int64)})
