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
from glow_core.ir.types import ElemKind
from glow_sdk.backend import Backend, DeviceInfo
from glow_sdk.primitives import mandatory_elems, primitive_kinds
from glow_sdk.version import ApiVersion


#: the 8-bit element kinds of quantized models, and the primitives the int8 conversion computes with
EIGHT_BIT = frozenset({ElemKind.INT8, ElemKind.UINT8})
INT8_KINDS = ("IntConv", "IntMatMul", "Requantize")


@dataclass(frozen=True)
class KindCapability:
    kind: str
    primitive: bool
    status: str  # primitives: complete / partial / missing / optional (undeclared int8); others: native / lowered / unsupported
    declared: tuple[str, ...] = ()
    missing_mandatory: tuple[str, ...] = ()
    predicate: str = ""
    #: a primitive defined for 8-bit elements: does the backend declare int8 or uint8 for it? (None: not one)
    eight_bit: bool | None = None


@dataclass
class CapabilityReport:
    backend: str
    version: str
    #: as the backend declares it: an integer N, or "N.M"
    sdk_api_version: int | str
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

    def int8_line(self) -> str:
        """int8 coverage: the primitives defined for 8-bit elements that the backend declares them for, and
        whether the quantized products (INT8_KINDS) run natively or int8 models fall back for them."""
        eight = [k for k in self.kinds if k.eight_bit is not None]
        have = [k for k in eight if k.eight_bit]
        quant = [k.kind for k in have if k.kind in INT8_KINDS]
        verdict = ("quantized models run natively" if len(quant) == len(INT8_KINDS) else
                   f"int8 models need {', '.join(sorted(set(INT8_KINDS) - set(quant)))} from another device")
        return f"int8: {len(have)} of {len(eight)} primitives that take 8-bit elements declare them; {verdict}"

    def lines(self) -> list[str]:
        dev = (f"{self.device.name}, {self.device.memory_bytes / 2**30:.3g} GiB x {self.device.count}"
               if self.device is not None else "(create_device failed)")
        prims = [k for k in self.kinds if k.primitive]
        others = [k for k in self.kinds if not k.primitive]
        out = [f"backend {self.backend} {self.version} (SDK API {self.sdk_api_version}); device {dev}",
               (f"primitives: {self.count('complete')} of {len(prims)} complete, "
                f"{self.count('partial')} partial, {self.count('missing')} missing"),
               (f"high-level kinds: {self.count('native')} native, {self.count('lowered')} lowered, "
                f"{self.count('unsupported')} unsupported"), self.int8_line(), ""]
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
    version = backend.sdk_api_version
    api = version if isinstance(version, int) else str(ApiVersion.parse(version) or version)
    report = CapabilityReport(backend.name, str(backend.version), api, device)
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
            takes = bool(table[kind].elems & EIGHT_BIT)
            eight = bool(set(have) & {e.value for e in EIGHT_BIT}) if takes else None
            report.kinds.append(KindCapability(kind, True, status, have, missing, pred, eight))
        else:
            status = "native" if have else ("lowered" if kind in rules else "unsupported")
            report.kinds.append(KindCapability(kind, False, status, have, (), pred))
    return report


__all__ = ["CapabilityReport", "KindCapability", "capability_report"]
