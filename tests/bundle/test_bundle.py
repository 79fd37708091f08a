"""Ahead-of-time bundles: the files, the C example built with cc, bit-exact against the JIT, load_bundle."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

import glow_core
from glow_core.bundle import read_elf, write_bundle
from glow_core.errors import ExecutionError, InputError
from tests.bundle.util import (
    ALLOWED_UNDEFINED,
    build_example,
    multi_io_feeds,
    multi_io_model,
    nm_undefined,
    run_example,
)
from tests.cliutil import glow

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="needs a C compiler and make")


def _manifest(d, name):
    return json.loads((d / f"{name}.json").read_text())


@pytest.mark.parametrize("threads", [1, 2])
def test_multi_io_example_matches_jit_bit_for_bit(tmp_path, threads):
    model = multi_io_model()
    opts = {"parallel_threshold": 0}  # both run the model on every thread
    files = write_bundle(model, "cpu", tmp_path / "b", name="multi", threads=threads, options=opts)
    assert sorted(f.name for f in files) == ["multi.h", "multi.json", "multi.o", "multi.weights.bin"]
    m = _manifest(tmp_path / "b", "multi")
    assert m["threads"] == threads
    c_names = [io["c_name"] for io in m["io"]]
    assert len(set(c_names)) == len(c_names) and all(re.fullmatch(r"\w+", c) for c in c_names)
    header = (tmp_path / "b" / "multi.h").read_text()
    for macro in ("MULTI_CONSTANT_MEM_SIZE", "MULTI_MUTABLE_MEM_SIZE", "MULTI_ACTIVATIONS_MEM_SIZE",
                  "MULTI_MEM_ALIGN", "int multi(uint8_t *constantWeight"):
        assert macro in header
    for io in m["io"]:
        assert f"#define MULTI_OFFSET_{io['c_name']} {io['offset']}ULL" in header
    feeds = multi_io_feeds()
    jit = glow_core.compile(model, "cpu", threads=threads, options={**opts, "cache": False}).run(feeds)
    exe = build_example(tmp_path / "b", "multi")
    got, _ = run_example(exe, m, feeds, tmp_path / "run")
    assert set(got) == set(jit) == {"out.0", "out-0", "0 probs */"}
    for k in jit:
        assert got[k].dtype == jit[k].dtype and np.array_equal(got[k], jit[k]), k
    loaded = glow_core.load_bundle(tmp_path / "b").run(feeds)
    for k in jit:
        assert np.array_equal(loaded[k], jit[k]), k
    undefined = set(read_elf(tmp_path / "b" / "multi.o").undefined)
    assert undefined <= ALLOWED_UNDEFINED, undefined - ALLOWED_UNDEFINED
    assert ("pthread_create" in undefined) == (threads > 1)
    nm = nm_undefined(tmp_path / "b" / "multi.o")
    assert nm is None or nm == undefined
    assert read_elf(tmp_path / "b" / "multi.o").exported == ["__extendhfsf2", "__gnu_f2h_ieee", "__gnu_h2f_ieee",
                                                             "__truncdfhf2", "__truncsfhf2", "multi",
                                                             "multi_error_node"]


def test_load_bundle_checks_feeds_and_reports_index_errors(tmp_path):
    write_bundle(multi_io_model(), "cpu", tmp_path, name="multi")
    b = glow_core.load_bundle(tmp_path)
    feeds = multi_io_feeds()
    with pytest.raises(InputError, match="missing input"):
        b.run({k: v for k, v in feeds.items() if k != "idx"})
    with pytest.raises(InputError, match="dtype"):
        b.run({**feeds, "idx": feeds["idx"].astype(np.int32)})
    with pytest.raises(InputError, match="shape"):
        b.run({**feeds, "img": feeds["img"][:1]})
    with pytest.raises(ExecutionError, match="out of range for its axis in ONNX node 'out-0' \\(Gather\\): its "
                                             "indices come from input 'idx'"):
        b.run({**feeds, "idx": np.array([0, 1, 2, 3, 70], np.int64)})
    assert b.run(feeds)["out-0"].shape == (5, 33)  # the error flag was cleared


def test_embedded_weights_and_c_array(tmp_path):
    model = multi_io_model()
    write_bundle(model, "cpu", tmp_path / "file", name="net", weights_text=True)
    write_bundle(model, "cpu", tmp_path / "emb", name="net", embed_weights=True)
    assert not (tmp_path / "emb" / "net.weights.bin").exists()
    data = (tmp_path / "file" / "net.weights.bin").read_bytes()
    text = (tmp_path / "file" / "net.weights.txt").read_text()
    values = bytes(int(x, 16) for x in re.findall(r"0x[0-9a-f]{2}", text.split("*/", 1)[1]))
    assert values == data and len(data) > 4 * 3 * 3 * 3 * 4 - 1
    assert _manifest(tmp_path / "emb", "net")["constant_mem_size"] == 0
    feeds = multi_io_feeds()
    a = glow_core.load_bundle(tmp_path / "file").run(feeds)
    b = glow_core.load_bundle(tmp_path / "emb").run(feeds)
    exe = build_example(tmp_path / "emb", "net")
    c, _ = run_example(exe, _manifest(tmp_path / "emb", "net"), feeds, tmp_path / "run")
    for k in a:
        assert np.array_equal(a[k], b[k]) and np.array_equal(a[k], c[k])


@pytest.mark.parametrize("triple,cpu,machine", [("aarch64-linux-gnu", "cortex-a72", 183),
                                                 ("riscv64-linux-gnu", None, 243)])
def test_cross_target_objects(tmp_path, triple, cpu, machine):
    args = ["bundle", "zoo:squeezenet", "-o", str(tmp_path), "--target", triple, "--threads", "2"]
    r = glow(args + (["--cpu", cpu] if cpu else []), timeout=600)
    assert r.returncode == 0, r.stderr
    info = read_elf(tmp_path / "squeezenet.o")
    assert info.machine == machine and info.bits == 64
    assert set(info.undefined) <= ALLOWED_UNDEFINED, set(info.undefined) - ALLOWED_UNDEFINED
    m = _manifest(tmp_path, "squeezenet")
    assert m["triple"] == triple
    with pytest.raises(glow_core.errors.BackendError, match="built for"):
        glow_core.load_bundle(tmp_path)


@pytest.mark.parametrize("extra,expect", [
    (["--target", "nonsense-triple"], "LLVM has no target for 'nonsense-triple'"),
    (["--target", "aarch64-linux-gnu", "--cpu", "pentium9000"], "no CPU or feature named 'pentium9000'"),
    (["--target", "aarch64-linux-gnu", "--features", "+avx512f"], "no CPU or feature named '+avx512f'"),
    (["--name", "2bad-name"], "is not usable as a C function name"),
])
def test_bad_targets_are_one_line_errors(tmp_path, extra, expect):
    r = glow(["bundle", "zoo:squeezenet", "-o", str(tmp_path)] + extra, timeout=600)
    assert r.returncode == 1, r.stderr
    assert expect in r.error_line()


def test_backend_without_bundles_says_so(tmp_path):
    r = glow(["bundle", "zoo:squeezenet", "-b", "interpreter", "-o", str(tmp_path)])
    assert r.returncode == 1
    assert r.error_line() == ("glow: error: backend 'interpreter' cannot write bundles "
                              "(use a backend that can, such as cpu (glow backends lists them))")
    assert not any(tmp_path.iterdir())


def test_two_bundles_link_into_one_program(tmp_path):
    """Every symbol but the entry is internal, and the shared header types are guarded: two bundles (one
    with threads) link side by side into one C program."""
    model = multi_io_model()
    write_bundle(model, "cpu", tmp_path, name="first")
    write_bundle(model, "cpu", tmp_path, name="second", threads=2, options={"parallel_threshold": 0})
    (tmp_path / "main.c").write_text("""
#include <stdio.h>
#include <stdlib.h>
#include "first.h"
#include "second.h"
static int run(const glow_bundle_config *c) {
  uint8_t *a[3]; uint64_t s[3] = {c->constant_mem_size, c->mutable_mem_size, c->activations_mem_size};
  for (int i = 0; i < 3; i++) if (posix_memalign((void **)&a[i], 64, s[i] ? s[i] : 64)) return -1;
  FILE *f = fopen(c == &first_config ? "first.weights.bin" : "second.weights.bin", "rb");
  if (!f || fread(a[0], 1, s[0], f) != s[0]) return -1;
  fclose(f);
  return c->entry(a[0], a[1], a[2]) + 10 * c->entry((uint8_t *)1, a[1], a[2]);
}
int main(void) { printf("%d %d %d\\n", run(&first_config), run(&second_config), SECOND_THREADS); return 0; }
""")
    import subprocess

    subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", "two", "main.c", "first.o", "second.o", "-lm", "-lpthread"],
                   cwd=tmp_path, check=True, capture_output=True, text=True)
    out = subprocess.run(["./two"], cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    assert out.split() == ["30", "30", "2"]  # 0 = ok, then 3 (misaligned constant area) x 10


def test_load_bundle_refuses_features_the_host_lacks(tmp_path):
    import llvmlite.binding as llvm

    if not llvm.get_process_triple().startswith("x86_64"):
        pytest.skip("an x86-64 feature is named")
    host = {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
    missing = next(f for f in ("amx-tile", "avx512fp16", "avx10.1-512", "sse4a") if f not in host)
    write_bundle(multi_io_model(), "cpu", tmp_path, name="net", target=llvm.get_process_triple(), cpu="x86-64",
                 features=f"+{missing}")
    with pytest.raises(glow_core.errors.BackendError, match=f"lacks: {re.escape(missing)}"):
        glow_core.load_bundle(tmp_path)


@pytest.mark.parametrize("triple,features", [("aarch64-linux-gnu", None), ("aarch64-linux-gnu", "+neon,+sve"),
                                             ("riscv64-linux-gnu", None)])
def test_non_x86_targets_take_the_generic_kernels(triple, features):
    from glow_backend_cpu.bundle import target_codegen

    cg = target_codegen(triple, None, features)
    assert cg.triple == triple and not cg.is_x86
    assert cg.target.vector_lanes == 4 and not cg.target.has_fma
