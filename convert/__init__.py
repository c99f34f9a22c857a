"""convert: model conversion between PyTorch, Darknet, PaddlePaddle, Caffe and ONNX."""

from __future__ import annotations

__version__ = "0.1.0"
