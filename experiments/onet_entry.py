"""A user's entry point for facenet-pytorch's MTCNN ONet, copied beside the request with
the wheel's `facenet_pytorch/models/mtcnn.py` and `facenet_pytorch/data/onet.pt`.

Importing the `facenet_pytorch` package needs torchvision; this module does not: it takes
the ONet class definition out of the wheel's own source with `ast`, runs it with torch and
torch.nn alone, and loads the wheel's weights into it. ONet returns three outputs a crop:
box regressions [N, 4], landmarks [N, 10] and face probabilities [N, 2]."""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from torch import nn


def onet_class(source: str, filename: str = "mtcnn.py") -> type[nn.Module]:
    """The `ONet` class defined in `source`, built with only `torch` and `nn` in scope (the
    file's other imports, such as its relative ones, are not run)."""
    tree = ast.parse(source, filename)
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ONet"]
    if len(found) != 1:
        raise ValueError(f"{filename}: expected one top-level class ONet, found {len(found)}")
    namespace: dict[str, object] = {"torch": torch, "nn": nn, "__name__": "mtcnn"}
    exec(compile(ast.Module(body=found, type_ignores=[]), filename, "exec"), namespace)
    onet = namespace["ONet"]
    assert isinstance(onet, type) and issubclass(onet, nn.Module)
    return onet


def build() -> nn.Module:
    here = Path(__file__).parent
    onet = onet_class((here / "mtcnn.py").read_text(), str(here / "mtcnn.py"))(pretrained=False)
    weights = torch.load(here / "onet.pt", map_location="cpu", weights_only=True)
    onet.load_state_dict(weights, strict=True)
    return onet.eval()
