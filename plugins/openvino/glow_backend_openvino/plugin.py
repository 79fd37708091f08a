"""Entry point module of the backend (group ``glow.backends``, name ``openvino``).

Kept light: OpenVINO is imported by the factory, on first use, so ``glow backends`` stays cheap.
"""

from __future__ import annotations

from glow_backend_openvino import __version__
from glow_sdk import Backend, BackendSpec, hookimpl

#: the SDK API version this backend was written against (claims, refusals: 2.1)
SDK_API = "2.1"


def _make() -> Backend:
    from glow_backend_openvino.backend import OpenVinoBackend

    return OpenVinoBackend()


@hookimpl
def glow_backends() -> list[BackendSpec]:
    return [BackendSpec(name="openvino", factory=_make, sdk_api_version=SDK_API, version=__version__,
                        description="OpenVINO (CPU): partitions as ONNX, claimed by OpenVINO's query_model, "
                                    "run with asynchronous infer requests")]
