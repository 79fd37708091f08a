"""Declarations of every graph node kind, one module per family.

Importing this package fills the node-kind table in ``glow_core.ir.kinds``.
"""

from glow_core.ir.defs import elementwise, movement, nn, reduce  # noqa: F401
from glow_core.ir.defs import norm  # noqa: F401,E402  (reductions helper: normalization kinds)
from glow_core.ir.defs import movement_index, movement_resize  # noqa: F401,E402  (movement helper)
from glow_core.ir.defs import nn_quant  # noqa: F401,E402  (nn helper)
from glow_core.ir.defs import nn_qprim  # noqa: F401,E402  (nn_quant helper: quantized primitives)
from glow_core.ir.defs import nn_seq  # noqa: F401,E402  (nn helper)
from glow_core.ir.defs import nn_spatial  # noqa: F401,E402  (nn helper)
from glow_core.ir.defs import fused  # noqa: F401,E402  (graph optimizer: fused kinds)
from glow_core.ir.defs import signal  # noqa: F401,E402  (DFT, STFT)
from glow_core.ir.defs import linalg  # noqa: F401,E402  (Det)
from glow_core.ir.defs import detection  # noqa: F401,E402  (NonMaxSuppression, Unique)
from glow_core.ir.defs import text  # noqa: F401,E402  (TfIdfVectorizer)
from glow_core.ir.defs import quant  # noqa: F401,E402  (typed quantized kinds: quantization conversion)
from glow_core.ir.defs import symbolic  # noqa: F401,E402  (SymbolicValue: sizes of a run)
