"""Import rules, one module per family, registered with ``import_rule``."""

from glow_core.importer.rules import elementwise, movement, nn, reduce  # noqa: F401
from glow_core.importer.rules import norm  # noqa: F401,E402
from glow_core.importer.rules import movement_gen, movement_index, movement_resize  # noqa: F401,E402
from glow_core.importer.rules import nn_quant  # noqa: F401,E402  (nn helper)
from glow_core.importer.rules import nn_seq  # noqa: F401,E402  (nn helper)
from glow_core.importer.rules import nn_spatial  # noqa: F401,E402  (nn helper)
from glow_core.importer.rules import control  # noqa: F401,E402  (If, Loop, Scan)
from glow_core.importer.rules import sequence  # noqa: F401,E402  (sequences and optionals)
from glow_core.importer.rules import signal  # noqa: F401,E402  (DFT, STFT, MelWeightMatrix)
from glow_core.importer.rules import linalg  # noqa: F401,E402  (Det, AffineGrid, SwiGLU)
from glow_core.importer.rules import detection  # noqa: F401,E402  (NonMaxSuppression, Unique)
from glow_core.importer.rules import text  # noqa: F401,E402  (TfIdfVectorizer)
from glow_core.importer.rules import training  # noqa: F401,E402  (Adagrad, Momentum, Adam)
from glow_core.importer.rules import ml  # noqa: F401,E402  (ai.onnx.ml: ArrayFeatureExtractor, Binarizer)
