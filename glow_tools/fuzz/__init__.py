"""A mutation fuzzer for glow: seeds (ONNX node tests, light zoo models), seeded mutators,
forked children under CPU, wall-clock and memory limits, and a classification judged by
``onnx.reference`` (see docs/robustness.md, "The fuzzer").

- :mod:`glow_tools.fuzz.seeds`: the seed models and their inputs;
- :mod:`glow_tools.fuzz.mutators`, :mod:`glow_tools.fuzz.mutators_data`: the mutators (:data:`MUTATORS`);
- :mod:`glow_tools.fuzz.cases`: a case from (campaign seed, index), written to a folder;
- :mod:`glow_tools.fuzz.isolate`: a forked child under limits;
- :mod:`glow_tools.fuzz.runners`: glow, the reference and onnxruntime in a child; the classes;
- :mod:`glow_tools.fuzz.float64`: the float64 rule (is a disputed element determined in float32?);
- :mod:`glow_tools.fuzz.campaign`: a resumable campaign, reproductions, replay, the table;
- :mod:`glow_tools.fuzz.cli`: ``scripts/fuzz_campaign.py``.
"""

from __future__ import annotations

from glow_tools.fuzz.cases import Mutator
from glow_tools.fuzz.mutators import MODEL_MUTATORS
from glow_tools.fuzz.mutators_data import DATA_MUTATORS

#: every mutator, by name
MUTATORS: dict[str, Mutator] = {**MODEL_MUTATORS, **DATA_MUTATORS}

__all__ = ["MUTATORS"]
