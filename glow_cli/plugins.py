"""Subcommands from other distributions: the entry-point group ``glow.commands``.

A distribution adds a ``glow`` subcommand by naming, in this group, a
:class:`~glow_cli.common.Command` record (or a function without
arguments that returns one)::

    [project.entry-points."glow.commands"]
    conformance = "glow_conformance.cli:COMMAND"

The entry-point name must equal the command's name. A command plugin that
fails to import, is not a ``Command``, clashes with a built-in command or
another plugin, or whose ``add_arguments`` raises, is skipped with one
``glow: warning:`` line naming the distribution and the root cause (the
plugin host reports broken backends the same way); every other command keeps
working. Commands the project documents but ships separately (``conformance``,
distribution ``glow-conformance``) get a placeholder when absent or broken,
which says in one line what to install.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import logging
from collections.abc import Callable, Iterable

from glow_cli.common import Command, Parser
from glow_core.errors import GlowError
from glow_core.plugin_host import describe_exception

log = logging.getLogger("glow.commands")

COMMAND_GROUP = "glow.commands"

#: commands shipped by separate distributions: name -> (distribution, what it is, how to install it)
OPTIONAL_COMMANDS: dict[str, tuple[str, str, str]] = {
    "conformance": ("glow-conformance", "the conformance suite",
                    "pip install glow-conformance (from a checkout: pip install ./conformance)"),
}


def command_entry_points() -> list[md.EntryPoint]:
    """The entry points of :data:`COMMAND_GROUP`, by name."""
    return sorted(md.entry_points(group=COMMAND_GROUP), key=lambda e: e.name)


def _origin(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "(unknown distribution)"


def _load(ep: md.EntryPoint) -> Command:
    """The command an entry point names; GlowError (one line) when it is unusable."""
    try:
        obj = ep.load()
    except Exception as e:  # noqa: BLE001  (a broken plugin must never break glow)
        raise GlowError(f"failed to import {ep.value}: {describe_exception(e)}") from e
    if not isinstance(obj, Command) and callable(obj):
        try:
            obj = obj()
        except Exception as e:  # noqa: BLE001
            raise GlowError(f"{ep.value}() raised {describe_exception(e)}") from e
    if not isinstance(obj, Command):
        raise GlowError(f"{ep.value} is a {type(obj).__name__}, expected a glow_cli.common.Command")
    if obj.name != ep.name:
        raise GlowError(f"{ep.value} is the command '{obj.name}', but its entry point is named '{ep.name}'")
    try:
        obj.add_arguments(Parser(prog=f"glow {obj.name}"))
    except Exception as e:  # noqa: BLE001
        raise GlowError(f"its add_arguments() raised {describe_exception(e)}") from e
    return obj


def _placeholder(name: str, problem: str) -> Command:
    """A command that only says why the real one is not there (any arguments accepted)."""
    dist, what, install = OPTIONAL_COMMANDS[name]

    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.prefix_chars = "\0"  # take every argument (-b, --help, ...) as a plain word
        p.add_argument("args", nargs="*")

    def run(args: argparse.Namespace) -> int:
        raise GlowError(f"'glow {name}' needs {what} ({dist}), which {problem}", hint=install)

    return Command(name=name, help=f"(not available: needs {dist})", add_arguments=add_arguments, run=run,
                   description=f"'glow {name}' comes with {dist}: {install}")


def load_command_plugins(taken: Iterable[str],
                         entry_points: Callable[[], list[md.EntryPoint]] = command_entry_points) -> list[Command]:
    """The usable commands of the group (skipping broken ones with a warning), plus placeholders."""
    names = set(taken)
    out: list[Command] = []
    problems: dict[str, str] = {}
    try:
        eps = entry_points()
    except Exception as e:  # noqa: BLE001  (broken metadata of some distribution)
        log.warning("command plugins not loaded: %s", describe_exception(e))
        eps = []
    for ep in eps:
        if ep.name in names:
            log.warning("command plugin '%s' (%s) skipped: the command '%s' already exists", ep.name, _origin(ep),
                        ep.name)
            continue
        try:
            cmd = _load(ep)
        except GlowError as e:
            log.warning("command plugin '%s' (%s) skipped: %s", ep.name, _origin(ep), e.one_line())
            problems[ep.name] = f"is installed ({_origin(ep)}) but failed to load: {e.one_line()}"
            continue
        names.add(cmd.name)
        out.append(cmd)
    for name in OPTIONAL_COMMANDS:
        if name not in names:
            out.append(_placeholder(name, problems.get(name, "is not installed")))
    return out


__all__ = ["COMMAND_GROUP", "OPTIONAL_COMMANDS", "command_entry_points", "load_command_plugins"]
