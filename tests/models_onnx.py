"""Hand-made ONNX test models, written in ONNX text syntax with seeded weights."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper, parser


def _with_weights(text: str, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    model = parser.parse_model(text)
    for name, arr in weights.items():
        model.graph.initializer.append(numpy_helper.from_array(arr, name))
    onnx.checker.check_model(model)
    return model


def conv_net(opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """Conv-BN-Relu, depthwise conv, max/avg pool, global pool, Gemm head."""
    rng = np.random.default_rng(seed)
    w = {
        "w1": (rng.standard_normal((8, 3, 3, 3)) / np.sqrt(27)).astype(np.float32),
        "b1": rng.standard_normal(8).astype(np.float32) * 0.1,
        "g": rng.uniform(0.5, 1.5, 8).astype(np.float32),
        "beta": rng.standard_normal(8).astype(np.float32) * 0.1,
        "mean": rng.standard_normal(8).astype(np.float32) * 0.1,
        "var": rng.uniform(0.5, 2.0, 8).astype(np.float32),
        "dw": (rng.standard_normal((8, 1, 3, 3)) / 3).astype(np.float32),
        "fc_w": (rng.standard_normal((10, 8)) / np.sqrt(8)).astype(np.float32),
        "fc_b": rng.standard_normal(10).astype(np.float32) * 0.1,
    }
    text = f"""
    <ir_version: 8, opset_import: ["" : {opset}]>
    convnet (float[1, 3, 32, 32] x) => (float[1, 10] y) {{
        c1 = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x, w1, b1)
        n1 = BatchNormalization <epsilon = 0.001> (c1, g, beta, mean, var)
        r1 = Relu (n1)
        p1 = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (r1)
        d1 = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1], group = 8> (p1, dw)
        r2 = LeakyRelu <alpha = 0.1> (d1)
        p2 = AveragePool <kernel_shape = [3, 3], strides = [2, 2], pads = [1, 1, 1, 1]> (r2)
        gp = GlobalAveragePool (p2)
        f = Flatten <axis = 1> (gp)
        y = Gemm <transB = 1> (f, fc_w, fc_b)
    }}
    """
    return _with_weights(text, w)


def transformer_block(opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """Pre-norm attention block: LayerNorm, QKV MatMuls, scaled softmax, MLP with Erf-GELU."""
    rng = np.random.default_rng(seed)
    d, h = 16, 32
    w = {
        "ln_s": rng.uniform(0.5, 1.5, d).astype(np.float32),
        "ln_b": (rng.standard_normal(d) * 0.1).astype(np.float32),
        "wq": (rng.standard_normal((d, d)) / 4).astype(np.float32),
        "wk": (rng.standard_normal((d, d)) / 4).astype(np.float32),
        "wv": (rng.standard_normal((d, d)) / 4).astype(np.float32),
        "w1": (rng.standard_normal((d, h)) / 4).astype(np.float32),
        "w2": (rng.standard_normal((h, d)) / 6).astype(np.float32),
        "scale": np.array(0.25, np.float32),
        "half": np.array(0.5, np.float32),
        "one": np.array(1.0, np.float32),
        "rsqrt2": np.array(1 / np.sqrt(2), np.float32),
    }
    ln = ("LayerNormalization <axis = -1, epsilon = 0.00001> (x, ln_s, ln_b)" if opset >= 17 else None)
    if ln is None:
        raise ValueError("transformer_block needs opset >= 17 (LayerNormalization); export it lower")
    text = f"""
    <ir_version: 8, opset_import: ["" : {opset}]>
    block (float[2, 8, {d}] x) => (float[2, 8, {d}] y) {{
        n = {ln}
        q = MatMul (n, wq)
        k = MatMul (n, wk)
        v = MatMul (n, wv)
        kt = Transpose <perm = [0, 2, 1]> (k)
        s = MatMul (q, kt)
        ss = Mul (s, scale)
        a = Softmax <axis = -1> (ss)
        o = MatMul (a, v)
        r = Add (x, o)
        m1 = MatMul (r, w1)
        m1s = Mul (m1, rsqrt2)
        e = Erf (m1s)
        mh = Mul (m1, half)
        e1 = Add (e, one)
        g = Mul (mh, e1)
        m2 = MatMul (g, w2)
        y = Add (r, m2)
    }}
    """
    return _with_weights(text, w)


def broadcasting(opset: int = 17) -> onnx.ModelProto:
    """Elementwise ops with numpy broadcasting between ranks, Where, Max, Pow, Clip."""
    text = f"""
    <ir_version: 8, opset_import: ["" : {opset}]>
    bcast (float[2, 3, 4] a, float[4] b, float[3, 1] c) => (float[2, 3, 4] y) {{
        s = Add (a, b)
        p = Mul (s, c)
        one = Constant <value = float {{1.0}}> ()
        ca = Abs (c)
        den = Add (ca, one)
        d = Div (p, den)
        m = Max (d, b)
        z = Constant <value = float {{0.5}}> ()
        gt = Greater (m, z)
        zm = Sub (z, m)
        w = Where (gt, m, zm)
        lo = Constant <value = float {{-2.0}}> ()
        hi = Constant <value = float {{2.0}}> ()
        y = Clip (w, lo, hi)
    }}
    """
    model = parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def reshapes(opset: int = 17) -> onnx.ModelProto:
    """Shape-derived subgraphs, Reshape/Transpose/Slice/Concat/Squeeze/Unsqueeze/Split/Gather."""
    text = f"""
    <ir_version: 8, opset_import: ["" : {opset}]>
    shapes (float[2, 6, 4, 4] x) => (float[2, 3, 4, 4] y, float[2, 96] f, float[2, 2, 4] g) {{
        sh = Shape (x)
        i0 = Constant <value = int64[1] {{0}}> ()
        n = Gather <axis = 0> (sh, i0)
        m1 = Constant <value = int64[1] {{-1}}> ()
        ns = Concat <axis = 0> (n, m1)
        f = Reshape (x, ns)
        st = Constant <value = int64[1] {{0}}> ()
        en = Constant <value = int64[1] {{3}}> ()
        ax = Constant <value = int64[1] {{1}}> ()
        sl = Slice (x, st, en, ax)
        t = Transpose <perm = [0, 1, 3, 2]> (sl)
        y = Add (sl, t)
        a2 = Constant <value = int64[1] {{2}}> ()
        rs = ReduceSum (x, a2)
        u = Unsqueeze (rs, a2)
        q = Squeeze (u, a2)
        g3 = Constant <value = int64[2] {{1, 3}}> ()
        g = Gather <axis = 1> (q, g3)
    }}
    """
    model = parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def simple_cnn(opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """Conv-Relu-MaxPool-Flatten-Gemm: what every destination (Caffe included) can express."""
    rng = np.random.default_rng(seed)
    w = {
        "w1": (rng.standard_normal((8, 3, 3, 3)) / np.sqrt(27)).astype(np.float32),
        "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "fc_w": (rng.standard_normal((10, 8 * 16 * 16)) / 40).astype(np.float32),
        "fc_b": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }
    text = f"""
    <ir_version: 8, opset_import: ["" : {opset}]>
    cnn (float[1, 3, 32, 32] x) => (float[1, 10] y) {{
        c = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (x, w1, b1)
        r = Relu (c)
        p = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (r)
        f = Flatten <axis = 1> (p)
        y = Gemm <transB = 1> (f, fc_w, fc_b)
    }}
    """
    return _with_weights(text, w)
