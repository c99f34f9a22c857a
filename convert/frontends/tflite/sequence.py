"""TFLite's fused sequence ops -> ONNX ``LSTM`` / ``RNN``, where the recurrences are the same.

``UNIDIRECTIONAL_SEQUENCE_LSTM`` (TFLite's kernel, ``lstm_eval.cc``), per step, with ``a`` the op's
fused activation (the cell's, not applied to the output) and ``p`` the optional peepholes::

    i = sigmoid(W_i x + R_i h + p_i * c + b_i)      f = sigmoid(W_f x + R_f h + p_f * c + b_f)
    g = a(W_c x + R_c h + b_c)                      c' = f * c + i * g
    o = sigmoid(W_o x + R_o h + p_o * c' + b_o)     h' = o * a(c')

which is ONNX ``LSTM`` with activations (Sigmoid, a, a), its gates stacked in ONNX's order i, o, f,
c (TFLite keeps one tensor per gate), the recurrent bias zero and peepholes ``P = [p_i, p_o, p_f]``.
``BIDIRECTIONAL_SEQUENCE_LSTM`` is two of them, the backward one over the reversed sequence with
its outputs aligned to the input's steps: ONNX's bidirectional ``LSTM`` (``merge_outputs``: the two
concatenated on the last axis). ``UNIDIRECTIONAL_SEQUENCE_RNN`` is ``h' = a(W x + R h + b)``: ONNX
``RNN`` with activation ``a``.
Batch-major sequences (``time_major`` false) are transposed to ONNX's time-major and back. The
initial states are the state tensors' values: zeros for TFLite's variable tensors, i.e. the first
invocation of a fresh interpreter (TFLite keeps the final state for the next one; ONNX does not).

Refused, each in one line: a cell clip or projection clip (ONNX's ``clip`` clips the gates' inputs,
not the cell), CIFG (no input gate), a projection layer, layer normalisation, a cell activation
other than tanh or ReLU, quantized (hybrid or integer) weights, the bidirectional op's auxiliary input
and its batch-major merged output (TFLite's own kernel varies from run to run there).
"""

from __future__ import annotations

import numpy as np

from convert.frontends.tensorflow.context import TF, TFContext
from convert.frontends.tensorflow.graph import TFNode
from convert.ir import RefusedError, Value

from .ops import ACTIVATIONS, register

__all__ = ["bidirectional_sequence_lstm", "unidirectional_sequence_lstm", "unidirectional_sequence_rnn"]

_ONNX_ACTIVATIONS = {"TANH": "Tanh", "RELU": "Relu"}
# UNIDIRECTIONAL_SEQUENCE_LSTM's inputs (TFLite's lstm_shared.h)
_X = 0
_W = {"i": 1, "f": 2, "c": 3, "o": 4}
_R = {"i": 5, "f": 6, "c": 7, "o": 8}
_PEEP = {"i": 9, "f": 10, "o": 11}
_BIAS = {"i": 12, "f": 13, "c": 14, "o": 15}
_PROJECTION = (16, 17)
_H0, _C0 = 18, 19
_LAYER_NORM = (20, 21, 22, 23)
_ONNX_GATES = ("i", "o", "f", "c")


def _activation(node: TFNode) -> str:
    name = ACTIVATIONS.get(int(node.attrs.get("activation", 0)), "?")  # type: ignore[call-overload]
    if name not in _ONNX_ACTIVATIONS:
        raise RefusedError(f"cell activation {name} is not supported (tanh or ReLU)")
    return _ONNX_ACTIVATIONS[name]


def _weights(node: TFNode, ctx: TFContext, index: int, what: str, shape: tuple[int, ...]) -> np.ndarray:
    key = node.inputs[index] if index < len(node.inputs) else ""
    if not key:
        raise RefusedError(f"input {index} ({what}) is missing")
    if key in getattr(ctx, "quant_consts", {}):
        raise RefusedError(f"the {what} are quantized; only float weights are converted")
    arr = ctx.need_const(key, f"the {what}")
    if arr.dtype != np.float32 or tuple(arr.shape) != shape:
        raise RefusedError(f"the {what} are {arr.dtype} {list(arr.shape)}; expected float32 {list(shape)}")
    return arr


def _sequence(node: TFNode, ctx: TFContext, time_major: bool) -> tuple[Value, int, int]:
    """The input sequence time-major [T, N, I], with N and I (static)."""
    shape = ctx.shape(node.inputs[_X])
    if shape is None or len(shape) != 3 or shape[2] is None:
        raise RefusedError(f"the input is {list(shape) if shape else '?'}; a sequence of rank 3 with a static "
                           f"feature size is needed")
    x = ctx.get(node.inputs[_X], TF)
    if not time_major:
        x = ctx.emit("Transpose", [x], {"perm": [1, 0, 2]}, suffix="time_major")
    batch = shape[1] if time_major else shape[0]
    return x, -1 if batch is None else int(batch), int(shape[2])


def _state(node: TFNode, ctx: TFContext, index: int, what: str) -> Value:
    key = node.inputs[index] if index < len(node.inputs) else ""
    if not key:
        raise RefusedError(f"input {index} ({what}) is missing")
    return ctx.emit("Unsqueeze", [ctx.get(key, TF), ctx.builder.const(np.array([0], np.int64))], suffix=what)


def _outputs(node: TFNode, ctx: TFContext, y: Value, time_major: bool, index: int = 0) -> None:
    """ONNX's Y [T, 1, N, H] as TFLite's output ``index`` [T, N, H] (or [N, T, H])."""
    y = ctx.emit("Squeeze", [y, ctx.builder.const(np.array([1], np.int64))], suffix="one_direction")
    if not time_major:
        y = ctx.emit("Transpose", [y], {"perm": [1, 0, 2]}, suffix="batch_major")
    ctx.bind(y, TF, index=index)


def _direction(node: TFNode, ctx: TFContext, shift: int, n_input: int) -> tuple[np.ndarray, ...]:
    """One direction's ONNX W [4H, I], R [4H, H], B [8H] and P [3H] (or an empty P), from TFLite's
    per-gate tensors at the unidirectional op's input indices plus ``shift``; refuses what ONNX lacks."""
    present = [bool(k) for k in node.inputs]
    if not present[_W["i"] + shift] or not present[_R["i"] + shift]:
        raise RefusedError("CIFG (coupled input and forget gates) is not supported")
    if any(present[i + shift] for i in _PROJECTION):
        raise RefusedError("a projection layer is not supported")
    peep = [present[i + shift] for i in _PEEP.values()]
    if any(peep) and not all(peep):
        raise RefusedError("peepholes on some gates only are not supported")
    w_f = ctx.need_const(node.inputs[_W["f"] + shift], "the input-to-forget weights")
    if w_f.ndim != 2:
        raise RefusedError(f"the input-to-forget weights are {list(w_f.shape)}; expected [cells, {n_input}]")
    n_cell = int(w_f.shape[0])
    w = np.concatenate([_weights(node, ctx, _W[g] + shift, f"input-to-{g} weights", (n_cell, n_input))
                        for g in _ONNX_GATES])
    r = np.concatenate([_weights(node, ctx, _R[g] + shift, f"recurrent-to-{g} weights", (n_cell, n_cell))
                        for g in _ONNX_GATES])
    b = np.concatenate([_weights(node, ctx, _BIAS[g] + shift, f"{g}-gate bias", (n_cell,)) for g in _ONNX_GATES]
                       + [np.zeros(4 * n_cell, np.float32)])
    p = np.concatenate([_weights(node, ctx, _PEEP[g] + shift, f"cell-to-{g} peepholes", (n_cell,))
                        for g in "iof"]) if all(peep) else np.zeros(0, np.float32)
    return w, r, b, p


def _check_lstm_options(node: TFNode) -> None:
    a = node.attrs
    if float(a.get("cell_clip", 0.0)) or float(a.get("proj_clip", 0.0)):  # type: ignore[arg-type]
        raise RefusedError("cell or projection clipping is not supported (ONNX's clip bounds the gates' inputs)")
    if a.get("diagonal_recurrent_tensors"):
        raise RefusedError("diagonal recurrent weights are not supported")


def _emit_lstm(node: TFNode, ctx: TFContext, x: Value, directions: list[tuple[np.ndarray, ...]],
               states: list[tuple[int, int]]) -> Value:
    """ONNX LSTM over 1 or 2 directions (stacked weights, initial states concatenated); returns Y [T, D, N, H]."""
    c = ctx.builder.const
    d = len(directions)
    if len({tuple(a.shape for a in parts) for parts in directions}) != 1:
        raise RefusedError("the two directions differ in size or in having peepholes")
    w, r, b, p = (np.stack(parts) for parts in zip(*directions, strict=True))
    n_cell = r.shape[2]
    h0 = [_state(node, ctx, h, "initial_h") for h, _ in states]
    c0 = [_state(node, ctx, cs, "initial_c") for _, cs in states]
    inputs: list[Value | None] = [x, c(w, name=f"{node.name}/W"), c(r, name=f"{node.name}/R"),
                                  c(b, name=f"{node.name}/B"), None,
                                  h0[0] if d == 1 else ctx.emit("Concat", h0, {"axis": 0}, suffix="initial_h"),
                                  c0[0] if d == 1 else ctx.emit("Concat", c0, {"axis": 0}, suffix="initial_c")]
    if p.shape[1]:
        inputs.append(c(p, name=f"{node.name}/P"))
    act = _activation(node)
    return ctx.emit("LSTM", inputs, {"hidden_size": int(n_cell), "activations": ["Sigmoid", act, act] * d,
                                     "direction": "bidirectional" if d == 2 else "forward"})


@register("UNIDIRECTIONAL_SEQUENCE_LSTM", maps_to="LSTM",
          notes="float; peepholes; no CIFG, projection, layer norm or clipping; tanh/ReLU cell; zero or constant "
                "initial state")
def unidirectional_sequence_lstm(node: TFNode, ctx: TFContext) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM -> LSTM (gates i, f, c, o restacked as i, o, f, c; see the module)."""
    if len(node.inputs) not in (20, 24):
        raise RefusedError(f"it has {len(node.inputs)} inputs; the LSTM takes 20 or 24")
    if any(node.inputs[i] for i in _LAYER_NORM if i < len(node.inputs)):
        raise RefusedError("layer normalisation is not supported")
    _check_lstm_options(node)
    time_major = bool(node.attrs.get("time_major", False))
    x, _, n_input = _sequence(node, ctx, time_major)
    y = _emit_lstm(node, ctx, x, [_direction(node, ctx, 0, n_input)], [(_H0, _C0)])
    _outputs(node, ctx, y, time_major)


# BIDIRECTIONAL_SEQUENCE_LSTM: the forward direction's tensors at the unidirectional indices 1-17,
# the backward one's 17 further on; states fw h, fw c, bw h, bw c; then the auxiliary input and its weights.
_BW_SHIFT = 17
_BI_STATES = ((35, 36), (37, 38))
_AUX = range(39, 48)


@register("BIDIRECTIONAL_SEQUENCE_LSTM", maps_to="LSTM (bidirectional)",
          notes="float; time-major merged or separate outputs; no auxiliary input; otherwise as "
                "UNIDIRECTIONAL_SEQUENCE_LSTM")
def bidirectional_sequence_lstm(node: TFNode, ctx: TFContext) -> None:
    """BIDIRECTIONAL_SEQUENCE_LSTM -> LSTM(direction=bidirectional): merged, the output is [fw, bw] on the last
    axis; else two outputs (the backward one aligned with the input's time steps, as ONNX's)."""
    if len(node.inputs) != 48:
        raise RefusedError(f"it has {len(node.inputs)} inputs; the bidirectional LSTM takes 48")
    if any(node.inputs[i] for i in _AUX):
        raise RefusedError("an auxiliary input is not supported")
    _check_lstm_options(node)
    merge = bool(node.attrs.get("merge_outputs", False))
    if len(node.shapes) != (1 if merge else 2):
        raise RefusedError(f"it has {len(node.shapes)} outputs; with merge_outputs {merge} it has {1 if merge else 2}")
    time_major = bool(node.attrs.get("time_major", True))
    if merge and not time_major:  # measured: 2 of 4 fresh interpreters off by up to 0.86 of the output's scale
        raise RefusedError("batch-major merged outputs are not converted: TFLite's own kernel gives results "
                           "that vary from run to run there (time-major or separate outputs are converted)")
    x, _, n_input = _sequence(node, ctx, time_major)
    y = _emit_lstm(node, ctx, x, [_direction(node, ctx, 0, n_input), _direction(node, ctx, _BW_SHIFT, n_input)],
                   list(_BI_STATES))
    if merge:  # [T, 2, N, H] -> [T, N, 2, H] -> [T, N, 2H]
        y = ctx.emit("Transpose", [y], {"perm": [0, 2, 1, 3]}, suffix="merge")
        y = ctx.emit("Reshape", [y, ctx.builder.const(np.array([0, 0, -1], np.int64))], suffix="merge")
        if not time_major:
            y = ctx.emit("Transpose", [y], {"perm": [1, 0, 2]}, suffix="batch_major")
        ctx.bind(y, TF)
        return
    for k, part in enumerate(ctx.emit_multi("Split", [y, ctx.builder.const(np.array([1, 1], np.int64))],
                                            {"axis": 1}, outputs=2)):
        _outputs(node, ctx, part, time_major, index=k)


@register("UNIDIRECTIONAL_SEQUENCE_RNN", maps_to="RNN",
          notes="float; tanh/ReLU; zero or constant initial state")
def unidirectional_sequence_rnn(node: TFNode, ctx: TFContext) -> None:
    """UNIDIRECTIONAL_SEQUENCE_RNN(x, W, R, b, h) -> RNN with activation a: h' = a(W x + R h + b)."""
    act = _activation(node)
    time_major = bool(node.attrs.get("time_major", False))
    x, _, n_input = _sequence(node, ctx, time_major)
    units = int(ctx.need_const(node.inputs[1], "the input weights").shape[0])
    w = _weights(node, ctx, 1, "input weights", (units, n_input))
    r = _weights(node, ctx, 2, "recurrent weights", (units, units))
    b = np.concatenate([_weights(node, ctx, 3, "bias", (units,)), np.zeros(units, np.float32)])
    c = ctx.builder.const
    y = ctx.emit("RNN", [x, c(w.reshape(1, units, n_input), name=f"{node.name}/W"),
                         c(r.reshape(1, units, units), name=f"{node.name}/R"),
                         c(b.reshape(1, 2 * units), name=f"{node.name}/B"), None, _state(node, ctx, 4, "initial_h")],
                 {"hidden_size": units, "activations": [act]})
    _outputs(node, ctx, y, time_major)
