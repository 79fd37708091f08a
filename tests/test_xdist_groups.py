"""The suite's xdist groups hold: under ``--dist loadgroup`` (tox.ini) a test marked ``xdist_group`` runs on
the worker of its group (the wheels are built once, one local Ray cluster serves the Ray tests). pytest-xdist
marks such a test by appending ``@GROUP`` to its nodeid; with pytest 9 it could not (the pin in
constraints.txt), and the groups were silently spread over both workers."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("groups-check")
def test_a_grouped_test_carries_its_group_under_loadgroup(request: pytest.FixtureRequest) -> None:
    worker = getattr(request.config, "workerinput", None)
    if worker is None or request.config.getvalue("dist") != "no" or not request.config.getvalue("loadgroup"):
        pytest.skip("not an xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@groups-check"), request.node.nodeid
