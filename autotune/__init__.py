"""autotune: hardware-aware tuning of ML models.

This package is the control plane. Importing it stays cheap: torch, onnxruntime, Ray and
MLflow are imported only where they are used.
"""

__version__ = "0.1.0"
