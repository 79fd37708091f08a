"""The interpreter's kernel table: one numpy function per node kind.

A kernel is ``fn(attrs, out_types, *inputs) -> array | tuple of arrays``; an
omitted optional operand arrives as ``None``. It must return exactly the
declared element kinds and shapes (the executor checks). The backend's
capability is literally the set of keys in :data:`KERNELS`.
"""

from glow_core.ir.kinds import KindTable

KERNELS = KindTable("interpreter kernels")

from glow_backend_interpreter.kernels import elementwise, movement, nn, reduce  # noqa: E402,F401
from glow_backend_interpreter.kernels import norm  # noqa: E402,F401
from glow_backend_interpreter.kernels import movement_index, movement_resize  # noqa: E402,F401
from glow_backend_interpreter.kernels import elementwise_math  # noqa: E402,F401  (element-wise helper)
from glow_backend_interpreter.kernels import nn_quant  # noqa: E402,F401  (nn helper)
from glow_backend_interpreter.kernels import nn_seq  # noqa: E402,F401  (nn helper)
from glow_backend_interpreter.kernels import nn_spatial  # noqa: E402,F401  (nn helper)
from glow_backend_interpreter.kernels import fused  # noqa: E402,F401  (graph optimizer: fused kinds)
