"""Write ``models/pytorch/sample.pt``: the tiny TorchScript CNN of the README's headline demo.

    python models/pytorch/make_sample.py            # writes models/pytorch/sample.pt
    convert 'pytorch->caffe' models/pytorch/sample.pt

A traced TorchScript file records the shape of the example it was traced with, so the demo
needs no ``--input-shape``. Weights are seeded and the BatchNorm statistics measured on seeded
random data, so the output is neither degenerate nor different from run to run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from nets import conv_bn, recalibrate  # noqa: E402


class SampleNet(nn.Module):
    """Conv-BN-ReLU x3 with max pooling, global average pooling, a classifier and softmax."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(conv_bn(3, 16, 3), nn.MaxPool2d(2), conv_bn(16, 32, 3, 2),
                                      conv_bn(32, 32, 3), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(32, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(image), 1)).softmax(1)


def main(out: Path = HERE / "sample.pt") -> None:
    """Build, calibrate, trace and save the sample model."""
    torch.manual_seed(0)
    model = recalibrate(SampleNet(), (1, 3, 32, 32))
    example = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        traced = torch.jit.trace(model, (example,))
    if out.exists() and _same_model(torch.jit.load(out), traced):
        # torch.jit.save is not byte-for-byte reproducible (archive ids): keep the committed file
        # when the model it holds is the same, so running this leaves the checkout clean.
        print(f"{out} is up to date")
        return
    torch.jit.save(traced, out)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")


def _same_model(saved: torch.jit.ScriptModule, traced: torch.jit.ScriptModule) -> bool:
    a, b = saved.state_dict(), traced.state_dict()
    return (saved.code == traced.code and a.keys() == b.keys()
            and all(torch.equal(a[k], b[k]) for k in a))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "sample.pt")
