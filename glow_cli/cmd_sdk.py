"""``glow sdk ...``: tools for backend authors.

- ``glow sdk new-backend NAME [DIR]``: scaffold a complete backend package ``glow-backend-NAME``;
- ``glow sdk capabilities NAME [--json]``: the capability report of an installed backend;
- ``glow sdk info [--history]``: the SDK API version and the mandatory primitive set (or every hook
  and feature with the version it arrived in);
- ``glow sdk options NAME``: the options a backend accepts (the core's and its own), with types and defaults.
"""

from __future__ import annotations

import argparse
import json
import sys

from glow_cli.common import Command


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="sdk_command", metavar="SDK-COMMAND")
    sub.required = True
    new = sub.add_parser("new-backend", help="scaffold a backend package glow-backend-NAME",
                         description="Write a complete, installable backend package: pyproject.toml with the "
                                     "glow.backends entry point, a backend running the mandatory primitives with "
                                     "numpy kernels (to replace with the device's), tests running the conformance "
                                     "suite, and a README. Then: pip install DIR; glow conformance --backend NAME.")
    new.add_argument("name", metavar="NAME", help="the backend name (lowercase, e.g. xyz or acme-npu)")
    new.add_argument("dir", metavar="DIR", nargs="?", default=None,
                     help="where to write it (default: ./glow-backend-NAME; must not exist or be empty)")
    new.set_defaults(_sdk=_new_backend)
    caps = sub.add_parser("capabilities", help="what an installed backend runs natively, what is lowered for it",
                          description="For every node kind: the element kinds the backend declares (and predicates), "
                                      "the mandatory ones it lacks (primitives), or whether glow lowers the kind for "
                                      "it (high-level kinds).")
    caps.add_argument("backend", metavar="NAME", help="an installed backend ('glow backends')")
    caps.add_argument("--json", action="store_true", help="print the report as JSON")
    caps.set_defaults(_sdk=_capabilities)
    info = sub.add_parser("info", help="the SDK API version and the mandatory primitive set")
    info.add_argument("--history", action="store_true",
                      help="print every hook and feature of the contract with the SDK API version it arrived in")
    info.set_defaults(_sdk=_info)
    opts = sub.add_parser("options", help="the options a backend accepts (options={...}), with types and defaults",
                          description="The core's options, which every backend accepts, then the backend's own "
                                      "(Backend.options()); any other key is refused.")
    opts.add_argument("backend", metavar="NAME", help="an installed backend ('glow backends')")
    opts.set_defaults(_sdk=_options)


def _new_backend(args: argparse.Namespace) -> int:
    from glow_tools.scaffold import new_backend

    sc = new_backend(args.name, args.dir)
    n = sc.names
    print(f"wrote {n.dist} into {sc.root} ({len(sc.files)} files): backend '{n.name}', package {n.package}, "
          f"class {n.cls}")
    for f in sc.files:
        print(f"  {f.relative_to(sc.root)}")
    try:
        from glow_core.plugin_host import registry

        if registry().record(n.name) is not None:
            print(f"glow: warning: a backend named '{n.name}' is already installed; installing this package "
                  "would duplicate the name", file=sys.stderr)
    except Exception:  # noqa: BLE001, S110  (only a courtesy check)
        pass
    where = str(sc.root) if sc.root.is_absolute() or str(sc.root).startswith(".") else f"./{sc.root}"
    print("next:")
    print(f"  pip install {where}        (for development: pip install -e {where})")
    print(f"  glow conformance --backend {n.name}")
    return 0


def _capabilities(args: argparse.Namespace) -> int:
    from glow_core.plugin_host import get_backend
    from glow_tools.capabilities import capability_report

    report = capability_report(get_backend(args.backend))
    if args.json:
        print(json.dumps(report.as_dict(), indent=1))
    else:
        for line in report.lines():
            print(line)
    return 0


def _options(args: argparse.Namespace) -> int:
    from glow_core.plugin_host import get_backend
    from glow_sdk.options import describe_options

    backend = get_backend(args.backend)
    print(f"options of backend '{backend.name}' (glow_core.compile(..., options={{...}})):")
    for line in describe_options(backend.options()):
        print(f"  {line}")
    if not backend.checks_options():
        print(f"backend '{backend.name}' declares no option schema (SDK API {backend.sdk_api_version}): "
              "it is passed every key unchecked")
    return 0


def _info(args: argparse.Namespace) -> int:
    from glow_sdk.primitives import mandatory_primitives
    from glow_sdk.version import HISTORY, SDK_API_RELEASE, SUPPORTED_SDK_API_VERSIONS

    print(f"SDK API version {SDK_API_RELEASE} (this glow loads backends built for: "
          f"{', '.join(map(str, sorted(SUPPORTED_SDK_API_VERSIONS)))}, up to {SDK_API_RELEASE})")
    if args.history:
        width = max(len(f.name) for f in HISTORY)
        for f in HISTORY:
            print(f"  {str(f.since):<4}  {f.name:<{width}}  {f.what}")
        return 0
    prims = mandatory_primitives()
    print(f"mandatory primitives ({len(prims)}), with the element kinds a backend must accept:")
    width = max(len(k) for k in prims)
    for kind, elems in prims.items():
        print(f"  {kind:<{width}}  {', '.join(sorted(e.value for e in elems))}")
    return 0


def run(args: argparse.Namespace) -> int:
    code: int = args._sdk(args)
    return code


COMMAND = Command(
    name="sdk",
    help="backend SDK tools: new-backend (scaffold a package), capabilities, info",
    description="Tools for backend authors. 'glow sdk new-backend NAME [DIR]' scaffolds a complete backend "
                "package; 'glow sdk capabilities NAME' reports what an installed backend runs; 'glow sdk info' "
                "prints the SDK API version and the mandatory primitive set; 'glow sdk options NAME' lists the "
                "options a backend accepts.",
    epilog="examples:\n  glow sdk new-backend xyz\n  pip install ./glow-backend-xyz && glow conformance --backend xyz\n"
           "  glow sdk capabilities interpreter --json\n  glow sdk info --history\n  glow sdk options cpu",
    add_arguments=add_arguments,
    run=run,
)
