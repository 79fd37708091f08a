"""The ``glow`` command: a table of subcommands and one error policy.

Subcommands are :class:`~glow_cli.common.Command` records: the built-in
ones are listed in :data:`COMMANDS` (one module per subcommand); other
distributions add theirs through the entry-point group ``glow.commands``
(:data:`COMMAND_GROUP`; e.g. ``glow conformance`` comes with
``glow-conformance``). A command plugin that fails to load is skipped with
one ``glow: warning:`` line, like a broken backend plugin; ``glow`` itself
keeps working. Error policy:

- a :class:`~glow_core.errors.GlowError` prints ``glow: error: <message> (<hint>)``
  on one line and exits 1;
- bad command-line syntax prints ``glow CMD: error: <message> (see 'glow CMD --help')``
  (CMD: the innermost subcommand parsed, e.g. ``glow sdk new-backend``) and exits 2;
- any other exception is a bug: one line with its type and message, exit 3;
- ``--traceback`` (anywhere on the command line) or ``GLOW_TRACEBACK=1``
  also prints the full traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import TextIO

from glow_core import __version__
from glow_cli import (
    cmd_backends,
    cmd_bench,
    cmd_bundle,
    cmd_cache,
    cmd_compare,
    cmd_compile,
    cmd_dump,
    cmd_partition,
    cmd_profile,
    cmd_run,
    cmd_sdk,
)
from glow_cli.common import USAGE_PROG_ATTR, Command, Parser, UsageError, subcommand_parsers
from glow_cli.plugins import load_command_plugins
from glow_core import progress
from glow_core.errors import GlowError, GlowWarning
from glow_sdk.version import CORE_DISTRIBUTION, SDK_API_VERSION

#: The built-in subcommands, in the order ``glow --help`` lists them (plugin commands follow;
#: docs/cli.md's reference is generated from the parser).
COMMANDS: list[Command] = [cmd_backends.COMMAND, cmd_run.COMMAND, cmd_compile.COMMAND, cmd_dump.COMMAND,
                           cmd_bench.COMMAND, cmd_partition.COMMAND, cmd_bundle.COMMAND, cmd_profile.COMMAND,
                           cmd_compare.COMMAND, cmd_sdk.COMMAND, cmd_cache.COMMAND]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130

TRACEBACK_ENV = "GLOW_TRACEBACK"


def register_command(command: Command) -> None:
    """Add a subcommand to the table (replacing one of the same name)."""
    for i, c in enumerate(COMMANDS):
        if c.name == command.name:
            COMMANDS[i] = command
            return
    COMMANDS.append(command)


def _common_options(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--traceback", action="store_true", default=default,
                   help=f"show the full traceback of errors (or set {TRACEBACK_ENV}=1)")
    if "-" in p.prefix_chars:  # (not on a placeholder command that takes every argument as a word)
        p.add_argument("-q", "--quiet", action="store_true", default=default,
                       help="no progress line on stderr (it is drawn only on a terminal, for work over 2 s)")


def build_parser() -> Parser:
    parser = Parser(
        prog="glow",
        description="Glow: a machine-learning compiler for heterogeneous hardware, with plugin backends.",
        epilog="exit codes: 0 success, 1 error (one-line cause on stderr), 2 usage error, 3 internal error.\n"
               "Run 'glow COMMAND --help' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version",
                        version=f"glow {__version__} ({CORE_DISTRIBUTION}, SDK API version {SDK_API_VERSION})")
    _common_options(parser, False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for cmd in [*COMMANDS, *load_command_plugins({c.name for c in COMMANDS})]:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description or cmd.help, epilog=cmd.epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.add_arguments(p)
        p.set_defaults(_command=cmd)
    for _, sub_parser in subcommand_parsers(parser):  # nested ones too (glow sdk info): same options, same errors
        _common_options(sub_parser, argparse.SUPPRESS)
        sub_parser.set_defaults(**{USAGE_PROG_ATTR: sub_parser.prog})
    return parser


def _want_traceback(argv: Sequence[str]) -> bool:
    env = os.environ.get(TRACEBACK_ENV, "").strip().lower()
    return "--traceback" in argv or env not in ("", "0", "false", "no", "off")


def _setup_logging() -> None:
    """Warnings of the ``glow`` loggers (e.g. a skipped plugin) as one ``glow: warning:`` line each."""
    logger = logging.getLogger("glow")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("glow: warning: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False


_python_showwarning = warnings.showwarning


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """A :class:`GlowWarning` as one ``glow: warning:`` line (others as Python shows them)."""
    if issubclass(category, GlowWarning):
        print(f"glow: warning: {_one_line(str(message))}", file=file or sys.stderr)
        return
    _python_showwarning(message, category, filename, lineno, file, line)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``glow`` console script; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    show_tb = _want_traceback(args_list)
    _setup_logging()
    warnings.showwarning = _show_warning
    try:
        try:
            args = build_parser().parse_args(args_list)
        except UsageError as e:
            print(f"{e.prog}: error: {_one_line(str(e))} (see '{e.prog} --help')", file=sys.stderr)
            return EXIT_USAGE
        command: Command = args._command
        progress.configure(False if getattr(args, "quiet", False) else None)
        code = command.run(args)
        sys.stdout.flush()
        return code
    except GlowError as e:
        if show_tb:
            traceback.print_exc()
        print(f"glow: error: {e.one_line()}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt as e:
        # a command may say where it stopped: KeyboardInterrupt("after 12 of 40 cases; no report written")
        detail = _one_line(str(e))
        print("glow: interrupted" + (f" {detail}" if detail else ""), file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (glow dump ... | head): stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return EXIT_OK
    except MemoryError:
        if show_tb:
            traceback.print_exc()
        print("glow: error: out of memory (try a smaller model or input shape)", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # noqa: BLE001  (a bug: one line unless asked for the traceback)
        if show_tb:
            traceback.print_exc()
        msg = _one_line(str(e))
        print(f"glow: internal error: {type(e).__name__}" + (f": {msg}" if msg else "")
              + " (rerun with --traceback for details)", file=sys.stderr)
        return EXIT_INTERNAL


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
