"""Symbols and bounds at the model boundary: what each graph input's dimensions are, and which fed shapes
conform to them.

A graph input's dimension is a constant (``dim_value`` >= 0), a named symbol (``dim_param``, e.g.
``"sequence"``) or unknown (``"?"``, an empty dimension, ``-1``): each unknown dimension is its own anonymous
symbol, so ``[-1, 3, '?', '?']`` has an independent height and width. A symbol may carry a
:class:`DimBound` (min, max, multiple-of), given by the user (``dims={"sequence": (1, 512)}``,
``--dim sequence=1:512``); ``dims={"sequence": 128}`` fixes it instead, in every input that names it.

One named symbol fed two different sizes in two inputs is accepted, as onnxruntime accepts it: the fed
shapes decide, and shape inference (the import of the specialized model) checks what the ops require.

In: an ``onnx.ModelProto`` (its graph inputs) and the user's ``input_shapes`` / ``dims``. Out:
:class:`ModelSymbols` (each input's :class:`Dim` list), the shapes the user's arguments fix
(:meth:`ModelSymbols.resolve`) and the check of a fed shape (:meth:`ModelSymbols.check`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from glow_core.errors import GlowError, ImportShapeError

#: how an anonymous (unknown) dimension prints
ANONYMOUS = "?"


@dataclass(frozen=True)
class DimBound:
    """The sizes a symbol may take: ``min <= size <= max`` (``max`` None: no upper bound) and a multiple of
    ``multiple_of``."""

    min: int = 0
    max: int | None = None
    multiple_of: int = 1

    def __post_init__(self) -> None:
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (self.min, self.multiple_of)) and \
            (self.max is None or (isinstance(self.max, int) and not isinstance(self.max, bool)))
        if not ok or self.min < 0 or self.multiple_of < 1 or (self.max is not None and self.max < self.min):
            raise ImportShapeError(f"{self!r} is not a valid bound",
                                   hint="min >= 0, max >= min (or None), multiple_of >= 1, all integers")

    def violation(self, size: int) -> str | None:
        """Why ``size`` is out of this bound, or None."""
        if size < self.min:
            return f"below the minimum {self.min}"
        if self.max is not None and size > self.max:
            return f"above the maximum {self.max}"
        if size % self.multiple_of:
            return f"not a multiple of {self.multiple_of}"
        return None

    def __str__(self) -> str:
        text = f"{self.min}..{'' if self.max is None else self.max}"
        return text + (f" (multiple of {self.multiple_of})" if self.multiple_of > 1 else "")


#: what ``dims=`` maps a symbol to: a size (fixes it) or a bound
DimValue = int | DimBound


def _dim_value(name: str, value: Any) -> DimValue:
    """One ``dims=`` entry: an int >= 0, a (min, max) pair (max None: unbounded) or a :class:`DimBound`."""
    if isinstance(value, DimBound):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value < 0:
            raise ImportShapeError(f"dims['{name}'] = {value} is negative", hint="give a size >= 0")
        return int(value)
    if isinstance(value, (tuple, list)) and len(value) == 2:
        lo, hi = value
        return DimBound(int(lo) if lo is not None else 0, None if hi is None else int(hi))
    raise ImportShapeError(f"dims['{name}'] = {value!r} is neither a size, a (min, max) pair nor a DimBound",
                           hint='e.g. dims={"sequence": 128} or dims={"sequence": (1, 512)}')


def check_dims(dims: Any) -> dict[str, DimValue]:
    """``dims=`` checked: symbol name -> size or :class:`DimBound`."""
    if dims is None:
        return {}
    if not isinstance(dims, Mapping) or not all(isinstance(k, str) and k for k in dims):
        raise ImportShapeError(f"dims must be a dict of symbol name -> size or bound, got {dims!r}",
                               hint='e.g. dims={"batch": 1, "sequence": (1, 512)}')
    return {k: _dim_value(k, v) for k, v in dims.items()}


class InputShapes(dict):  # type: ignore[type-arg]
    """``input_shapes`` (input name -> shape) carrying ``dims`` (symbol -> size or bound) along with it.

    Every route that imports a model checks its ``input_shapes`` argument (``glow_core.pipeline.args``);
    the dims travel with them to the importer, which applies them to every input that names the symbol.
    An instance with dims only is true.
    """

    def __init__(self, shapes: Mapping[str, Any] | None = None, dims: Mapping[str, DimValue] | None = None) -> None:
        super().__init__(shapes or {})
        self.dims: dict[str, DimValue] = dict(dims or {})

    def __bool__(self) -> bool:
        return len(self) > 0 or bool(self.dims)


def dims_of(shapes: Any) -> dict[str, DimValue]:
    """The dims an ``input_shapes`` argument carries (none for a plain dict)."""
    return dict(getattr(shapes, "dims", None) or {})


@dataclass(frozen=True)
class Dim:
    """One declared dimension of a graph input: a fixed ``size``, a named ``symbol``, or neither (anonymous)."""

    size: int | None = None
    symbol: str | None = None

    @property
    def label(self) -> str:
        return str(self.size) if self.size is not None else (self.symbol or ANONYMOUS)


def _dims_of(vi: onnx.ValueInfoProto) -> tuple[Dim, ...] | None:
    """An input's declared dimensions; None when it declares no shape (unknown rank)."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(Dim(size=d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                 else Dim(symbol=d.dim_param if d.dim_param not in ("", ANONYMOUS) else None) for d in tt.shape.dim)


@dataclass(frozen=True)
class InputDims:
    """A tensor graph input: its name, element type name and declared dimensions (None: unknown rank)."""

    name: str
    elem: str
    dims: tuple[Dim, ...] | None

    def describe(self) -> str:
        """``float32[batch,sequence,768]`` (``float32[*]`` for an unknown rank)."""
        inner = "*" if self.dims is None else ",".join(d.label for d in self.dims)
        return f"{self.elem}[{inner}]"

    def resolve(self, dims: Mapping[str, DimValue]) -> tuple[int, ...] | None:
        """The shape ``dims`` fix for this input, or None while a dimension stays open."""
        if self.dims is None:
            return None
        out: list[int] = []
        for d in self.dims:
            value = d.size if d.size is not None else dims.get(d.symbol or "")
            if not isinstance(value, int):
                return None
            out.append(value)
        return tuple(out)


def _elem_name(vi: onnx.ValueInfoProto) -> str:
    """The element type's numpy name (``float32``), else its ONNX name, else its number (the importer refuses
    a number that is no data type, naming the input)."""
    elem = vi.type.tensor_type.elem_type
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name
    except (KeyError, TypeError, ValueError):
        try:
            return onnx.TensorProto.DataType.Name(elem).lower()
        except ValueError:
            return f"elem_type {elem}"


class ModelSymbols:
    """The symbols of a model's tensor inputs and the user's dims (sizes and bounds) for them."""

    def __init__(self, proto: onnx.ModelProto, dims: Mapping[str, DimValue] | None = None) -> None:
        inits = {t.name for t in proto.graph.initializer}
        self.inputs: dict[str, InputDims] = {
            vi.name: InputDims(vi.name, _elem_name(vi), _dims_of(vi))
            for vi in proto.graph.input if vi.name not in inits and vi.type.HasField("tensor_type")}
        #: inputs that are sequences, optionals or maps (their shapes are not symbols of this table)
        self.structured = [vi.name for vi in proto.graph.input
                           if vi.name not in inits and not vi.type.HasField("tensor_type")]
        self.dims: dict[str, DimValue] = dict(dims or {})
        self._name_anonymous()
        named = {d.symbol for i in self.inputs.values() for d in i.dims or () if d.symbol}
        unknown = sorted(set(self.dims) - named)
        if unknown:
            anonymous = [f"{n}:{k}" for n, i in self.inputs.items() for k, d in enumerate(i.dims or ())
                         if d.size is None and not d.symbol]
            raise ImportShapeError(
                f"dims names {', '.join(repr(n) for n in unknown)}, which no input of the model uses; its "
                f"symbols are: {', '.join(sorted(named)) or '(none)'}"
                + (f"; its unknown dims, named input:axis: {', '.join(anonymous)}" if anonymous else ""),
                hint="name a symbol the model declares (glow dump MODEL shows each input's dims)")

    def _name_anonymous(self) -> None:
        """An unknown dim the dims name as ``input:axis`` (``dims={"x:2": (1, 320)}``) becomes that symbol."""
        for key in self.dims:
            name, _, axis = key.rpartition(":")
            inp = self.inputs.get(name)
            if inp is None or inp.dims is None or not axis.isdigit() or int(axis) >= len(inp.dims):
                continue
            k = int(axis)
            if inp.dims[k].size is None and not inp.dims[k].symbol:
                self.inputs[name] = InputDims(inp.name, inp.elem, inp.dims[:k] + (Dim(symbol=key),) + inp.dims[k + 1:])

    def symbols(self) -> list[str]:
        """The named symbols, in order of first use."""
        return list(dict.fromkeys(d.symbol for i in self.inputs.values() for d in i.dims or () if d.symbol))

    def resolve(self, shapes: Mapping[str, Any] | None) -> dict[str, Any]:
        """``shapes`` plus the shape of every other input the dims (or its declaration) fix completely."""
        out = dict(shapes or {})
        for name, inp in self.inputs.items():
            if name not in out:
                shape = inp.resolve(self.dims)
                if shape is not None:
                    out[name] = shape
        return out

    def open_inputs(self, shapes: Mapping[str, Any] | None) -> list[str]:
        """The inputs whose shape neither ``shapes`` nor the dims fix (structured ones included)."""
        fixed = self.resolve(shapes)
        return [n for n in [*self.inputs, *self.structured] if n not in fixed]

    def check(self, name: str, shape: tuple[int, ...], error: type[GlowError] = ImportShapeError) -> None:
        """``error`` naming the input, the dimension and what it must be, when ``shape`` does not conform."""
        inp = self.inputs.get(name)
        if inp is None or inp.dims is None:
            return
        if len(shape) != len(inp.dims):
            raise error(f"input '{name}' has shape {list(shape)} (rank {len(shape)}); the model declares "
                        f"{inp.describe()} (rank {len(inp.dims)})")
        for axis, (d, size) in enumerate(zip(inp.dims, shape)):
            want = d.size if d.size is not None else self.dims.get(d.symbol or "")
            if isinstance(want, int) and size != want:
                what = "fixed dimension" if d.size is not None else f"dimension '{d.symbol}' (fixed by dims)"
                raise error(f"input '{name}' has {size} at axis {axis}, where the model's {what} is {want} "
                            f"({inp.describe()})", hint=f"feed an array of shape {inp.describe()}")
            why = want.violation(size) if isinstance(want, DimBound) else None
            if why is not None:
                raise error(f"input '{name}' has {size} at axis {axis} (dimension '{d.symbol}'), {why}: the bound "
                            f"of '{d.symbol}' is {want}", hint=f"feed a size within {want}, or widen the bound")


    def probe(self, shapes: Mapping[str, Any] | None, taken: set[int]) -> tuple[dict[str, Any], dict[int, str]]:
        """Shapes for every tensor input (``shapes`` first, then what dims fix, then a distinct prime probe size
        per open symbol, none of them in ``taken``) and {probe size: symbol label}: how a function imported at
        the probe sizes prints its symbols (``glow dump``)."""
        out = self.resolve(shapes)
        sizes: dict[str, int] = {}
        names: dict[int, str] = {}
        candidate = 61
        for name, inp in self.inputs.items():
            if name in out or inp.dims is None:
                continue
            dims: list[int] = []
            for k, d in enumerate(inp.dims):
                fixed = d.size if d.size is not None else self.dims.get(d.symbol or "")
                if isinstance(fixed, int):
                    dims.append(fixed)
                    continue
                key = d.symbol or f"{name}:{k}"  # each anonymous dim is its own symbol
                if key not in sizes:
                    while candidate in taken or any(candidate % q == 0 for q in range(2, 8)):
                        candidate += 2
                    sizes[key] = candidate
                    names[candidate] = d.label
                    candidate += 2
                dims.append(sizes[key])
            out[name] = tuple(dims)
        return out, names


def describe_inputs(proto: onnx.ModelProto) -> dict[str, str]:
    """Each tensor input's declared type with its symbols: ``{"ids": "int64[batch,sequence]"}``."""
    return {n: i.describe() for n, i in ModelSymbols(proto).inputs.items()}


__all__ = ["ANONYMOUS", "Dim", "DimBound", "DimValue", "InputDims", "InputShapes", "ModelSymbols", "check_dims",
           "describe_inputs", "dims_of"]
