"""Write ``torch26_convnet.pt2``: a small seeded conv net saved by ``torch.export.save`` of torch 2.6.

torch 2.6 and earlier write an ExportedProgram archive with ``serialized_exported_program.json`` at
its top; 2.7 on, ``<root>/archive_format`` and ``<root>/models/*.json``. The file is kept in the
repository because the suite's torch writes only the new layout; run this under torch 2.6 to
rebuild it (``PYTHONPATH=<a torch 2.6 install> python models/pytorch/make_torch26_pt2.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn


def build() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    with torch.no_grad():  # trained-like batch-norm statistics, not the identity of a fresh layer
        bn = net[1]
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.25, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
    return net.eval()


def main(out: Path) -> None:
    if not torch.__version__.startswith("2.6."):
        raise SystemExit(f"run this under torch 2.6 (this is {torch.__version__}): it writes 2.6's .pt2 layout")
    program = torch.export.export(build(), (torch.rand(1, 3, 16, 16),))
    torch.export.save(program, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("torch26_convnet.pt2"))
