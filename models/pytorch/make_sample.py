"""Write the tiny CNN of the README's headline demo: ``models/pytorch/sample.pt2``, an ExportedProgram.

    python models/pytorch/make_sample.py            # writes models/pytorch/sample.pt2 (torch.export)
    convert 'pytorch->caffe' models/pytorch/sample.pt2
    python models/pytorch/make_sample.py models/pytorch/sample.pt   # the TorchScript file (committed)

``torch.export`` is the format torch recommends today (TorchScript's ``jit.trace``/``jit.save``
warn that they are deprecated); the committed ``sample.pt`` is the same model traced to
TorchScript, which the tests and the batch examples still convert. Either file records the shape
of the example it was made with, so the demo needs no ``--input-shape``. Weights are seeded and
the BatchNorm statistics measured on seeded random data, so the output is neither degenerate nor
different from run to run.
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


def main(out: Path = HERE / "sample.pt2") -> None:
    """Build and calibrate the sample model; save it with torch.export (``.pt2``) or traced to
    TorchScript (any other suffix)."""
    torch.manual_seed(0)
    model = recalibrate(SampleNet(), (1, 3, 32, 32))
    example = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    if out.suffix == ".pt2":
        program = torch.export.export(model.eval(), (example,))
        torch.export.save(program, out)
        print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")
        return
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
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "sample.pt2")
