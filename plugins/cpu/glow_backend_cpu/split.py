"""Split a generated module into parts that compile in parallel (``objworker.py``) and link in one JIT engine.

Two ways, with the same rules for each part: :class:`PartCutter` cuts parts off
while the module is generated (a part once its new kernels hold ``PART_BYTES``
of text with their helpers; the last part keeps the rest), so that workers
compile them meanwhile; :func:`split_module` splits a complete module (one too
small for the cutter to have cut anything off).

The kernels (``k0``, ``k1``, ... of ``codegen.py``: ``noinline``, called only by
the entry point) are the units: :func:`split_module` deals them to ``n`` parts by estimated size
(the text of the kernel and of the helpers it needs that the part does not hold
yet; largest first, each to the part that grows least). Part 0 keeps everything
else: the entry point, the worker loop, the barrier, the error functions and
every mutable global. In each part:

- a kernel of another part that is called here is declared; the kernels of
  parts 1.. and every definition of part 0 that another part refers to lose
  ``internal`` linkage so the engine links them by name;
- internal helpers (micro-kernels) and constant globals a kernel refers to are
  copied into its part (still internal: each part inlines its own copy, exactly as
  the single module would);
- a mutable global (the error flag) stays in part 0; other parts declare it.

The object code of the parts is loaded into one engine (``target.Codegen.load``),
which resolves the names between them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llvmlite import ir

_REF = re.compile(r'@"([^"]+)"|@([A-Za-z_.$][\w.$]*)')
_LINKAGE = re.compile(r'^(define |@"[^"]+" = |@[A-Za-z_.$][\w.$]* = )(?:internal |private )')
_KERNEL = re.compile(r"k\d+")
#: a module smaller than this (bytes of IR text) is compiled whole: a worker's start-up would cost more
MIN_SPLIT_BYTES = 256 * 1024
#: while the module is generated, a part is cut off once its kernels and their helpers have this much text
PART_BYTES = 768 * 1024


@dataclass
class _Unit:
    name: str
    text: str
    refs: set[str]


def _refs(text: str, names: set[str], own: str) -> set[str]:
    return {m.group(1) or m.group(2) for m in _REF.finditer(text)} & names - {own}


def _external(text: str) -> str:
    """The definition with default (external) linkage instead of internal or private."""
    return _LINKAGE.sub(r"\1", text, count=1)


def _declaration(g: ir.GlobalValue) -> str:
    if isinstance(g, ir.Function):
        args = ", ".join(str(t) for t in g.ftype.args) + (", ..." if g.ftype.var_arg else "")
        return f'declare {g.ftype.return_type} @"{g.name}"({args})'
    return f'@"{g.name}" = external global {g.value_type}'


def _closure(start: set[str], units: dict[str, _Unit], copyable: set[str]) -> set[str]:
    """``start`` and the copyable helpers they refer to, transitively."""
    seen = set(start)
    todo = list(start)
    while todo:
        for r in units[todo.pop()].refs:
            if r in copyable and r not in seen:
                seen.add(r)
                todo.append(r)
    return seen


def split_module(module: ir.Module, texts: dict[str, str], n: int) -> list[str] | None:
    """The IR texts of ``n`` parts of ``module`` (``texts``: already printed globals by name); None: keep it whole."""
    if n < 2 or module.namedmetadata:
        return None
    globs = list(module.globals.values())
    names = {g.name for g in globs}
    units = {g.name: _Unit(g.name, t, set()) for g in globs for t in [texts.get(g.name) or str(g)]}
    if sum(len(u.text) for u in units.values()) < MIN_SPLIT_BYTES:
        return None
    for u in units.values():
        u.refs = _refs(u.text, names, u.name)
    by_name = {g.name: g for g in globs}
    decls = [g.name for g in globs if isinstance(g, ir.Function) and g.is_declaration]
    kernels = [g.name for g in globs if isinstance(g, ir.Function) and not g.is_declaration
               and _KERNEL.fullmatch(g.name) and g.linkage == "internal"]
    copyable = {g.name for g in globs if g.name not in kernels and g.linkage in ("internal", "private")
                and (isinstance(g, ir.Function) and not g.is_declaration
                     or isinstance(g, ir.GlobalVariable) and g.global_constant)}
    if len(kernels) < n:
        return None
    needs = {k: _closure({k}, units, copyable) for k in kernels}
    parts: list[set[str]] = [set() for _ in range(n)]
    owned: list[list[str]] = [[] for _ in range(n)]
    loads = [0] * n
    part0 = {g.name for g in globs if g.name not in kernels and g.name not in decls and g.name not in copyable}
    parts[0] = _closure(part0, units, copyable)
    loads[0] = sum(len(units[x].text) for x in parts[0])
    for k in sorted(kernels, key=lambda k: -sum(len(units[x].text) for x in needs[k])):
        grow = [sum(len(units[x].text) for x in needs[k] - parts[p]) for p in range(n)]
        p = min(range(n), key=lambda p: loads[p] + grow[p])
        parts[p] |= needs[k]
        loads[p] += grow[p]
        owned[p].append(k)
    if any(not o for o in owned[1:]):
        return None
    home = {k: p for p in range(n) for k in owned[p]} | {x: 0 for x in part0}
    return [_part_text(module, units, by_name, decls, parts[p], p, home, copyable) for p in range(n)]


class PartCutter:
    """Cuts parts off a module while its kernels are generated, so that workers compile them meanwhile.

    :meth:`add_kernel` takes each new kernel once it is complete (its helpers and
    constant tables are then complete too) and returns a part's text once the
    kernels waiting hold :data:`PART_BYTES` of text with their helpers: those
    kernels with external linkage, copies of their helpers, declarations of the
    rest they refer to. :meth:`rest` gives the last part once the module is
    complete: everything not cut off yet (the entry point, the worker loop, the
    barrier, the error functions, mutable globals, the last kernels), with
    external linkage for what other parts refer to, declaring the kernels cut off.
    """

    def __init__(self, module: ir.Module, texts: dict[str, str], part_bytes: int | None = None) -> None:
        self.module = module
        #: the text of the kernels printed already, by name (``codegen.printed_texts``, filled as they are made)
        self.texts = texts
        self.part_bytes = PART_BYTES if part_bytes is None else part_bytes
        self.pending: list[str] = []
        self.sent: set[str] = set()
        self.parts = 0
        self._printed: dict[str, str] = {}
        self._refs: dict[str, set[str]] = {}

    def _text(self, name: str) -> str:
        t = self.texts.get(name) or self._printed.get(name)
        if t is None:
            t = self._printed[name] = str(self.module.globals[name])
        return t

    def _refs_of(self, name: str) -> set[str]:
        r = self._refs.get(name)
        if r is None:
            r = self._refs[name] = _refs(self._text(name), set(self.module.globals), name)
        return r

    def _copyable(self, name: str) -> bool:
        g = self.module.globals[name]
        return not _KERNEL.fullmatch(name) and g.linkage in ("internal", "private") and (
            isinstance(g, ir.Function) and not g.is_declaration
            or isinstance(g, ir.GlobalVariable) and bool(g.global_constant))

    def _closure(self, start: set[str]) -> set[str]:
        seen, todo = set(start), list(start)
        while todo:
            for r in self._refs_of(todo.pop()):
                if r not in seen and self._copyable(r):
                    seen.add(r)
                    todo.append(r)
        return seen

    def add_kernel(self, name: str) -> str | None:
        """Note a new complete kernel; the text of a part when enough kernels are waiting."""
        self.pending.append(name)
        if sum(len(self._text(x)) for x in self._closure(set(self.pending))) < self.part_bytes:
            return None
        kernels, self.pending = set(self.pending), []
        self.sent |= kernels
        return self._part(self._closure(kernels), kernels)

    def rest(self) -> str:
        """The last part: everything not cut off yet (call once the module is complete)."""
        globs = self.module.globals.values()
        home = {g.name for g in globs if g.name not in self.sent
                and not (isinstance(g, ir.Function) and g.is_declaration) and not self._copyable(g.name)}
        # kernels left here stay internal, as in the whole module; what parts cut off refer to is linked by name
        return self._part(self._closure(home), {x for x in home if not _KERNEL.fullmatch(x)})

    def _part(self, members: set[str], external: set[str]) -> str:
        m = self.module
        lines = ['; ModuleID = "%s.part%d"' % (m.name, self.parts), 'target triple = "%s"' % (m.triple,),
                 'target datalayout = "%s"' % (m.data_layout,), '']
        self.parts += 1
        lines += [it.get_declaration() for it in m.get_identified_types().values()]
        referenced = set().union(*(self._refs_of(x) for x in members))
        for g in m.globals.values():
            if isinstance(g, ir.Function) and g.is_declaration:
                lines.append(self._text(g.name))
            elif g.name in members:
                lines.append(_external(self._text(g.name)) if g.name in external else self._text(g.name))
            elif g.name in referenced:
                lines.append(_declaration(g))
        lines += [str(md) for md in m.metadata]
        return "\n".join(lines)


def _part_text(module: ir.Module, units: dict[str, _Unit], by_name: dict[str, ir.GlobalValue], decls: list[str],
               members: set[str], p: int, home: dict[str, int], copyable: set[str]) -> str:
    lines = ['; ModuleID = "%s.part%d"' % (module.name, p), 'target triple = "%s"' % (module.triple,),
             'target datalayout = "%s"' % (module.data_layout,), '']
    lines += [it.get_declaration() for it in module.get_identified_types().values()]
    lines += [units[d].text for d in decls]
    referenced = set().union(*(units[m].refs for m in members)) if members else set()
    # what other parts refer to (kernels of parts 1.., definitions of part 0) is linked by name
    shared = {x for x, h in home.items() if x not in copyable}
    for name, u in units.items():
        if name in decls:
            continue
        if name in members and (home.get(name) == p or name in copyable):
            lines.append(_external(u.text) if name in shared else u.text)
        elif name in referenced:
            lines.append(_declaration(by_name[name]))
    lines += [str(md) for md in module.metadata]
    return "\n".join(lines)


__all__ = ["MIN_SPLIT_BYTES", "PART_BYTES", "PartCutter", "split_module"]
