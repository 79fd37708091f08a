"""Lowering rules, one module per family (each registers with ``lowering``)."""

from glow_core.lowering.rules import elementwise  # noqa: F401
from glow_core.lowering.rules import reduce  # noqa: F401,E402  (reductions helper)
from glow_core.lowering.rules import norm  # noqa: F401,E402  (reductions helper: normalization)
from glow_core.lowering.rules import fused  # noqa: F401,E402  (graph optimizer: fused kinds)
from glow_core.lowering.rules import nn  # noqa: F401,E402  (neural-net helper: nn compute kinds)
from glow_core.lowering.rules import nn_quant  # noqa: F401,E402  (neural-net helper: quantization kinds)
from glow_core.lowering.rules import nn_seq  # noqa: F401,E402  (neural-net helper: sequence kinds)
from glow_core.lowering.rules import nn_spatial  # noqa: F401,E402  (neural-net helper: spatial sampling kinds)
from glow_core.lowering.rules import movement, movement_index, movement_resize  # noqa: F401,E402  (movement helper)
from glow_core.lowering.rules import signal  # noqa: F401,E402  (DFT, STFT)
from glow_core.lowering.rules import linalg  # noqa: F401,E402  (Det)
from glow_core.lowering.rules import detection  # noqa: F401,E402  (NonMaxSuppression, Unique)
from glow_core.lowering.rules import text  # noqa: F401,E402  (TfIdfVectorizer)
