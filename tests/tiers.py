"""The test tiers: the default run (``tox``, CI) and the exhaustive ``full`` tier (``tox -e full``).

A sweep over many models or cases runs a representative sample in the default tier and the rest under the
``full`` marker, which the default run deselects (tox.ini: ``-m "not full"``). Use :func:`sampled` for the
parameter list of such a sweep.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import pytest


def sampled(values: Iterable[Any], keep: Collection[Any]) -> list[Any]:
    """The parameters of a sweep: those in ``keep`` in the default tier, the others marked ``full``."""
    values = list(values)
    missing = [k for k in keep if k not in values]
    assert not missing, f"the sample names values the sweep does not have: {missing}"
    return [v if v in keep else pytest.param(v, marks=pytest.mark.full) for v in values]
