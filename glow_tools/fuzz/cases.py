"""A fuzz case: a seed, the mutators applied to it, and the folder it is written to.

A case is fully decided by ``(campaign seed, index)``: the index's random
generator picks the seed model and one to three mutators, each drawing its own
choices from the same generator. Writing a case twice gives the same files, so
a reproduction folder is made by writing the case again (hard links and FIFOs
are recreated, not copied).

Folder layout (what ``scripts/fuzz_campaign.py --replay DIR`` reads)::

    DIR/case.json            seed, index, seed model, mutators, and once run: classification, message
    DIR/model/model.onnx     the mutated model (+ its external data files)
    DIR/outside/...          files outside the model's folder that external data may point at
    DIR/inputs/input_K.pb    the inputs (TensorProto), in the order of the model's real inputs
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from glow_tools.fuzz.seeds import ZOO_PREFIX, load_seed

MODEL_DIR = "model"
MODEL_FILE = "model/model.onnx"
INPUTS_DIR = "inputs"
META_FILE = "case.json"
#: share of cases whose seed is a light zoo model (the rest are node tests)
ZOO_SHARE = 0.05
#: how often each mutator is drawn relative to the others (1 when not listed): the ones that reach
#: glow's type rules, kernels and code generation weigh more than the ones the onnx checker stops
WEIGHTS = {"attr_int": 4.0, "attr_float": 3.0, "input_extreme": 4.0, "input_shape": 3.0, "input_dtype": 2.0,
           "shape_dim": 2.0, "external_data": 2.0, "dim_symbol": 2.0}
#: mutators added after campaigns of record take part from this campaign seed on (weight 0 before it: a
#: zero-width draw leaves every other choice as it was, so the recorded campaigns reproduce case by case)
SINCE_SEED = {"dim_symbol": 3}


@dataclass
class Mutant:
    """A model being mutated, with everything written beside it."""

    model: onnx.ModelProto
    inputs: list[np.ndarray]
    #: extra files, path relative to the case folder -> bytes
    files: dict[str, bytes] = field(default_factory=dict)
    #: hard links (link, target), both relative to the case folder
    links: list[tuple[str, str]] = field(default_factory=list)
    symlinks: list[tuple[str, str]] = field(default_factory=list)
    fifos: list[str] = field(default_factory=list)
    #: applied to the serialized model, in order (truncation, byte flips, invalid UTF-8)
    byte_patches: list[Callable[[bytes], bytes]] = field(default_factory=list)

    def serialized(self) -> bytes:
        data = self.model.SerializeToString()
        for patch in self.byte_patches:
            data = patch(data)
        return data

    def real_inputs(self) -> list[onnx.ValueInfoProto]:
        inits = {t.name for t in self.model.graph.initializer}
        return [i for i in self.model.graph.input if i.name not in inits]


@dataclass
class Case:
    index: int
    campaign_seed: int
    seed_model: str
    mutators: list[str]
    mutant: Mutant

    def meta(self) -> dict[str, Any]:
        return {"index": self.index, "campaign_seed": self.campaign_seed, "seed_model": self.seed_model,
                "mutators": self.mutators}


Mutator = Callable[[Mutant, np.random.Generator], "str | None"]


def _pick_seed_name(rng: np.random.Generator, names: Sequence[str]) -> str:
    zoo_names = [n for n in names if n.startswith(ZOO_PREFIX)]
    tests = [n for n in names if not n.startswith(ZOO_PREFIX)]
    pool = zoo_names if zoo_names and (not tests or rng.random() < ZOO_SHARE) else tests
    return pool[int(rng.integers(len(pool)))]


def generate(campaign_seed: int, index: int, names: Sequence[str], mutators: dict[str, Mutator],
             root: Path | None = None) -> Case:
    """The case ``index`` of campaign ``campaign_seed`` (deterministic)."""
    from glow_tools.fuzz.seeds import Seed

    rng = np.random.default_rng([campaign_seed, index])
    order = sorted(mutators)
    weights = np.array([0.0 if campaign_seed < SINCE_SEED.get(n, 0) else WEIGHTS.get(n, 1.0) for n in order])
    weights /= weights.sum()
    for _ in range(50):
        name = _pick_seed_name(rng, names)
        seed: Seed | None = load_seed(name, root)
        if seed is None:
            continue
        mutant = Mutant(seed.model(), [np.array(a, copy=True) for a in seed.inputs])
        count = int(rng.choice([1, 2, 3], p=[0.7, 0.2, 0.1]))
        applied: list[str] = []
        for _ in range(count):
            for _ in range(10):
                mname = order[int(rng.choice(len(order), p=weights))]
                try:
                    desc = mutators[mname](mutant, rng)
                except Exception as e:  # noqa: BLE001  (a mutator's own bug must not stop a campaign)
                    desc = f"(the mutator raised {type(e).__name__}: {e})"
                if desc is not None:
                    applied.append(f"{mname}: {desc}")
                    break
        if applied:
            return Case(index, campaign_seed, name, applied, mutant)
    raise RuntimeError(f"case {index}: no seed could be mutated (no node tests found?)")


def write_case(case: Case, folder: Path) -> Path:
    """Write the case's files into ``folder`` (emptied first); returns the model's path."""
    if folder.exists():
        shutil.rmtree(folder)
    (folder / MODEL_DIR).mkdir(parents=True)
    (folder / "outside").mkdir()
    (folder / INPUTS_DIR).mkdir()
    m = case.mutant
    for rel, data in m.files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    for link, target in m.links:  # (two external_data mutations may ask for the same one)
        if not os.path.lexists(folder / link):
            os.link(folder / target, folder / link)
    for link, target in m.symlinks:
        if not os.path.lexists(folder / link):
            os.symlink(target, folder / link)
    for rel in m.fifos:
        if not os.path.lexists(folder / rel):
            os.mkfifo(folder / rel)
    (folder / MODEL_FILE).write_bytes(m.serialized())
    for k, a in enumerate(m.inputs):
        (folder / INPUTS_DIR / f"input_{k}.pb").write_bytes(numpy_helper.from_array(a).SerializeToString())
    write_meta(folder, case.meta())
    return folder / MODEL_FILE


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    (folder / META_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / META_FILE).read_text(encoding="utf-8"))


def read_inputs(folder: Path) -> list[np.ndarray]:
    out = []
    k = 0
    while (folder / INPUTS_DIR / f"input_{k}.pb").is_file():
        t = onnx.TensorProto()
        t.ParseFromString((folder / INPUTS_DIR / f"input_{k}.pb").read_bytes())
        out.append(numpy_helper.to_array(t))
        k += 1
    return out
