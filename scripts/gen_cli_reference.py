"""Regenerate the generated parts of docs/cli.md from the ``glow`` argument parsers.

    python scripts/gen_cli_reference.py            # rewrite docs/cli.md in place
    python scripts/gen_cli_reference.py --check    # exit 1 (and say so) when docs/cli.md is stale

docs/cli.md holds hand-written prose and two generated regions, each between
``<!-- BEGIN GENERATED: NAME -->`` and ``<!-- END GENERATED: NAME -->``:

- ``commands``: the table of subcommands (name, one-line help);
- ``reference``: for ``glow`` and every subcommand, nested ones included
  (``glow sdk new-backend``), its usage line, description, every argument and
  option with its help text, and its examples (the parser's epilog).

Everything comes from ``glow_cli.main.build_parser()``, so a subcommand or
option added anywhere (a ``cmd_<name>.py`` module, ``register_command``) appears
after one run of this script; ``tests/docs/test_cli_reference.py`` fails until
it is run. Nothing here depends on the terminal width.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI_MD = ROOT / "docs" / "cli.md"
#: the one command that regenerates the file (quoted by the drift test)
REGENERATE = "python scripts/gen_cli_reference.py"
#: width of the usage lines (fixed: the output must not depend on the terminal)
USAGE_WIDTH = 100
#: options every (sub)command accepts; documented once, in the ``glow`` section
GLOBAL_OPTIONS = ("-h", "--help", "--traceback")

REGION = re.compile(r"(<!-- BEGIN GENERATED: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
                    re.DOTALL)


def build_parser() -> argparse.ArgumentParser:
    from glow_cli.main import build_parser as build

    return build()


def all_parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``glow`` itself, then every subcommand parser depth first (as ``glow --help`` orders them)."""
    from glow_cli.common import subcommand_parsers

    yield (), parser
    yield from subcommand_parsers(parser)


def anchor(path: tuple[str, ...]) -> str:
    """The GitHub anchor of a reference heading ``### `glow sdk info` reference``."""
    return "-".join(("glow", *path, "reference"))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)


def usage_line(parser: argparse.ArgumentParser) -> str:
    fmt = _formatter(parser)
    fmt.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return fmt.format_help().strip("\n")


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a reference section lists: all but hidden ones and the global options."""
    out = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings and set(action.option_strings) <= set(GLOBAL_OPTIONS) and parser.prog != "glow":
            continue
        out.append(action)
    return out


def _argument_name(fmt: argparse.HelpFormatter, action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{fmt._format_args(action, action.dest.upper())}`"
    if action.nargs == 0:
        return ", ".join(f"`{s}`" for s in action.option_strings)
    args = fmt._format_args(action, action.dest.upper())
    return ", ".join(f"`{s} {args}`" for s in action.option_strings)


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    fmt = _formatter(parser)
    help_text = fmt._expand_help(action) if action.help else ""
    if isinstance(action, argparse._VersionAction):
        help_text = help_text or "print the version and exit"
    if action.required and action.option_strings:
        help_text = f"required: {help_text}"
    return f"| {_argument_name(fmt, action)} | {_cell(help_text)} |"


def _subcommand_rows(path: tuple[str, ...], parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name in action.choices:
                sub = (*path, name)
                rows.append(f"| [`{' '.join(('glow', *sub))}`](#{anchor(sub)}) | {_cell(helps.get(name, ''))} |")
    return rows


def render_commands(parser: argparse.ArgumentParser) -> str:
    """The ``commands`` region: one row per top-level subcommand."""
    return "\n".join(["| command | what it does |", "|---|---|", *_subcommand_rows((), parser)]) + "\n"


def render_section(path: tuple[str, ...], parser: argparse.ArgumentParser) -> str:
    lines = [f"### `{parser.prog}` reference", "", "```", usage_line(parser), "```", ""]
    if parser.description:
        lines += [" ".join(parser.description.split()), ""]
    subs = _subcommand_rows(path, parser)
    if subs:
        lines += ["| subcommand | what it does |", "|---|---|", *subs, ""]
    actions = documented_actions(parser)
    if actions:
        lines += ["| argument | meaning |", "|---|---|", *(_argument_row(parser, a) for a in actions), ""]
    if not path:
        lines += [f"Every command also accepts {', '.join(f'`{o}`' for o in GLOBAL_OPTIONS)}.", ""]
    if parser.epilog and path:
        lines += ["```", parser.epilog.strip("\n"), "```", ""]
    return "\n".join(lines)


def render_reference(parser: argparse.ArgumentParser) -> str:
    """The ``reference`` region: ``glow`` and every subcommand, nested ones included."""
    return "\n".join(render_section(path, p) for path, p in all_parsers(parser))


def regions(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {"commands": render_commands(parser), "reference": render_reference(parser)}


def regenerate(text: str, parser: argparse.ArgumentParser | None = None) -> str:
    """``text`` with every generated region replaced by its current rendering."""
    rendered = regions(parser or build_parser())
    found = {m.group("name") for m in REGION.finditer(text)}
    missing = sorted(set(rendered) - found)
    if missing:
        raise SystemExit(f"{CLI_MD}: no '<!-- BEGIN GENERATED: {missing[0]} -->' ... "
                         f"'<!-- END GENERATED: {missing[0]} -->' region to fill")
    unknown = sorted(found - set(rendered))
    if unknown:
        raise SystemExit(f"{CLI_MD}: unknown generated region '{unknown[0]}' (known: {', '.join(sorted(rendered))})")
    return REGION.sub(lambda m: m.group(1) + rendered[m.group("name")] + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 when the file is stale")
    ap.add_argument("file", nargs="?", type=Path, default=CLI_MD, help="the file to update (default: docs/cli.md)")
    args = ap.parse_args(argv)
    text = args.file.read_text(encoding="utf-8")
    new = regenerate(text)
    if args.check:
        if new != text:
            print(f"{args.file} is stale: run '{REGENERATE}'", file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.file.write_text(new, encoding="utf-8")
        print(f"updated {args.file}")
    else:
        print(f"{args.file} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
