"""The glue of a compiled network, compiled once per process: the worker loop, the run and stop functions,
the share functions and the error functions (``sync.py``).

A small network's LLVM compile was mostly its glue: LLVM's pipelines run per function, and the glue is
eight functions beside the network's own (a Relu and an Exp: 54 ms of LLVM for the module, 9 ms for its
kernel and entry alone). None of the glue depends on the network but through names: it calls the entry point
``glow_main``, reads and writes the error flag and the share tables, all of which the network's module
defines (external, each library its own; the tables are as large as its segments need). So the glue is a
module of its own (:func:`glue_module`), compiled once per process and target (a profiled network links
the same glue) and kept as object code (:func:`network_glue`); each compiled network loads that
object into its own engine beside its own, which resolves the names between them, exactly as between the
parts of a parallel compile (``split.py``). Every library thus holds its own
copy of the glue's globals (the run counter). Bundles keep the glue in their one object (``bundle.py``).
"""

from __future__ import annotations

import threading

from llvmlite import ir

from glow_backend_cpu.codegen import ENTRY
from glow_backend_cpu.helpers import I8P, I32, I64, VOID
from glow_backend_cpu.sync import ERROR_GLOBAL, SHARE_TABLES, declare_share_functions, emit_glue
from glow_backend_cpu.target import Codegen

#: the glue's object code by code generator's identity
_objects: dict[str, bytes] = {}
_lock = threading.Lock()


def glue_module(cg: Codegen) -> ir.Module:
    """The glue, referring to the network's entry point, error flag and share tables by name."""
    m = cg.new_module("glow_glue")
    ir.GlobalVariable(m, I32, name=ERROR_GLOBAL)  # declarations (no initializer): the network defines them
    for name in SHARE_TABLES:
        ir.GlobalVariable(m, I32, name=name)
    entry = ir.Function(m, ir.FunctionType(VOID, [I8P.as_pointer(), I64, I64, I32]), name=ENTRY)
    shares = declare_share_functions(m, internal=False)
    emit_glue(m, entry, shares, 0, is_x86=cg.is_x86, triple=cg.triple)
    return m


def network_glue(cg: Codegen) -> bytes:
    """The object code of the glue a network compiled by ``cg`` links (profiled or not), made on the first
    call for this target: the glue's text follows from the target alone."""
    key = cg.identity
    with _lock:
        obj = _objects.get(key)
        if obj is None:
            module = glue_module(cg)
            obj = _objects[key] = cg.compile_module(module).object_code
    return obj
