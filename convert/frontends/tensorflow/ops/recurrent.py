"""Keras recurrent layers recognised in a lowered while loop (``recurrent.py``) -> ONNX LSTM / GRU / RNN.

The loop's time-major sequence ``[T, N, C]`` is ONNX's ``layout=0`` input as it is; Keras' weights
were already rearranged into ONNX's gate order by the recogniser (``W [gates*U, C]``, ``R [gates*U,
U]``, ``B = [W_b, R_b]``). The initial states are passed when they are not Keras' zeros.
"""

from __future__ import annotations

import numpy as np

from convert.frontends.tensorflow.context import TF, TFContext
from convert.frontends.tensorflow.graph import TFNode
from convert.frontends.tensorflow.ops import register
from convert.frontends.tensorflow.recurrent import RECURRENT_OP

__all__: list[str] = []


@register(RECURRENT_OP, maps_to="LSTM / GRU (linear_before_reset) / RNN",
          notes="a lowered while loop whose body is exactly a Keras LSTM, GRU (reset_after) or SimpleRNN cell; "
                "return_sequences, go_backwards (a ReverseV2 before it), Bidirectional")
def keras_recurrent(node: TFNode, ctx: TFContext) -> None:
    """One Keras recurrent layer -> one ONNX LSTM/GRU/RNN (forward, time-major)."""
    attrs = node.attrs
    kind = str(attrs["kind"])
    b = ctx.builder
    weights = [b.const(np.ascontiguousarray(np.asarray(attrs[k])[None]).astype(np.float32), name=f"{node.name}/{k}")
               for k in ("W", "R", "B")]
    given = list(attrs["init_given"])  # type: ignore[call-overload]
    states: list[object] = []
    inputs = iter(node.inputs[1:])
    for present in given:
        if present:
            axes = b.const(np.array([0], np.int64))
            states.append(ctx.emit("Unsqueeze", [ctx.get(next(inputs), TF), axes], suffix=f"init{len(states)}"))
        else:
            states.append(None)
    onnx_attrs: dict[str, object] = {"hidden_size": int(attrs["units"]),  # type: ignore[call-overload]
                                     "activations": list(attrs["activations"])}  # type: ignore[call-overload]
    if kind == "GRU":
        onnx_attrs["linear_before_reset"] = 1
    x = ctx.get(node.inputs[0], TF)
    outs = ctx.emit_multi(kind, [x, *weights, None, *states], onnx_attrs, outputs=1 + len(given))  # type: ignore[list-item]
    axis0, axis1 = b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))
    if attrs["all_steps"]:
        ctx.bind(ctx.emit("Squeeze", [outs[0], axis1], suffix="Y"), TF, 0)
    else:
        ctx.bind(outs[1], TF, 0)  # Y_h: [1, N, U], the one-element list Keras keeps
    for i in range(len(given)):
        ctx.bind(ctx.emit("Squeeze", [outs[1 + i], axis0], suffix=f"state{i}"), TF, 1 + i)
