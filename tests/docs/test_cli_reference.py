"""docs/cli.md cannot drift from the ``glow`` argument parsers.

- the generated regions of docs/cli.md equal what ``scripts/gen_cli_reference.py``
  renders from ``build_parser()`` today (the failure says the one command to run);
- the rendering documents every (sub)command and every option the parsers have;
- every ``glow ...`` example command in docs/*.md and README.md is accepted by the parsers,
  and every ``--option`` named in a ``## glow CMD`` section of docs/cli.md exists for CMD;
- every (sub)command, found by walking the parser (not a hand-written list), reports
  argparse's errors as ``glow CMD: error: <message> (see 'glow CMD --help')``, exit 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from glow_cli.common import UsageError, subcommand_parsers
from glow_cli.main import build_parser, main
from tests.cliutil import glow
from tests.docs.mdblocks import DOCS, ROOT, Example, examples

CLI_MD = DOCS / "cli.md"


def _load_generator() -> ModuleType:
    path = ROOT / "scripts" / "gen_cli_reference.py"
    spec = importlib.util.spec_from_file_location("gen_cli_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GEN = _load_generator()


def _sections(reference: str) -> dict[str, str]:
    """``"glow sdk info"`` -> the text of its reference section."""
    parts = re.split(r"^### `([^`]+)` reference$", reference, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


# -- the generated reference ------------------------------------------------------------
def test_cli_md_equals_the_generated_reference() -> None:
    text = CLI_MD.read_text(encoding="utf-8")
    assert text == GEN.regenerate(text), (
        f"docs/cli.md is stale: the glow argument parsers changed. Run '{GEN.REGENERATE}' and commit docs/cli.md")


def test_every_command_and_option_is_documented() -> None:
    parser = build_parser()
    sections = _sections(GEN.render_reference(parser))
    walked = [(), *(path for path, _ in subcommand_parsers(parser))]
    assert sorted(sections) == sorted(" ".join(("glow", *p)) for p in walked)
    assert {"glow run", "glow sdk new-backend", "glow conformance"} <= set(sections)
    for path, p in GEN.all_parsers(parser):
        prog = " ".join(("glow", *path))
        assert p.prog == prog
        section = sections[prog]
        for action in p._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            if path and set(action.option_strings) <= set(GEN.GLOBAL_OPTIONS) and action.option_strings:
                assert all(f"`{option}`" in sections["glow"] for option in action.option_strings)
                continue
            if action.option_strings:
                for option in action.option_strings:
                    assert re.search(rf"`{re.escape(option)}[` ]", section), f"{prog}: {option} undocumented"
            else:
                metavar = re.escape(action.metavar or action.dest.upper())
                assert re.search(rf"\| `\[?{metavar}", section), f"{prog}: {action.dest} undocumented"
            if action.help:
                assert " ".join(str(action.help).split()).split("%")[0][:40] in section.replace("\\|", "|")
        for sub_path, _ in subcommand_parsers(p):
            if len(sub_path) == 1:
                assert f"#{GEN.anchor((*path, *sub_path))})" in section


def test_a_new_option_or_command_makes_the_check_fail(tmp_path: Path) -> None:
    parser = build_parser()
    text = CLI_MD.read_text(encoding="utf-8")
    dump = dict(subcommand_parsers(parser))[("dump",)]
    dump.add_argument("--frobnicate-level", metavar="N", help="a brand new option")
    assert GEN.regenerate(text, parser) != text
    assert "`--frobnicate-level N` | a brand new option |" in GEN.regenerate(text, parser)
    stale = tmp_path / "cli.md"
    stale.write_text(text.replace("| `--lir` |", "| `--lr` |", 1), encoding="utf-8")
    assert GEN.main(["--check", str(stale)]) == 1
    assert GEN.main([str(stale)]) == 0 and stale.read_text(encoding="utf-8") == text


def test_reference_does_not_depend_on_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    narrow = GEN.render_reference(build_parser())
    monkeypatch.setenv("COLUMNS", "300")
    assert GEN.render_reference(build_parser()) == narrow


# -- example commands and prose ------------------------------------------------------------
def _doc_files() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]


EXAMPLES = [e for path in _doc_files() for e in examples(path)]


def test_docs_show_example_commands() -> None:
    assert len(EXAMPLES) > 20
    assert any(e.doc == "vendor-guide.md" for e in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_command_is_accepted_by_the_parsers(example: Example) -> None:
    import shlex

    try:
        build_parser().parse_args(shlex.split(example.command)[1:])
    except UsageError as e:
        pytest.fail(f"{example.doc} line {example.line}: '{example.command}' is not valid: {e.prog}: error: {e}")


def _prose_sections() -> list[tuple[str, str]]:
    text = CLI_MD.read_text(encoding="utf-8").split("<!-- BEGIN GENERATED: reference -->")[0]
    parts = re.split(r"^## (glow [a-z-]+)\s*$", text, flags=re.MULTILINE)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


def test_options_named_in_the_prose_exist() -> None:
    parser = build_parser()
    by_prog = {" ".join(("glow", *path)): p for path, p in GEN.all_parsers(parser)}
    sections = _prose_sections()
    assert {name for name, _ in sections} >= {"glow backends", "glow run", "glow dump"}
    for name, body in sections:
        assert name in by_prog, f"docs/cli.md has a section '## {name}' but there is no such command"
        known = set(GEN.GLOBAL_OPTIONS)
        for prog, p in by_prog.items():
            if prog == name or prog.startswith(name + " "):
                known.update(o for a in p._actions for o in a.option_strings)
        named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", body))
        assert named - known == set(), f"docs/cli.md '## {name}' names options {name} does not have"


# -- one usage-error format for every (sub)command -------------------------------------------
def _value_for(action: argparse.Action) -> str:
    if action.choices:
        return str(next(iter(action.choices)))
    for candidate in ("x", "1"):
        try:
            if callable(action.type):
                action.type(candidate)
            return candidate
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            continue
    raise AssertionError(f"no placeholder value fits {action}")


def _required_args(p: argparse.ArgumentParser) -> list[str]:
    """Arguments that satisfy ``p``'s required options and positionals (values are never used)."""
    out: list[str] = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings and action.required:
            out += [action.option_strings[0], _value_for(action)]
        elif not action.option_strings and action.nargs not in ("?", "*", argparse.REMAINDER):
            out.append(_value_for(action))
    for group in p._mutually_exclusive_groups:
        if group.required and group._group_actions:
            first = group._group_actions[0]
            out += [first.option_strings[0]] + ([] if first.nargs == 0 else [_value_for(first)])
    return out


SUBCOMMANDS = list(subcommand_parsers(build_parser()))


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, f"glow {' '.join(argv)}: exit {code}\n{out}{err}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_every_subcommand_is_walked() -> None:
    names = {" ".join(path) for path, _ in SUBCOMMANDS}
    assert {"backends", "run", "dump", "sdk", "sdk new-backend", "sdk info"} <= names


@pytest.mark.parametrize("path, parser", SUBCOMMANDS, ids=[" ".join(p) for p, _ in SUBCOMMANDS])
def test_usage_errors_of_every_subcommand_have_one_format(
        capsys: pytest.CaptureFixture[str], path: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
    prog = " ".join(("glow", *path))
    has_subcommands = any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    filled = [*path, *_required_args(parser)]
    cases = [[*filled, "--no-such-option"], [*filled, "--traceback", "--no-such-option"]]
    if any(a.required for a in parser._actions):
        cases.append(list(path))
    for argv in cases:
        line = _usage_error(capsys, argv)
        assert line.startswith(f"{prog}: error: ") and line.endswith(f" (see '{prog} --help')"), (argv, line)
        if not has_subcommands and "--no-such-option" in argv:
            assert line == f"{prog}: error: unrecognized arguments: --no-such-option (see '{prog} --help')"
        if argv == list(path):
            assert "required" in line


def test_top_level_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert _usage_error(capsys, []) == \
        "glow: error: the following arguments are required: COMMAND (see 'glow --help')"
    line = _usage_error(capsys, ["frobnicate"])
    assert line.startswith("glow: error: argument COMMAND: invalid choice: 'frobnicate'")


def test_unknown_option_after_a_model_is_a_usage_error_of_the_subcommand() -> None:
    r = glow(["dump", "X", "--bogus"])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "glow dump: error: unrecognized arguments: --bogus (see 'glow dump --help')"
