"""Text templates of the files ``glow sdk new-backend`` writes besides ``backend.py`` and ``kernels.py``.

Placeholders (``str.format`` fields): ``name`` (backend and entry-point name),
``dist`` (distribution, ``glow-backend-NAME``), ``package`` (import package),
``cls`` (backend class), ``sdk`` (SDK API version), ``glow`` (the glow version
that scaffolded it), ``core_dist`` and ``core_req`` (the core distribution and the requirement on it
matching ``sdk``, from :func:`glow_sdk.version.core_requirement`). Braces meant literally are doubled.
"""

from __future__ import annotations

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=77", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "A glow backend: {name}"
readme = "README.md"
requires-python = ">=3.10"
# the license you publish this backend under (an SPDX expression): glow's own, change it if yours differs
license = "Apache-2.0"
# {core_dist} releases 0.{sdk}.x define glow SDK API version {sdk}, the one this backend targets
dependencies = ["{core_req}", "numpy>=1.24"]

[project.optional-dependencies]
test = ["pytest>=7", "glow-conformance"]

# add your backend's pages (Homepage, Source, Issues) here
[project.urls]
"Glow vendor guide" = "https://github.com/glow-compiler/glow/blob/main/docs/vendor-guide.md"

# glow finds the backend through this entry point (group glow.backends)
[project.entry-points."glow.backends"]
{name} = "{package}.plugin"

[tool.setuptools.packages.find]
include = ["{package}*"]

[tool.setuptools.package-data]
{package} = ["conformance_waivers.txt"]
'''

INIT = '''\
"""The glow backend '{name}' (distribution {dist}).

Scaffolded by glow {glow} (`glow sdk new-backend {name}`), for glow SDK API version {sdk}.
"""

__version__ = "0.1.0"
'''

PLUGIN = '''\
"""Entry point module of the backend (group ``glow.backends``, name ``{name}``).

glow imports this module when it lists or uses backends, and calls
``glow_backends()``. Keep it light: the backend object is created by the
factory, on first use.
"""

from __future__ import annotations

from {package} import __version__
from glow_sdk import Backend, BackendSpec, hookimpl

#: the SDK API version this backend was written against: a glow that cannot load it says so
SDK_API = {sdk}


def _make() -> Backend:
    from {package}.backend import {cls}

    return {cls}()


@hookimpl
def glow_backends() -> list[BackendSpec]:
    return [BackendSpec(name="{name}", factory=_make, sdk_api_version=SDK_API, version=__version__,
                        description="{name}: the mandatory primitives as numpy kernels (scaffolded)")]
'''

WAIVERS = '''\
# Conformance waivers of {dist}: cases of `glow conformance --backend {name}` that may fail,
# one per line as  CASE-ID-PATTERN: reason   (* matches any text; # starts a comment).
# Mandatory cases (the primitives at their mandatory element kinds, the models, runtime behaviour)
# cannot be waived. Example:
#
#   high-level/LSTM/float16/*: the device accumulates LSTM gates in float16
'''

TEST_CONFORMANCE = '''\
"""The conformance suite on this backend: `pytest` here, or `glow conformance --backend {name}`.

Needs the backend installed (pip install -e .) and glow-conformance (pip install -e ".[test]").
The same cases also run one test each with `pytest --glow-backend {name} --pyargs glow_conformance`.
"""

from __future__ import annotations

import pytest

glow_conformance = pytest.importorskip("glow_conformance")


def test_core_conformance() -> None:
    report = glow_conformance.run_suite("{name}", level="core")
    assert report.conformant, "\\n".join(report.summary_lines())
'''

TEST_KERNELS = '''\
"""Unit tests of single kernels against the reference backend (glow_tools.testing)."""

from __future__ import annotations

import numpy as np
import pytest

from glow_tools.testing import check_node

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("kind", ["Add", "Mul", "Max", "Div"])
def test_binary_float32(kind: str) -> None:
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.uniform(0.5, 2.0, (4,)).astype(np.float32)  # broadcasts
    r = check_node("{name}", kind, [a, b])
    assert r.ok, r.message


def test_conv() -> None:
    x = RNG.standard_normal((1, 3, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    r = check_node("{name}", "Conv", [x, w, None], {{"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1)}})
    assert r.ok, r.message


def test_softmax_is_lowered_onto_the_primitives() -> None:
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    r = check_node("{name}", "Softmax", [x], {{"axes": (1,)}})
    assert r.ok, r.message
    assert "Softmax" not in r.nodes  # glow lowered it: ReduceMax, Sub, Exp, ReduceSum, Div
'''

README = '''\
# {dist}: the glow backend `{name}`

Scaffolded by `glow sdk new-backend {name}` (glow {glow}, SDK API version {sdk}). It runs the
**mandatory primitive set** with simple numpy kernels; glow lowers every other node kind onto
those primitives before the backend sees the graph. Replace the kernels with your device's.

## Layout

```
pyproject.toml                      entry point: [project.entry-points."glow.backends"] {name} = "{package}.plugin"
{package}/plugin.py        the glow_backends() hook: name, version, SDK API version, factory
{package}/backend.py       {cls}: capabilities, compile -> Executable, create_device
{package}/kernels.py       one numpy kernel per primitive kind (the table KERNELS)
{package}/conformance_waivers.txt   cases allowed to fail, with reasons (none yet)
tests/                              the conformance suite, and kernel unit tests against the reference
```

## Try it

```
pip install -e ".[test]"                 # or: pip install .
glow backends                            # {name} is listed, status ok
glow sdk capabilities {name}             # what it runs natively, what glow lowers for it
glow conformance --backend {name}        # the suite, level core: passes as scaffolded
glow run zoo:squeezenet --backend {name}
pytest tests/
```

## Bring up your hardware

1. In `kernels.py`, replace a kernel by a call into your device library, one primitive at a time;
   `glow conformance --backend {name} -k primitive/Add` checks just that one.
2. In `backend.py`, narrow `ELEMS` / `capabilities()` to what the device really runs (a capability
   may carry a predicate on attributes and shapes). Whatever you drop is lowered by glow, or listed as
   unsupported (all offending nodes at once).
3. For real code generation, compile the whole lowered function in `compile()` and return your own
   `CompiledFunction`; `transform_post_lowering()` is the place for device-specific fusions.
4. Report the device memory in `create_device()`.
5. Run `glow conformance --backend {name} --level full` and list justified exceptions in
   `conformance_waivers.txt`. Reports (JSON, JUnit XML, Markdown) land in `--report-dir`.
6. `glow compare MODEL --backend {name} --reference interpreter` names the first node whose result
   diverges when a model disagrees.

`SDK_API` in `plugin.py` and `backend.py` is the glow SDK API version this backend was written for;
a glow release that cannot load it lists the backend as `incompatible` and says what to upgrade.
See glow's docs/vendor-guide.md.
'''

__all__ = ["INIT", "PLUGIN", "PYPROJECT", "README", "TEST_CONFORMANCE", "TEST_KERNELS", "WAIVERS"]
