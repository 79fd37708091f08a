"""The capability report of a backend: what it runs natively, what is lowered for it, what is missing.

For every kind in the node-kind table, :func:`capability_report` says

- for a primitive: the element kinds the backend declares, the mandatory ones
  (``glow_sdk.primitives``) it lacks, and its predicate (if any);
- for a high-level kind: ``native`` (the backend declares it), ``lowered``
  (a lowering rule turns it into other kinds) or ``unsupported``.

``glow sdk capabilities NAME`` prints it; ``--json`` gives :meth:`CapabilityReport.as_dict`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from glow_core.ir.kinds import all_kinds
from glow_sdk.backend import Backend, DeviceInfo
from glow_sdk.primitives import mandatory_elems, primitive_kinds


@dataclass(frozen=True)
class KindCapability:
    kind: str
    primitive: bool
    status: str  # primitives: complete / partial / missing / optional (undeclared int8); others: native / lowered / unsupported
    declared: tuple[str, ...] = ()
    missing_mandatory: tuple[str, ...] = ()
    predicate: str = ""


@dataclass
class CapabilityReport:
    backend: str
    version: str
    sdk_api_version: int
    device: DeviceInfo | None
    kinds: list[KindCapability] = field(default_factory=list)
    #: declared kind names that are not in the kind table (a typo, or a kind of another glow release)
    unknown: list[str] = field(default_factory=list)

    @property
    def missing_mandatory(self) -> dict[str, tuple[str, ...]]:
        """Primitive kind -> mandatory element kinds the backend does not declare."""
        return {k.kind: k.missing_mandatory for k in self.kinds if k.missing_mandatory}

    def count(self, status: str) -> int:
        return sum(1 for k in self.kinds if k.status == status)

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "version": self.version, "sdk_api_version": self.sdk_api_version,
            "device": asdict(self.device) if self.device is not None else None,
            "kinds": [asdict(k) for k in self.kinds], "unknown": self.unknown,
            "missing_mandatory": {k: list(v) for k, v in self.missing_mandatory.items()},
        }

    def lines(self) -> list[str]:
        dev = (f"{self.device.name}, {self.device.memory_bytes / 2**30:.3g} GiB x {self.device.count}"
               if self.device is not None else "(create_device failed)")
        prims = [k for k in self.kinds if k.primitive]
        others = [k for k in self.kinds if not k.primitive]
        out = [f"backend {self.backend} {self.version} (SDK API {self.sdk_api_version}); device {dev}",
               (f"primitives: {self.count('complete')} of {len(prims)} complete, "
                f"{self.count('partial')} partial, {self.count('missing')} missing"),
               (f"high-level kinds: {self.count('native')} native, {self.count('lowered')} lowered, "
                f"{self.count('unsupported')} unsupported"), ""]
        width = max((len(k.kind) for k in self.kinds), default=4)
        out.append(f"{'KIND':<{width}}  {'STATUS':<11}  ELEMENT KINDS")
        for k in prims + others:
            elems = ", ".join(k.declared) or "-"
            extra = f"  (missing mandatory: {', '.join(k.missing_mandatory)})" if k.missing_mandatory else ""
            pred = f"  [only: {k.predicate}]" if k.predicate else ""
            out.append(f"{k.kind:<{width}}  {k.status:<11}  {elems}{extra}{pred}")
        if self.unknown:
            out += ["", f"declared kinds unknown to this glow: {', '.join(self.unknown)}"]
        return out


def capability_report(backend: Backend) -> CapabilityReport:
    """The capability report of ``backend`` (see the module doc)."""
    from glow_core.lowering.table import lowerings

    rules = lowerings()
    caps = list(backend.capabilities())
    declared: dict[str, set[str]] = {}
    why: dict[str, list[str]] = {}
    for c in caps:
        declared.setdefault(c.kind, set()).update(e.value for e in c.elems)
        if c.when is not None:
            why.setdefault(c.kind, []).append(c.why or "a predicate")
    try:
        device: DeviceInfo | None = backend.create_device()
    except Exception:  # noqa: BLE001  (a report of a broken backend still lists its kinds)
        device = None
    report = CapabilityReport(backend.name, str(backend.version), int(backend.sdk_api_version), device)
    table = all_kinds()
    prims = primitive_kinds()
    report.unknown = sorted(k for k in declared if k not in table)
    for kind in sorted(table):
        have = tuple(sorted(declared.get(kind, ())))
        pred = "; ".join(why.get(kind, []))
        if kind in prims:
            need = mandatory_elems(kind)
            missing = tuple(sorted(e.value for e in need if e.value not in have))
            status = ("missing" if need else "optional") if not have else ("partial" if missing else "complete")
            report.kinds.append(KindCapability(kind, True, status, have, missing, pred))
        else:
            status = "native" if have else ("lowered" if kind in rules else "unsupported")
            report.kinds.append(KindCapability(kind, False, status, have, (), pred))
    return report


__all__ = ["CapabilityReport", "KindCapability", "capability_report"]
