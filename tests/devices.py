"""Device parameters for the tests whose code has a GPU path: the CPU case runs everywhere, the
cuda case where a GPU is lent (``tests/scripts/gpu_checks.sh``), skipped elsewhere."""

from __future__ import annotations

import pytest
import torch

ON_CUDA = pytest.param(
    "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
)
