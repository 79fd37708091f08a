"""The suite's vocabulary: results, categories, levels, cases and their outcomes."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The suite's version: printed and recorded in every report; bumped whenever cases, generators,
#: tolerances or verdict rules change (a backend's results are comparable within one version).
SUITE_VERSION = "1.1.0"


class Result(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    #: the backend declared it does not support what the case needs (never counts as a pass)
    UNSUPPORTED = "unsupported"
    #: failed or unsupported, but listed in the backend's waiver file with a reason (never for mandatory cases)
    WAIVED = "waived"

    def __str__(self) -> str:
        return self.value


RESULTS = tuple(Result)


class Level(str, enum.Enum):
    #: the mandatory primitives, the models that need only them, runtime behaviour
    CORE = "core"
    #: everything: every declared element kind, every high-level kind, the ONNX node tests if given
    FULL = "full"

    def __str__(self) -> str:
        return self.value


#: categories, in report order
CATEGORIES = ("primitive", "high-level", "model", "runtime", "symbolic", "onnx-node")


@dataclass(frozen=True)
class Outcome:
    """What running a case gave (before waivers)."""

    result: Result
    message: str = ""
    max_error: float | None = None
    tolerance: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    #: None: the case's own flag; False: the outcome shows the case is not mandatory after all
    mandatory: bool | None = None


@dataclass(frozen=True)
class Case:
    """One conformance case. ``id`` is ``category/kind-or-name/elem/variant`` (fewer parts where they do not apply).

    ``mandatory`` cases must pass for the backend to conform; they cannot be
    waived. ``level`` is the lowest level that includes the case.
    """

    id: str
    category: str
    level: Level
    mandatory: bool
    run: Callable[[Context], Outcome]
    kind: str = ""
    elem: str = ""
    variant: str = ""
    description: str = ""


class Context:
    """What a running case may use: the backend under test, the reference backend, suite options."""

    def __init__(self, backend: Any, reference: Any, *, backend_name: str = "", reference_name: str = "",
                 force_lowering: bool = False, seed: int = 0, node_test_timeout: float = 60.0) -> None:
        self.backend = backend
        self.reference = reference
        #: the registry names (what glow_core.compile takes)
        self.backend_name = backend_name or backend.name
        self.reference_name = reference_name or reference.name
        self.force_lowering = force_lowering
        self.seed = seed
        self.node_test_timeout = node_test_timeout
        #: caches shared by cases of one run (reference outputs of models, ...)
        self.cache: dict[Any, Any] = {}


@dataclass
class CaseRecord:
    """A case with its final result (after waivers), as reports list it."""

    case: Case
    result: Result
    #: the case's own flag, unless its outcome revised it (a model that needs more than the primitives)
    mandatory: bool = False
    message: str = ""
    max_error: float | None = None
    tolerance: str = ""
    seconds: float = 0.0
    waiver: str = ""  # the reason, when waived
    raw: Result | None = None  # the result before the waiver
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def blocks_conformance(self) -> bool:
        """Does this case keep the backend from conforming?"""
        if self.mandatory:
            return self.result is not Result.PASS
        return self.result is Result.FAIL


__all__ = ["CATEGORIES", "RESULTS", "SUITE_VERSION", "Case", "CaseRecord", "Context", "Level", "Outcome", "Result"]
