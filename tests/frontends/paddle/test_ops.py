"""Each Paddle op converter against a numpy oracle, on programs built in code (no Paddle needed).

Every registered spelling runs: a case is written for one spelling and replayed under every
other key that maps to the same converter (PIR names such as ``add``/``relu_`` included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from paddle_helpers import SynthOp, write_params, write_program

from convert.exporters.onnx import EXPORTER
from convert.frontends.paddle import FRONTEND
from convert.frontends.paddle.ops import OPS
from convert.ir import Options, passes

RTOL_FP32 = 1e-5  # max |ours - oracle| / max |oracle|


@dataclass
class Case:
    """A one-op program: feeds, params, attributes, and the numpy oracle of its output(s)."""

    op: str
    feeds: dict[str, np.ndarray]
    attrs: dict[str, object] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)
    inputs: dict[str, list[str]] = field(default_factory=dict)
    expect: dict[str, np.ndarray] = field(default_factory=dict)  # output slot -> value
    out_slots: tuple[str, ...] = ("Out",)


R = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def _conv_ref(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pads: tuple[int, int, int, int],
              dil: tuple[int, int] = (1, 1), groups: int = 1) -> np.ndarray:
    """pads = (top, bottom, left, right)."""
    x = np.pad(x, ((0, 0), (0, 0), pads[:2], pads[2:]))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dil[1] * (kw - 1) - 1) // stride[1] + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow), np.float64)
    for g in range(groups):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dil[0]:i * dil[0] + stride[0] * (oh - 1) + 1:stride[0],
                           j * dil[1]:j * dil[1] + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out.astype(np.float32)


def _pool_ref(x: np.ndarray, k: tuple[int, int], s: tuple[int, int], pads: tuple[int, int, int, int],
              kind: str, ceil: bool = False, exclusive: bool = True) -> np.ndarray:
    """Paddle's pool2d: windows clipped to the input; avg divides by the clipped or full size."""
    n, c, h, w = x.shape
    extra = (s[0] - 1, s[1] - 1) if ceil else (0, 0)
    oh = (h + pads[0] + pads[1] - k[0] + extra[0]) // s[0] + 1
    ow = (w + pads[2] + pads[3] - k[1] + extra[1]) // s[1] + 1
    out = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * s[0] - pads[0], j * s[1] - pads[2]
            h0, h1 = max(hs, 0), min(hs + k[0], h)
            w0, w1 = max(ws, 0), min(ws + k[1], w)
            win = x[:, :, h0:h1, w0:w1]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                div = (h1 - h0) * (w1 - w0) if exclusive else k[0] * k[1]
                out[:, :, i, j] = win.sum(axis=(2, 3)) / div
    return out


def _adaptive_ref(x: np.ndarray, out: tuple[int, int], kind: str) -> np.ndarray:
    n, c, h, w = x.shape
    res = np.zeros((n, c, *out), np.float32)
    for i in range(out[0]):
        for j in range(out[1]):
            h0, h1 = (i * h) // out[0], -((-(i + 1) * h) // out[0])
            w0, w1 = (j * w) // out[1], -((-(j + 1) * w) // out[1])
            win = x[:, :, h0:h1, w0:w1]
            res[:, :, i, j] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return res


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


X4 = _r(2, 4, 7, 9)
W = _r(6, 2, 3, 3)
BN = [np.abs(_r(4)) + 0.5, _r(4), _r(4), np.abs(_r(4)) + 0.5]  # scale, bias, mean, variance


def _cases() -> dict[str, list[Case]]:
    x = X4
    relu_like = {
        "relu": np.maximum(x, 0), "sigmoid": _sigmoid(x), "tanh": np.tanh(x), "exp": np.exp(x),
        "abs": np.abs(x), "floor": np.floor(x), "assign": x,
        "relu6": np.clip(x * 4, 0, 6), "hard_swish": x * np.clip(x + 3, 0, 6) / 6,
        "hard_sigmoid": np.clip(0.2 * x + 0.5, 0, 1), "swish": x * _sigmoid(x),
        "leaky_relu": np.where(x > 0, x, 0.1 * x), "softmax": np.exp(x) / np.exp(x).sum(-1, keepdims=True),
    }
    cases: dict[str, list[Case]] = {}
    for op, ref in relu_like.items():
        feed = x * 4 if op == "relu6" else x
        attrs: dict[str, object] = {"alpha": 0.1} if op == "leaky_relu" else {}
        cases[op] = [Case(op, {"x": feed}, attrs, expect={"Out": ref})]
    cases["sqrt"] = [Case("sqrt", {"x": np.abs(x) + 0.1}, expect={"Out": np.sqrt(np.abs(x) + 0.1)})]
    cases["log"] = [Case("log", {"x": np.abs(x) + 0.1}, expect={"Out": np.log(np.abs(x) + 0.1)})]
    cases["erf"] = [Case("erf", {"x": x}, expect={"Out": np.vectorize(__import__("math").erf)(x).astype(np.float32)})]
    sm = x - x.max(1, keepdims=True)
    cases["log_softmax"] = [Case("log_softmax", {"x": x}, {"axis": 1},
                                 expect={"Out": sm - np.log(np.exp(sm).sum(1, keepdims=True))})]
    cases["gelu"] = [Case("gelu", {"x": x}, expect={"Out": 0.5 * x * (1 + np.vectorize(
        __import__("math").erf)(x / np.sqrt(2)).astype(np.float32))}),
        Case("gelu", {"x": x}, {"approximate": True}, expect={"Out": 0.5 * x * (1 + np.tanh(
            np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))})]
    cases["hard_swish"].append(Case("hard_swish", {"x": x}, {"threshold": 4.0, "scale": 5.0, "offset": 2.0},
                                    expect={"Out": x * np.clip(x + 2, 0, 4) / 5}))
    cases["swish"].append(Case("swish", {"x": x}, {"beta": 2.0}, expect={"Out": x * _sigmoid(2 * x)}))
    cases["conv2d"] = [
        Case("conv2d", {"x": x}, {"strides": [2, 1], "paddings": [1, 2, 0, 1], "groups": 2, "dilations": [1, 2]},
             params={"w": W}, inputs={"Input": ["x"], "Filter": ["w"]},
             expect={"Output": _conv_ref(x, W, (2, 1), (1, 2, 0, 1), (1, 2), 2)}, out_slots=("Output",)),
        Case("conv2d", {"x": x}, {"strides": [1, 1], "paddings": [0, 0], "padding_algorithm": "SAME", "groups": 2},
             params={"w": W}, inputs={"Input": ["x"], "Filter": ["w"]},
             expect={"Output": _conv_ref(x, W, (1, 1), (1, 1, 1, 1), (1, 1), 2)}, out_slots=("Output",)),
    ]
    wt = _r(4, 3, 2, 2)
    up = np.zeros((2, 3, 14, 18), np.float32)
    for i in range(2):
        for j in range(2):
            up[:, :, i::2, j::2] += np.einsum("nchw,co->nohw", x, wt[:, :, i, j])
    cases["conv2d_transpose"] = [Case("conv2d_transpose", {"x": x}, {"strides": [2, 2], "paddings": [0, 0]},
                                      params={"w": wt}, inputs={"Input": ["x"], "Filter": ["w"]},
                                      expect={"Output": up}, out_slots=("Output",))]
    scale, bias, mean, var = BN
    bn = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3) * scale[:, None, None] + bias[:, None, None]
    cases["batch_norm"] = [Case("batch_norm", {"x": x}, {"epsilon": 1e-3, "is_test": True},
                                params={"s": scale, "b": bias, "m": mean, "v": var},
                                inputs={"X": ["x"], "Scale": ["s"], "Bias": ["b"], "Mean": ["m"], "Variance": ["v"]},
                                expect={"Y": bn}, out_slots=("Y",))]
    pool = [
        ({"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "ceil_mode": True},
         _pool_ref(x, (3, 3), (2, 2), (1, 1, 1, 1), "max", ceil=True)),
        ({"pooling_type": "avg", "ksize": [3, 2], "strides": [2, 2], "paddings": [1, 0, 1, 0], "exclusive": True},
         _pool_ref(x, (3, 2), (2, 2), (1, 0, 1, 0), "avg")),
        ({"pooling_type": "avg", "ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1], "exclusive": False},
         _pool_ref(x, (3, 3), (1, 1), (1, 1, 1, 1), "avg", exclusive=False)),
        ({"pooling_type": "avg", "ksize": [2, 2], "strides": [2, 2], "paddings": [0, 0], "ceil_mode": True},
         _pool_ref(x, (2, 2), (2, 2), (0, 0, 0, 0), "avg", ceil=True)),
        ({"pooling_type": "avg", "ksize": [3, 4], "adaptive": True}, _adaptive_ref(x, (3, 4), "avg")),
        ({"pooling_type": "max", "ksize": [7, 3], "adaptive": True}, _adaptive_ref(x, (7, 3), "max")),
        ({"pooling_type": "max", "ksize": [1, 1], "adaptive": True}, x.max(axis=(2, 3), keepdims=True)),
        ({"pooling_type": "avg", "ksize": [2, 2], "global_pooling": True}, x.mean(axis=(2, 3), keepdims=True)),
    ]
    cases["pool2d"] = [Case("pool2d", {"x": x}, a, expect={"Out": ref}) for a, ref in pool]
    cases["max_pool2d_with_index"] = [Case("max_pool2d_with_index", {"x": x}, {"ksize": [3, 4], "adaptive": True},
                                           expect={"Out": _adaptive_ref(x, (3, 4), "max")})]
    y3 = _r(4, 7)
    bin_ops = {"elementwise_add": np.add, "elementwise_sub": np.subtract, "elementwise_mul": np.multiply,
               "elementwise_div": np.divide, "elementwise_max": np.maximum, "elementwise_min": np.minimum}
    for op, fn in bin_ops.items():
        cases[op] = [
            Case(op, {"x": x, "y": y3}, {"axis": 1}, inputs={"X": ["x"], "Y": ["y"]},
                 expect={"Out": fn(x, y3[None, :, :, None])}),
            Case(op, {"x": x, "y": x[0, 0]}, {"axis": -1}, inputs={"X": ["x"], "Y": ["y"]},
                 expect={"Out": fn(x, x[0, 0])}),
        ]
    pos = np.abs(x) + 0.5
    cases["elementwise_pow"] = [Case("elementwise_pow", {"x": pos, "y": y3}, {"axis": 1},
                                     inputs={"X": ["x"], "Y": ["y"]},
                                     expect={"Out": pos ** y3[None, :, :, None]})]
    cmp = {"equal": np.equal, "less_than": np.less, "greater_than": np.greater}
    for op, fn in cmp.items():
        cases[op] = [Case(op, {"x": np.round(x), "y": np.round(x[0, 0])}, inputs={"X": ["x"], "Y": ["y"]},
                          expect={"Out": fn(np.round(x), np.round(x[0, 0]))})]
    a, b = _r(2, 3, 5), _r(2, 4, 5)
    cases["matmul_v2"] = [Case("matmul_v2", {"x": a, "y": b}, {"trans_y": True}, inputs={"X": ["x"], "Y": ["y"]},
                               expect={"Out": a @ b.transpose(0, 2, 1)}),
                          Case("matmul_v2", {"x": a.transpose(0, 2, 1).copy(), "y": b},
                               {"trans_x": True, "trans_y": True, "alpha": 0.5}, inputs={"X": ["x"], "Y": ["y"]},
                               expect={"Out": 0.5 * a @ b.transpose(0, 2, 1)})]
    m1, m2 = _r(2, 3, 4), _r(12, 5)
    cases["mul"] = [Case("mul", {"x": m1, "y": m2}, {"x_num_col_dims": 1}, inputs={"X": ["x"], "Y": ["y"]},
                         expect={"Out": m1.reshape(2, 12) @ m2})]
    cases["scale"] = [Case("scale", {"x": x}, {"scale": 2.0, "bias": 0.5, "bias_after_scale": True},
                           expect={"Out": x * 2 + 0.5}),
                      Case("scale", {"x": x}, {"scale": 2.0, "bias": 0.5, "bias_after_scale": False},
                           expect={"Out": (x + 0.5) * 2})]
    cases["reduce_mean"] = [Case("reduce_mean", {"x": x}, {"dim": [2, 3], "keep_dim": True},
                                 expect={"Out": x.mean(axis=(2, 3), keepdims=True)})]
    cases["reduce_max"] = [Case("reduce_max", {"x": x}, {"dim": [1]}, expect={"Out": x.max(axis=1)})]
    cases["reduce_sum"] = [Case("reduce_sum", {"x": x}, {"reduce_all": True}, expect={"Out": np.asarray(x.sum())})]
    cases["clip"] = [Case("clip", {"x": x}, {"min": -0.5, "max": 0.3}, expect={"Out": np.clip(x, -0.5, 0.3)})]
    cases["pow"] = [Case("pow", {"x": x}, {"factor": 2.0}, expect={"Out": x**2})]
    cases["dropout"] = [Case("dropout", {"x": x}, {"dropout_prob": 0.25}, expect={"Out": x * 0.75}),
                        Case("dropout", {"x": x}, {"dropout_prob": 0.25, "dropout_implementation": "upscale_in_train"},
                             expect={"Out": x})]
    cases["reshape2"] = [Case("reshape2", {"x": x}, {"shape": [0, -1, 9]}, expect={"Out": x.reshape(2, -1, 9)})]
    cases["flatten_contiguous_range"] = [Case("flatten_contiguous_range", {"x": x},
                                              {"start_axis": 1, "stop_axis": 2},
                                              expect={"Out": x.reshape(2, 28, 9)})]
    cases["flatten2"] = [Case("flatten2", {"x": x}, {"axis": 2}, expect={"Out": x.reshape(8, 63)})]
    x1 = x[:, :1]
    cases["squeeze2"] = [Case("squeeze2", {"x": x1}, {"axes": [1, 2]}, expect={"Out": x1[:, 0]})]
    cases["unsqueeze2"] = [Case("unsqueeze2", {"x": x}, {"axes": [0, 3]}, expect={"Out": x[None, :, :, None]})]
    cases["transpose2"] = [Case("transpose2", {"x": x}, {"axis": [0, 2, 3, 1]},
                                expect={"Out": x.transpose(0, 2, 3, 1)})]
    cases["concat"] = [Case("concat", {"x": x, "y": x[:, :2]}, {"axis": 1}, inputs={"X": ["x", "y"]},
                            expect={"Out": np.concatenate([x, x[:, :2]], 1)})]
    cases["stack"] = [Case("stack", {"x": x, "y": x * 2}, {"axis": 1}, inputs={"X": ["x", "y"]},
                           expect={"Y": np.stack([x, x * 2], 1)}, out_slots=("Y",))]
    cases["split"] = [Case("split", {"x": x}, {"axis": 3, "sections": [2, -1, 3]},
                           expect={"Out": [x[..., :2], x[..., 2:6], x[..., 6:]]})]
    cases["slice"] = [Case("slice", {"x": x}, {"axes": [1, 3], "starts": [1, -4], "ends": [2, 100],
                                               "decrease_axis": [1]}, inputs={"Input": ["x"]},
                           expect={"Out": x[:, 1, :, -4:]})]
    cases["strided_slice"] = [Case("strided_slice", {"x": x}, {"axes": [2, 3], "starts": [0, 8], "ends": [7, 0],
                                                               "strides": [3, -2]}, inputs={"Input": ["x"]},
                                   expect={"Out": x[:, :, 0:7:3, 8:0:-2]})]
    cases["cast"] = [Case("cast", {"x": x}, {"in_dtype": 5, "out_dtype": 2}, expect={"Out": x.astype(np.int32)})]
    cases["shape"] = [Case("shape", {"x": x}, inputs={"Input": ["x"]}, expect={"Out": np.array(x.shape, np.int32)})]
    cases["layer_norm"] = [Case("layer_norm", {"x": x}, {"begin_norm_axis": 2, "epsilon": 1e-5},
                                params={"g": np.abs(_r(63)) + 0.5, "b": _r(63)},
                                inputs={"X": ["x"], "Scale": ["g"], "Bias": ["b"]}, out_slots=("Y",))]
    flat = x.reshape(2, 4, 63)
    ln = (flat - flat.mean(-1, keepdims=True)) / np.sqrt(flat.var(-1, keepdims=True) + 1e-5)
    cases["layer_norm"][0].expect = {"Y": (ln * cases["layer_norm"][0].params["g"]
                                           + cases["layer_norm"][0].params["b"]).reshape(x.shape)}
    slope = np.abs(_r(4)) * 0.3
    cases["prelu"] = [
        Case("prelu", {"x": x}, {"mode": "channel"}, params={"a": slope}, inputs={"X": ["x"], "Alpha": ["a"]},
             expect={"Out": np.where(x > 0, x, slope[:, None, None] * x)}),
        Case("prelu", {"x": x}, {"mode": "all"}, params={"a": slope[:1]}, inputs={"X": ["x"], "Alpha": ["a"]},
             expect={"Out": np.where(x > 0, x, slope[0] * x)}),
    ]
    x5 = x[:, :, None]
    cases["pad3d"] = [
        Case("pad3d", {"x": x5}, {"paddings": [1, 2, 0, 1, 1, 0], "mode": "constant", "value": 0.5},
             expect={"Out": np.pad(x5, ((0, 0), (0, 0), (1, 0), (0, 1), (1, 2)), constant_values=0.5)}),
        Case("pad3d", {"x": x5}, {"paddings": [1, 2, 0, 1, 0, 0], "mode": "reflect"},
             expect={"Out": np.pad(x5, ((0, 0), (0, 0), (0, 0), (0, 1), (1, 2)), mode="reflect")}),
        Case("pad3d", {"x": x5}, {"paddings": [1, 2, 0, 1, 1, 1], "mode": "replicate"},
             expect={"Out": np.pad(x5, ((0, 0), (0, 0), (1, 1), (0, 1), (1, 2)), mode="edge")}),
    ]
    cases["arg_max"] = [
        Case("arg_max", {"x": x}, {"axis": 1, "keepdims": False, "dtype": 3}, expect={"Out": np.argmax(x, 1)}),
        Case("arg_max", {"x": x}, {"axis": -1, "keepdims": True, "dtype": 2},
             expect={"Out": np.argmax(x, -1)[..., None].astype(np.int32)}),
        Case("arg_max", {"x": x}, {"axis": 0, "flatten": True, "dtype": 3}, expect={"Out": np.asarray(np.argmax(x))}),
    ]
    small = x[0, :, :1]
    cases["expand_v2"] = [Case("expand_v2", {"x": small}, {"shape": [2, -1, 7, 9]},
                               expect={"Out": np.broadcast_to(small, (2, 4, 7, 9))})]
    cases["tile"] = [Case("tile", {"x": x}, {"repeat_times": [2, 1]}, expect={"Out": np.tile(x, [1, 1, 2, 1])}),
                     Case("tile", {"x": x}, {"repeat_times": [2, 1, 1, 1, 3]},
                          expect={"Out": np.tile(x[None], [2, 1, 1, 1, 3])})]
    idx = np.array([2, 0, 3], np.int64)
    cases["gather"] = [Case("gather", {"x": x, "i": idx}, {"axis": 1}, inputs={"X": ["x"], "Index": ["i"]},
                            expect={"Out": x[:, idx]})]
    for op, mode, attrs, ref in _interp_cases(x):
        cases.setdefault(op, []).append(Case(op, {"x": x}, {"interp_method": mode, **attrs}, expect={"Out": ref}))
    return cases


def _interp_cases(x: np.ndarray) -> list[tuple[str, str, dict[str, object], np.ndarray]]:
    """Nearest (asymmetric floor) and bilinear (align_corners) by index arithmetic."""
    h, w = x.shape[2:]
    oh, ow = 14, 5
    hi = np.floor(np.arange(oh) * h / oh).astype(int)
    wi = np.floor(np.arange(ow) * w / ow).astype(int)
    nearest = x[:, :, hi][:, :, :, wi]

    def lin(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = np.arange(n_out) * (n_in - 1) / (n_out - 1)
        i0 = np.floor(src).astype(int)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, (src - i0).astype(np.float32)

    h0, h1, fh = lin(h, oh)
    w0, w1, fw = lin(w, ow)
    rows = x[:, :, h0] * (1 - fh)[:, None] + x[:, :, h1] * fh[:, None]
    bil = rows[..., w0] * (1 - fw) + rows[..., w1] * fw
    return [
        ("nearest_interp_v2", "nearest", {"out_h": oh, "out_w": ow, "align_corners": False}, nearest),
        ("bilinear_interp_v2", "bilinear", {"out_h": oh, "out_w": ow, "align_corners": True}, bil),
    ]


CASES = _cases()


def _aliases() -> dict[str, list[str]]:
    """Canonical case name -> every registered key with the same converter."""
    by_func: dict[Callable[..., None], list[str]] = {}
    for key, func in OPS.items():
        by_func.setdefault(func, []).append(str(key))
    out: dict[str, list[str]] = {}
    for keys in by_func.values():
        case = next((k for k in keys if k in CASES), None)
        out[case or keys[0]] = keys
    return out


ALIASES = _aliases()
PARAMS = [(case, key, i) for case, keys in ALIASES.items() if case in CASES
          for key in keys for i in range(len(CASES[case]))]
CONSTANT_OPS = {"fill_constant", "full_int_array", "assign_value"}  # tested through test_constant_ops


def test_every_converter_has_a_case() -> None:
    missing = [keys for case, keys in ALIASES.items() if case not in CASES and case not in CONSTANT_OPS]
    assert not missing, f"converters without a test case: {missing}"


def _run_case(case: Case, key: str, tmp_path: Path) -> dict[str, np.ndarray]:
    inputs = case.inputs or {"X": ["x"]}
    outs: dict[str, list[str]] = {}
    shapes: dict[str, tuple[list[int], str]] = {}
    fetches = []
    for slot in case.out_slots:
        ref = case.expect[slot]
        refs = ref if isinstance(ref, list) else [ref]
        names = [f"{slot.lower()}_{i}" for i in range(len(refs))]
        outs[slot] = names
        for name, r in zip(names, refs, strict=True):
            shapes[name] = (list(np.shape(r)), np.asarray(r).dtype.name)
            fetches.append(name)
    feeds = {k: (list(v.shape), v.dtype.name) for k, v in case.feeds.items()}
    op = SynthOp(key, inputs, outs, case.attrs)
    model_path = write_program(tmp_path / "m.pdmodel", feeds=feeds, ops=[op], fetches=fetches,
                               params=case.params, shapes=shapes)
    write_params(tmp_path / "m.pdiparams", case.params)
    model = FRONTEND.load([model_path], Options())
    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, tmp_path / "m.onnx", Options())
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, case.feeds)
    return dict(zip(fetches, got, strict=True))


@pytest.mark.parametrize(("case", "key", "index"), PARAMS, ids=[f"{k}-{i}" for _, k, i in PARAMS])
def test_op(case: str, key: str, index: int, tmp_path: Path) -> None:
    c = CASES[case][index]
    got = _run_case(c, key, tmp_path)
    refs = [r for slot in c.out_slots for r in (c.expect[slot] if isinstance(c.expect[slot], list)
                                                else [c.expect[slot]])]
    for (name, value), ref in zip(got.items(), refs, strict=True):
        ref = np.asarray(ref)
        assert value.shape == ref.shape, name
        if ref.dtype.kind in "biu":
            np.testing.assert_array_equal(value, ref)
        else:
            err = float(np.abs(value - ref).max() / max(np.abs(ref).max(), 1e-12))
            assert err <= RTOL_FP32, f"{key}: relative error {err:.2e}"


def test_constant_ops(tmp_path: Path) -> None:
    """fill_constant / full_int_array / assign_value feed a Reshape and an Add."""
    x = X4
    ops = [
        SynthOp("fill_constant", {}, {"Out": ["c"]}, {"shape": [1], "value": 1.5, "dtype": 5}),
        SynthOp("assign_value", {}, {"Out": ["s"]}, {"shape": [3], "dtype": 2, "int32_values": [2, -1, 9]}),
        SynthOp("full_int_array", {}, {"Out": ["t"]}, {"value": [0, 1], "dtype": 3}),
        SynthOp("elementwise_add", {"X": ["x"], "Y": ["c"]}, {"Out": ["a"]}, {"axis": -1}),
        SynthOp("reshape2", {"X": ["a"], "Shape": ["s"]}, {"Out": ["r"], "XShape": ["r_xs"]}),
        SynthOp("transpose2", {"X": ["r"]}, {"Out": ["o"]}, {"axis": [0, 2, 1]}),
    ]
    shapes = {"c": ([1], "float32"), "s": ([3], "int32"), "t": ([2], "int64"), "a": (list(x.shape), "float32"),
              "r": ([2, 28, 9], "float32"), "o": ([2, 9, 28], "float32")}
    path = write_program(tmp_path / "m.pdmodel", feeds={"x": (list(x.shape), "float32")}, ops=ops,
                         fetches=["o"], params={}, shapes=shapes)
    write_params(tmp_path / "m.pdiparams", {})
    model = FRONTEND.load([path], Options())
    passes.standard_pipeline(validate=True)(model)
    EXPORTER.save(model, tmp_path / "m.onnx", Options())
    got = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, (x + 1.5).reshape(2, 28, 9).transpose(0, 2, 1), rtol=1e-6)
