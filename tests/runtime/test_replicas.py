"""Replicas on local devices: the grouping of the device list, the balancing, the errors."""

from __future__ import annotations

import numpy as np
import pytest

from glow_core.errors import InputError
from glow_core.runtime import HostManager, parse_devices, plan_replicas
from tests.runtime.test_host_manager import reference, two_stage_model


def test_device_i_goes_to_replica_i_mod_n() -> None:
    plans = plan_replicas(two_stage_model(), parse_devices("narrow:2,cpu:2"), 2)
    assert [[d.id for d in plan.devices] for plan in plans] == [["narrow0", "cpu0"], ["narrow1", "cpu1"]]
    for plan in plans:
        assert plan.partitions and all(p.device in {d.id for d in plan.devices} for p in plan.partitions)
    assert plans[0].function is plans[1].function  # the model is prepared once


def test_requests_are_balanced_and_correct() -> None:
    xs = np.random.default_rng(2).standard_normal((200, 1, 8)).astype(np.float32)
    with HostManager("cpu:2", max_in_flight=8, max_queued=256) as hm:
        hm.add_network("m", two_stage_model(), replicas=2, threads=1)
        futures = [hm.run("m", {"x": x}) for x in xs]
        outs = np.stack([f.result(timeout=60)["out"][0] for f in futures])
        served = [r.served for r in hm.networks["m"].replicas]
        runs = {m.id: m.runs for m in hm.managers.values()}
    np.testing.assert_allclose(outs, reference(xs[:, 0, :]), rtol=1e-5, atol=1e-5)
    # how the 200 split depends on the threads' scheduling (a busy machine may starve one device's
    # thread); the choice itself is checked exactly below
    assert sum(served) == 200 and min(served) >= 1, served
    assert runs == {"cpu0": served[0], "cpu1": served[1]}


def test_the_replica_with_the_fewest_requests_in_flight_among_the_available_ones_is_picked() -> None:
    with HostManager("cpu:3") as hm:
        hm.add_network("m", two_stage_model(), replicas=3)
        net = hm.networks["m"]
        r0, r1, r2 = net.replicas
        r0.in_flight, r1.in_flight, r2.in_flight = 2, 1, 3
        assert hm._pick(net) is r1
        r1.in_flight = 2
        assert {id(hm._pick(net)) for _ in range(4)} == {id(r0), id(r1)}  # ties take turns
        r0.parts[0].device.available = False  # as a remote device that is restarting
        r1.parts[0].device.available = False
        assert hm._pick(net) is r2  # the busiest, but the only one available
        r2.parts[0].device.available = False
        assert hm._pick(net) in (r0, r1)  # none available: the least busy (its device answers at once)


@pytest.mark.parametrize("replicas", [0, 3, True, "2"])
def test_a_bad_replica_count_is_an_input_error(replicas: object) -> None:
    with HostManager("cpu:2") as hm:
        with pytest.raises(InputError, match="replicas must be an integer from 1 to the number of devices"):
            hm.add_network("m", two_stage_model(), replicas=replicas)  # type: ignore[arg-type]
        assert not hm.networks and all(not m.loaded for m in hm.managers.values())


def test_replicas_and_an_assignment_do_not_mix() -> None:
    with HostManager("cpu:2") as hm:
        with pytest.raises(InputError, match="cannot be combined with replicas"):
            hm.add_network("m", two_stage_model(), replicas=2, assignment={})
