"""The reference kernel table: one numpy function per node kind.

A kernel is ``fn(attrs, out_types, *inputs) -> array | tuple of arrays``; an
omitted optional operand arrives as ``None``. It must return exactly the
declared element kinds and shapes (``glow_core.reference.run_kernel`` checks).
Constant folding evaluates nodes with it, and the interpreter backend's
capability is literally the set of keys in :data:`KERNELS`.
"""

from glow_core.ir.kinds import KindTable

KERNELS = KindTable("reference kernels")

from glow_core.reference.kernels import elementwise, movement, nn, reduce  # noqa: E402,F401
from glow_core.reference.kernels import norm  # noqa: E402,F401
from glow_core.reference.kernels import movement_index, movement_resize  # noqa: E402,F401
from glow_core.reference.kernels import elementwise_math  # noqa: E402,F401  (element-wise helper)
from glow_core.reference.kernels import nn_quant  # noqa: E402,F401  (nn helper)
from glow_core.reference.kernels import nn_qprim  # noqa: E402,F401  (nn_quant helper)
from glow_core.reference.kernels import nn_seq  # noqa: E402,F401  (nn helper)
from glow_core.reference.kernels import nn_spatial  # noqa: E402,F401  (nn helper)
from glow_core.reference.kernels import fused  # noqa: E402,F401  (graph optimizer: fused kinds)
from glow_core.reference.kernels import signal  # noqa: E402,F401  (DFT, STFT)
from glow_core.reference.kernels import linalg  # noqa: E402,F401  (Det)
from glow_core.reference.kernels import detection  # noqa: E402,F401  (NonMaxSuppression, Unique)
from glow_core.reference.kernels import text  # noqa: E402,F401  (TfIdfVectorizer)
from glow_core.reference.kernels import quant  # noqa: E402,F401  (typed quantized kinds)
