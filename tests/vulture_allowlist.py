# ruff: noqa
# mypy: ignore-errors
"""Names vulture cannot see used, for tests/test_code_shape.py (vulture's whitelist format).

vulture scans only the packages (tests/test_code_shape.py: SCANNED); a function used only by
the tests, the docs, the conformance suite or an outside caller looks unused to it. Each
entry says why it stays. Registration decorators (``@import_rule``, ``@lowering``,
``@KERNELS.register``, ``@hookimpl``, ...) are not listed here: the test passes them to
``--ignore-decorators`` (a registered function is used through its table).

Never list dead code here: delete it. This file is parsed by vulture, never imported.
"""

# -- the recorded SDK surface (glow_sdk/surface.json, tests/sdk/test_surface.py): public API for
#    backends; removing a name is an SDK API change
like_input  # unused function (glow_core/ir/defs/common.py)
broadcast_bool_rule  # unused function (glow_core/ir/defs/common.py)
_.inserting_after  # unused method (glow_core/ir/graph.py)
_.create_function  # unused method (glow_core/ir/graph.py)
special_kinds  # unused function (glow_core/lir/instructions.py)
is_lifetime  # unused function (glow_core/lir/ir.py)
_.offset_of  # unused method (glow_core/lir/memory.py)

# -- backend hooks the framework calls on any backend: the conformance suite reads
#    Backend.conformance_waivers() (conformance/glow_conformance/suite.py, outside the scan)
_.conformance_waivers  # unused method (glow_sdk/backend.py, glow_tools/scaffold/backend.py, cpu backend.py)
# the device API (SDK API 2.2, glow_sdk/device.py): a backend's executables allocate their output buffers with
# DeviceMemory.allocate (tests/runtime/device_plugin.py overrides it); the runtime only copies and frees
_.allocate  # unused method (glow_sdk/device.py)

# -- public API whose callers are outside the scanned packages
# the scaffold's template backend: `glow sdk new` renames it by name (glow_tools/scaffold/__init__.py);
# tests/sdk subclass it
TemplateBackend  # unused class (glow_tools/scaffold/backend.py)
# the cpu executable's thread count (docs/cpu-backend.md; tests/cpu/test_threading.py)
_.set_threads  # unused method (plugins/cpu/glow_backend_cpu/runtime.py)
# IR helpers for kernel writers, documented in docs/cpu-backend.md ("helpers.py")
if_likely  # unused function (plugins/cpu/glow_backend_cpu/helpers.py)
if_unlikely  # unused function (plugins/cpu/glow_backend_cpu/helpers.py)
# the host manager's per-device status and the Ray cluster's weight bookkeeping: public runtime API
# (docs/runtime.md; tests/runtime/test_ray.py)
_.device_status  # unused method (glow_core/runtime/host_manager.py)
_.weights_held  # unused method (glow_core/runtime/cluster/connect.py)
# a command added by a distribution in-process (tests/test_cli.py; the entry-point group glow.commands)
register_command  # unused function (glow_cli/main.py)
# the package root's lazy facade (glow_core.compile, ...): Python calls a module's __getattr__ itself
__getattr__  # unused function (glow_core/__init__.py)

# -- glow_core.InferenceSession: onnxruntime's session interface, called by user scripts (tests/test_session.py
#    runs an onnxruntime script against it; docs/python-api.md documents every method)
_.ortvalue_from_numpy  # unused method (glow_core/session/binding.py)
_.bind_cpu_input  # unused method (glow_core/session/binding.py)
_.bind_output  # unused method (glow_core/session/binding.py)
_.bind_ortvalue_output  # unused method (glow_core/session/binding.py)
_.clear_binding_outputs  # unused method (glow_core/session/binding.py)
_.get_outputs  # unused method (glow_core/session/binding.py, session.py)
_.copy_outputs_to_cpu  # unused method (glow_core/session/binding.py)
_.get_providers  # unused method (glow_core/session/session.py)
_.get_session_options  # unused method (glow_core/session/session.py)
_.io_binding  # unused method (glow_core/session/session.py)
_.run_with_iobinding  # unused method (glow_core/session/session.py)
_.run_async  # unused method (glow_core/session/session.py)

# -- dynamic shapes (docs/dynamic-shapes.md, tests/dynamic/): public API called by user code
_.set_cache_limits  # unused method (glow_core/pipeline/specialize.py): DynamicNetwork's LRU bounds
_.add_free_dimension_override_by_name  # unused method (glow_core/session/session.py): onnxruntime's SessionOptions
_.specialization  # unused method (glow_core/pipeline/specialize.py): one shape's network, named in the STATIC_ONLY error
_.precompile  # unused method (glow_core/pipeline/specialize.py): DynamicNetwork.precompile, called by user code and scripts/bench_transformers.py

# -- the cpu backend's work split (docs/cpu-backend.md, tests/cpu/test_split_balance.py, scripts/bench_split.py)
_.set_split  # unused method (plugins/cpu/glow_backend_cpu/runtime.py): pins the split for tests and measurements

# -- the cpu backend's handed outputs (plugins/cpu/glow_backend_cpu/symio.py, tests/cpu/test_symbolic_io.py)
_.pooled  # unused method (plugins/cpu/glow_backend_cpu/symio.py): how many buffers the pools keep, for the tests
