"""Remote devices on a Ray cluster: ``ray:cpu:4`` in a device list (docs/runtime.md, "Scaling out").

- :mod:`.connect` -- reaching the cluster (``cluster="auto" | "local" | ADDRESS``), placing devices
  on nodes, the weights kept once in the object store; ``ray`` is imported lazily, only here;
- :mod:`.wire` -- a partition as a flat description plus its weights;
- :mod:`.transfer` -- tensors left in the object store between the partitions of a pipeline;
- :mod:`.actor` -- what runs in each device's actor (compiles and runs its partitions);
- :mod:`.remote_device` -- :class:`RayDeviceManager`, the device manager the executor talks to.
"""

from __future__ import annotations

from glow_core.runtime.cluster.connect import Cluster, require_ray, start_local_cluster
from glow_core.runtime.cluster.remote_device import RayDeviceManager

__all__ = ["Cluster", "RayDeviceManager", "require_ray", "start_local_cluster"]
