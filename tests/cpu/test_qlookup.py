"""The cpu backend's QLookup on plain 8-bit codes (``emit/qlookup.py``): the same bytes as the interpreter.

Every path: 64 codes per step with AVX512-VBMI (``vpermi2b``), 32 with AVX2 (``vpshufb``), scalar
otherwise (``GLOW_CPU_FEATURES`` narrows the host), on sizes with a remainder, below and above the size
from which the codes are split between threads.
"""

from __future__ import annotations


import numpy as np
import pytest

from glow_backend_cpu.emit.qlookup import MIN_PARALLEL, lookup_isa
from tests.lowering.test_reduce import run
from tests.cpu.util import run_at_feature_level

SHAPES = [(3, 5, 7), (1, 64), (2, 33), (1, MIN_PARALLEL + 64 * 7 + 19), (4, MIN_PARALLEL // 2 + 1)]


def _case(dtype: type, shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    x.flat[:2] = [info.min, info.max]  # both ends of the table
    table = rng.integers(-128, 128, 256).astype(np.int8)
    return x, table


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_qlookup_matches_the_interpreter_and_the_table(shape: tuple[int, ...], dtype: type = np.int8) -> None:
    x, table = _case(dtype, shape, sum(shape))
    got, fn = run("QLookup", [x, table], {}, "cpu")
    assert any(n.kind.name == "QLookup" for n in fn.nodes)  # the cpu kernel, not a lowering
    want, _ = run("QLookup", [x, table], {}, "interpreter")
    lo = int(np.iinfo(dtype).min)
    np.testing.assert_array_equal(want[0], table[x.astype(np.int64) - lo])
    np.testing.assert_array_equal(got[0], want[0])


def test_lookup_isa_from_features() -> None:
    assert lookup_isa("+avx2,+avx512f,+avx512bw,+avx512vbmi") == "vbmi"
    assert lookup_isa("+avx2,+avx512f,+avx512bw,-avx512vbmi") == "avx2"
    assert lookup_isa("-avx2,+sse4.2") == "scalar"


@pytest.mark.parametrize("level,isa", [("avx2", "avx2"), ("generic", "scalar")])
def test_narrower_paths(tmp_path: Path, level: str, isa: str) -> None:
    """The AVX2 (vpshufb) and scalar paths, on a host restricted to them: still the interpreter's bytes."""
    from glow_backend_cpu.target import host_codegen

    if isa == "avx2" and "+avx2" not in host_codegen().features.split(","):
        pytest.skip("the host has no avx2")
    code = ("from glow_backend_cpu.target import host_codegen\n"
            "from glow_backend_cpu.emit.qlookup import lookup_isa\n"
            f"assert lookup_isa(host_codegen().features) == {isa!r}\n"
            "import numpy as np\n"
            "from tests.cpu.test_qlookup import SHAPES, test_qlookup_matches_the_interpreter_and_the_table as t\n"
            "for s in SHAPES:\n"
            "    t(s)\n"
            "print('ok')\n")
    run_at_feature_level(code, level, tmp_path)
