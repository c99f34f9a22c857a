"""Run one Caffe net in real Caffe, in a process of its own (used by ``runtimes.caffe_real``).

Real Caffe aborts the process on a failed CHECK (a shape mismatch, an unknown layer), so it
never runs inside convert's own process. Usage::

    python -m convert.parity.runtimes._caffe_worker CAFFE_DIR PROTOTXT CAFFEMODEL IN.npz OUT.npz BLOBS.json

``CAFFE_DIR`` holds the compiled extension ``_caffe.so`` (imported directly, without the
``caffe`` package's Python helpers and their dependencies). ``IN.npz`` maps blob names to input
arrays (``names`` lists them, arrays are ``arr_0``...). ``BLOBS.json`` is
``{"blobs": [...], "layers": [...]}``: the blobs to return after the forward pass (none listed:
the net's outputs), and the layers whose tops to copy right after each runs (an in-place layer's
value is overwritten by the next in-place layer), returned as ``LAYER:k``. ``OUT.npz`` holds
them the same way. Only numpy is imported here.
"""

from __future__ import annotations

import json
import sys

import numpy as np

TEST = 1  # caffe.Phase.TEST


def main(argv: list[str]) -> int:
    """Load the net, feed the inputs, run forward once, write the requested blobs."""
    caffe_dir, proto, model, in_path, out_path, blobs_path = argv[1:7]
    sys.path.insert(0, caffe_dir)
    import _caffe  # type: ignore[import-not-found]

    _caffe.set_mode_cpu()
    net = _caffe.Net(proto, model, TEST)
    names = list(net._blob_names)
    blobs = dict(zip(names, net._blobs, strict=True))
    with np.load(in_path, allow_pickle=False) as data:
        feeds = {str(n): data[f"arr_{i}"] for i, n in enumerate(data["names"])}
    for name, x in feeds.items():
        if name not in blobs:
            sys.stderr.write(f"the net has no input blob '{name}'\n")
            return 2
        blob = blobs[name]
        blob.reshape(*x.shape)
        blob.data[...] = x
    net.reshape()
    with open(blobs_path) as fh:
        request = json.load(fh)
    layers = set(request.get("layers", []))
    taken: dict[str, np.ndarray] = {}
    if layers:
        for i, lname in enumerate(net._layer_names):
            net._forward(i, i)
            if lname in layers:
                for k, top in enumerate(net._top_ids(i)):
                    taken[f"{lname}:{k}"] = np.array(net._blobs[top].data)
    else:
        net._forward(0, len(net.layers) - 1)
    wanted = request.get("blobs") or ([] if layers else [names[i] for i in net._outputs])
    taken.update({n: np.array(blobs[n].data) for n in wanted if n in blobs})
    found = list(taken)
    np.savez(out_path, names=np.array(found, dtype=str), **{f"arr_{i}": taken[n] for i, n in enumerate(found)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
