"""Developer tooling over the compiler: what backend authors and Glow developers run, not what backends import.

| module | what it does |
|---|---|
| ``glow_tools.testing`` | run one node / one function on a backend and on the reference (``check_node``) |
| ``glow_tools.divergence`` | the first node where a backend diverges from the reference (``glow compare``) |
| ``glow_tools.capabilities`` | a backend's capability report through lowering (``glow sdk capabilities``) |
| ``glow_tools.scaffold`` | a new backend package, ready for pip install (``glow sdk new-backend``) |
| ``glow_tools.nodetests`` | the ONNX node-test runner (the node-test ratchet and the conformance suite) |

This package sits above the core (it drives ``glow_core.pipeline`` and ``glow_core.api``, the plugin host,
the importer and lowering) and below ``glow_cli`` and ``glow_conformance``;
the import-linter contract in pyproject.toml enforces it (docs/architecture.md).
"""
