"""SDK API 2.1: the version's minor number and history, the executable's declared members, the backend
option schema, the claiming hook's default, and a backend written against SDK API 2.0 still working."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

import glow_core
from glow_core.ir.graph import Function
from glow_core.plugin_host import get_backend, registry
from glow_core.runtime import HostManager, parse_devices, plan_network
from glow_sdk import CompiledFunction
from glow_sdk.backend import connected_groups
from glow_sdk.options import CORE_OPTIONS, BackendOption, BackendOptionError, check_options
from glow_sdk.version import (
    HISTORY,
    SDK_API_RELEASE,
    ApiVersion,
    features_of,
    incompatibility_message,
    is_compatible,
)
from tests.cliutil import add_relu_model
from tests.sdk import sdk20_backend

X = {"x": np.arange(10, dtype=np.float32)[None] - 5, "y": np.ones((1, 10), np.float32)}


@pytest.fixture(scope="module", autouse=True)
def sdk20() -> None:
    if registry().record("sdk20") is None:
        registry().register_plugin(sdk20_backend.plugin, "sdk20", "glow-backend-sdk20", "2.0.0")


def test_versions_have_a_minor_number_and_old_integers_still_load() -> None:
    assert str(SDK_API_RELEASE) == "2.7" and ApiVersion.parse("2.7") == SDK_API_RELEASE
    assert ApiVersion.parse(2) == ApiVersion(2, 0) < SDK_API_RELEASE and ApiVersion.parse("2") is None
    assert is_compatible(1) and is_compatible(2) and is_compatible("2.0") and is_compatible("2.1")
    assert is_compatible("2.7") and not is_compatible("2.8") and not is_compatible("1.1") and not is_compatible(3)
    assert "upgrade glow-compiler to a release that supports SDK API 2.8" in incompatibility_message("2.8", "x")


def test_the_history_lists_every_hook_with_its_version() -> None:
    since = {f.name: str(f.since) for f in HISTORY}
    for hook in ("save_bundle", "program_identity", "load_program", "store_program"):
        assert since[f"Backend.{hook}"] == "2.0"
    for member in ("memory", "close", "lir", "threads", "profile_run", "compile_timings"):
        assert since[f"CompiledFunction.{member}"] == "2.1"
    assert since["Backend.claim"] == since["Backend.options"] == since["Backend.min_partition_nodes"] == "2.1"
    assert [f.since for f in HISTORY] == sorted(f.since for f in HISTORY)
    assert {f.name for f in features_of(2)} == {f.name for f in HISTORY if f.since <= ApiVersion(2, 0)}
    declared = {name for name in vars(CompiledFunction) if not name.startswith("_")} - {"execute", "memory_plan"}
    assert {f"CompiledFunction.{m}" for m in declared} - {"CompiledFunction.profiles"} <= set(since)


def test_executable_features_are_declared_with_defaults() -> None:
    class Bare(CompiledFunction):
        def execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {}

    exe = Bare(Function("f"))
    assert (exe.memory, exe.lir, exe.threads, exe.compile_timings, exe.profiles) == (None, None, None, None, False)
    assert exe.memory_plan() is None and exe.close() is None
    with pytest.raises(glow_core.errors.UnsupportedError, match="cannot profile runs"):
        exe.profile_run()


def test_option_schema_refuses_unknown_keys_with_the_list() -> None:
    schema = [BackendOption("tile", int, 64, "tile size")]
    check_options("x", {"tile": 8, "cache": False}, schema)
    with pytest.raises(BackendOptionError, match=r"backend 'x' has no option 'tiles'; choose from: .*tile"):
        check_options("x", {"tiles": 8}, schema)
    with pytest.raises(BackendOptionError, match="option 'tile' takes int, got str"):
        check_options("x", {"tile": "8"}, schema)
    with pytest.raises(BackendOptionError, match="has no option 'bogus'.*compile_jobs"):
        glow_core.compile(add_relu_model(), "cpu", options={"bogus": 1})
    with pytest.raises(BackendOptionError, match="has no option 'compile_jobs'.*executor"):
        glow_core.compile(add_relu_model(), "interpreter", options={"compile_jobs": 1})
    assert {o.name for o in CORE_OPTIONS} >= {"cache", "fast_math", "max_tensor_bytes", "max_total_bytes"}


def test_a_device_list_takes_the_options_of_any_of_its_backends() -> None:
    with HostManager("interpreter:1,cpu:1") as hm:
        hm.add_network("m", add_relu_model(), options={"executor": "graph", "compile_jobs": 1})
        np.testing.assert_array_equal(hm.run_sync("m", X)["out"], np.maximum(X["x"] + X["y"], 0))
        with pytest.raises(BackendOptionError, match="no backend of the device list .* 'bogus'"):
            hm.add_network("n", add_relu_model(), options={"bogus": 1})


def test_the_default_claim_is_the_connected_groups_of_supported_nodes() -> None:
    fn = plan_network(add_relu_model(), parse_devices("cpu:1")).function
    groups = get_backend("cpu").claim(fn)
    assert [[n.name for n in g] for g in groups] == [[n.name for n in fn.nodes]]
    assert connected_groups(fn, []) == []


def test_a_backend_written_for_sdk_2_0_still_loads_and_runs() -> None:
    rec = registry().record("sdk20")
    assert rec is not None and rec.status == "ok"
    net = glow_core.compile(add_relu_model(), "sdk20", options={"tile": 2})  # an undeclared key: not checked
    np.testing.assert_array_equal(net.run(X)["out"], np.maximum(X["x"] + X["y"], 0))
    exe = net.executable
    assert exe.memory_plan() is not None and exe.memory_plan().arena_bytes == 8192  # memory() as a method
    assert dict(exe.compile_timings or {}) == {"codegen": 0.0}
    with HostManager("sdk20:1") as hm:
        hm.add_network("m", add_relu_model(), options={"tile": 3})
        np.testing.assert_array_equal(hm.run_sync("m", X)["out"], np.maximum(X["x"] + X["y"], 0))
        assert hm.managers["sdk200"].used_bytes >= 3 * 4096
