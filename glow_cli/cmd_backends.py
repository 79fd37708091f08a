"""``glow backends``: every installed backend, its status, and why a plugin failed."""

from __future__ import annotations

import argparse
import logging
import textwrap

from glow_cli.common import Command
from glow_core.errors import GlowError
from glow_core.plugin_host import BLOCK_ENV, DISABLE_ENV, BackendRecord, env_flag, registry

HEADER = ("NAME", "STATUS", "KINDS", "DISTRIBUTION")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show descriptions, SDK API versions, supported node kinds and full tracebacks")


def _kinds(rec: BackendRecord) -> list[str] | None:
    """Supported node kinds of a usable backend (creating it); None when it fails to start."""
    if not rec.ok:
        return None
    try:
        backend = registry().get(rec.name)
        return sorted(backend.supported_kinds())
    except GlowError:
        return None  # get() marked the record as failed, with the cause
    except Exception as e:  # noqa: BLE001  (a broken backend must not break the listing)
        rec.status, rec.error = "error", f"supported_kinds() raised {type(e).__name__}: {e}"
        return None


def run(args: argparse.Namespace) -> int:
    # The listing shows plugin failures itself: no duplicate warnings on stderr.
    logging.getLogger("glow.plugins").setLevel(logging.ERROR)
    reg = registry()
    records = reg.all_records()
    kinds = {id(r): _kinds(r) for r in records}
    if not records:
        why = f" ({DISABLE_ENV} is set)" if env_flag(DISABLE_ENV) else ""
        print(f"no glow backends installed{why}; install one, e.g. pip install glow-backend-interpreter")
        return 0
    rows = []
    for r in records:
        k = kinds[id(r)]
        rows.append((r.name, r.status, str(len(k)) if k is not None else "-", r.origin))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(HEADER)]
    print("  ".join(h.ljust(w) for h, w in zip(HEADER, widths)).rstrip())
    for r, row in zip(records, rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        indent = " " * 4
        if args.verbose and r.spec is not None:
            if r.spec.description:
                print(f"{indent}description: {r.spec.description}")
            print(f"{indent}plugin: {r.plugin}, SDK API version {r.spec.sdk_api_version}, "
                  f"backend version {r.spec.version}")
        if not r.ok:
            print(f"{indent}cause: {r.error}")
            if args.verbose and r.cause:
                print(textwrap.indent(r.cause.rstrip(), indent + "| ", predicate=lambda _line: True))
        k = kinds[id(r)]
        if args.verbose and k:
            print(textwrap.fill(", ".join(k), width=100, initial_indent=f"{indent}kinds: ",
                                subsequent_indent=indent + "       "))
    notes = []
    if env_flag(DISABLE_ENV):
        notes.append(f"{DISABLE_ENV} is set: entry points were not loaded")
    if any(r.status == "blocked" for r in records):
        notes.append(f"blocked plugins are listed in {BLOCK_ENV}")
    if any(r.status in ("error", "incompatible") for r in records) and not args.verbose:
        notes.append("'glow backends --verbose' shows full tracebacks")
    for n in notes:
        print(f"note: {n}")
    return 0


COMMAND = Command(
    name="backends",
    help="list installed backends, their status and supported node kinds",
    description="List every backend found through the 'glow.backends' entry points: name, status "
                "(ok, error, incompatible, blocked), number of supported node kinds, distribution and version. "
                "Plugins that failed are shown with their root cause.",
    add_arguments=add_arguments,
    run=run,
)
