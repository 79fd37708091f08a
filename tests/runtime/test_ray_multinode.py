"""Scale-out faults on a multi-node Ray cluster simulated on this machine (three raylets, each with its own
resources, every service on 127.0.0.1): a node killed during 2,000 requests fails only the requests in
flight on it, each naming its device; no request is lost; the node's device is placed again on a
surviving node and serving goes on.

The cluster runs in a child process (its own Ray session, bounded by a timeout), so it never meets the
single-node cluster of tests/runtime/test_ray.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("ray")

ROOT = Path(__file__).resolve().parents[2]
#: senders: at most this many requests are in flight when the node dies
SENDERS = 8

SCRIPT = r'''
import os, sys, threading, time, json
os.environ["RAY_memory_monitor_refresh_ms"] = "0"
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import numpy as np
import ray
from ray._private import ray_constants
ray_constants.ENABLE_RAY_CLUSTER = False
from ray.cluster_utils import Cluster as RayCluster
sys.path.insert(0, os.getcwd())
from glow_core.runtime import HostManager, QueueFullError
from tests.runtime.test_host_manager import reference, two_stage_model

t0 = time.time()
args = {"num_cpus": 2, "node_ip_address": "127.0.0.1", "include_dashboard": False}
rc = RayCluster(initialize_head=True, head_node_args=dict(args))
workers = [rc.add_node(num_cpus=2, node_ip_address="127.0.0.1") for _ in range(2)]
rc.wait_for_nodes()
print("cluster up", round(time.time() - t0, 1), flush=True)
hm = HostManager("ray:cpu:3", cluster=rc.address, timeout=120, start_timeout=30)
hm.add_network("m", two_stage_model(), threads=1, replicas=3)
nodes = {d: m.node for d, m in hm.managers.items()}
victim_node = workers[1]
victim_id = victim_node.node_id
on_victim = [d for d, n in nodes.items() if n == victim_id]
print("placed", nodes, "victim devices", on_victim, flush=True)
TOTAL = 2000
x = np.ones((1, 8), np.float32)
futures, sent = [], [0]
lock = threading.Lock()
killed = threading.Event()
def sender():
    while True:
        with lock:
            if sent[0] >= TOTAL: return
            sent[0] += 1; i = sent[0]
        if i == TOTAL // 4 and not killed.is_set():
            killed.set()
            rc.remove_node(victim_node, allow_graceful=False)
        while True:
            try:
                f = hm.run("m", {"x": x}); break
            except QueueFullError:  # retry later
                time.sleep(0.01)
        with lock:
            futures.append((i, f))
        try:
            f.result(timeout=300)
        except Exception:
            pass
ts = [threading.Thread(target=sender) for _ in range(int(sys.argv[1]))]
[t.start() for t in ts]; [t.join() for t in ts]
ok = failed = lost = 0; msgs = set(); ok_after = 0
for i, f in futures:
    if not f.done(): lost += 1; continue
    e = f.exception()
    if e is None:
        ok += 1; ok_after += i > TOTAL // 4
    else:
        failed += 1; msgs.add(str(e)[:160])
deadline = time.time() + 120
while any(s == "restarting" for s in hm.device_status().values()) and time.time() < deadline:
    time.sleep(0.5)
after = {d: (m.node, getattr(m, "state", "ok")) for d, m in hm.managers.items()}
final = all(np.allclose(hm.run_sync("m", {"x": x})["out"], reference(x), rtol=1e-5, atol=1e-5) for _ in range(20))
print(json.dumps({"ok": ok, "failed": failed, "lost": lost, "ok_after": ok_after, "msgs": sorted(msgs),
                  "on_victim": on_victim, "victim": victim_id, "after": after, "final": final, "secs": round(time.time()-t0,1)}))
hm.close()
ray.shutdown(); rc.shutdown()
'''


def test_a_killed_node_fails_only_its_requests_and_its_device_moves() -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(SENDERS)], cwd=ROOT, capture_output=True, text=True,
                       timeout=1200)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["lost"] == 0 and out["ok"] + out["failed"] == 2000, out
    assert out["on_victim"], f"no device was placed on the node that was killed: {out}"
    assert out["failed"] <= SENDERS, f"more requests failed than were in flight: {out}"
    for msg in out["msgs"]:
        assert any(f"device {d} " in msg for d in out["on_victim"]), f"a failure names no device of the node: {msg}"
    assert out["ok_after"] > 1000 and out["final"], f"serving did not go on after the node died: {out}"
    for device in out["on_victim"]:
        node, state = out["after"][device]
        assert node != out["victim"] and state == "ok", f"{device} was not placed again on a surviving node: {out}"
