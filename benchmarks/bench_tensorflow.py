"""Benchmark tensorflow->onnx and tflite->onnx: ours against tf2onnx, same models, same run.

Each model is a keras.applications net with seeded random weights (``weights=None``) and its
batch-norm (and layer-norm) parameters recalibrated as the tests do
(``tests/frontends/tensorflow/tf_models.py::recalibrate``), saved as a SavedModel
(``model.export``) together with a seeded input and TensorFlow's own output for it (the
serving signature called eagerly). Both converters then run as the commands a user types, each
in a fresh process:

    python -m convert tensorflow:onnx DIR -o F --no-check
    TF2ONNX_PYTHON -m tf2onnx.convert --saved-model DIR --output F --opset 17

and, for the same net written as a float ``.tflite`` by ``tf.lite.TFLiteConverter`` (rows
``NAME.tflite``, reference: TFLite's interpreter on the same input):

    python -m convert tflite:onnx F.tflite -o F --no-check
    TF2ONNX_PYTHON -m tf2onnx.convert --tflite F.tflite --output F --opset 17

and the table gives per converter: the process's wall time, its peak RSS (``ru_maxrss`` of
that child, from ``os.wait4`` in a small launcher process: see ``_measure.Launcher``), the ONNX
node count and Transpose count, ONNX Runtime's
median CPU latency (one thread, N runs, the two files' runs interleaved), and the max error
relative to the output's scale against TensorFlow (max |onnx - TF| / max |TF|). Both read the
SavedModel with TensorFlow, so both times include importing it; ours reads a ``.tflite``
without TensorFlow (tf2onnx imports it either way). Ours takes NCHW input by
default (one less Transpose); tf2onnx keeps TensorFlow's NHWC; each is fed its own layout.

    python benchmarks/bench_tensorflow.py --tf2onnx-python /tmp/tf2onnx-venv/bin/python
        [--models resnet50,convnext_tiny | --models real] [--sources savedmodel,tflite,keras,int8]
        [--size 224] [--runs 20] [--work DIR] [--json F]

``--models real`` runs the nets beyond classifiers (``REAL_WORLD``: U-Net, DeepLab-style decoder,
ESPCN, TCN, BiLSTM text classifier, LSTM -> GRU, built by the tests' ``decoder_models.py`` and
``sequence_models.py`` at their own sizes). ``keras`` rows convert the ``.keras`` file (ours only:
tf2onnx reads tf.keras ``.h5`` files only); ``int8`` rows the full-integer post-training quantized
``.tflite`` (float input and output; the reference is TFLite's interpreter with its default
kernels). A net TFLiteConverter cannot write (a Keras 3 LSTM with a free batch) has no ``.tflite``
rows; the reason is printed.

tf2onnx lives in its own environment (its dependencies may clash with ours), made with:

    python -m venv /tmp/tf2onnx-venv
    /tmp/tf2onnx-venv/bin/pip install -c constraints/ci.txt tensorflow-cpu==2.21.0 tf2onnx==1.17.0

or, sharing this environment's TensorFlow (tf2onnx 1.17.0 imports with TensorFlow 2.21.0 and
protobuf 7; its own requirements would pin older ones):

    python -m venv --system-site-packages /tmp/tf2onnx-venv
    /tmp/tf2onnx-venv/bin/pip install --no-deps tf2onnx==1.17.0

Without ``--tf2onnx-python`` only ours runs. Building the models needs TensorFlow here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import ROOT, Launcher

# name -> keras.applications constructor; every one is built at --size with 1000 classes.
MODELS = {
    "resnet50": "ResNet50",
    "mobilenet_v2": "MobileNetV2",
    "mobilenet_v3_small": "MobileNetV3Small",
    "efficientnet_b0": "EfficientNetB0",
    "densenet121": "DenseNet121",
    "inception_v3": "InceptionV3",
    "xception": "Xception",
    "vgg16": "VGG16",
    "convnext_tiny": "ConvNeXtTiny",
    "nasnet_mobile": "NASNetMobile",
}
# Nets beyond classifiers, from the tests' builders (seeded, non-zero weights, recalibrated batch
# norms): name -> (module, builder name) in tests/frontends/tensorflow/. Built at their own sizes.
REAL_WORLD = {
    "unet": ("decoder_models", "unet"),
    "deeplab_decoder": ("decoder_models", "deeplab_decoder"),
    "espcn": ("decoder_models", "espcn"),
    "tcn": ("decoder_models", "tcn_dilations_1_2_4"),
    "bilstm_text": ("sequence_models", "text_bilstm"),
    "gru": ("sequence_models", "lstm_gru"),
}
# The recurrent nets with a fixed batch of 1: TFLiteConverter writes their layers as WHILE loops
# (with a free batch it refuses them without TF ops), so they have a .tflite row.
FIXED_BATCH = {"bilstm_text_b1": ("sequence_models", "text_bilstm"), "gru_b1": ("sequence_models", "lstm_gru")}
TOOLS = ("ours", "tf2onnx")
QUANT_IN: tuple[float, int] | None = None  # the int8 model's input (scale, zero point), while its rows run
# keras: ours only (tf2onnx reads tf.keras .h5 files only); int8: full-integer post-training
# quantization of the same net (float inputs only), error in output quantization steps.
SOURCES = ("savedmodel", "tflite", "keras", "int8")


def build(name: str, folder: Path, size: int) -> None:
    """Build ``name`` (seeded, recalibrated), export it, and store an input and TF's output for it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, str(ROOT / "tests" / "frontends" / "tensorflow"))
    import keras
    import numpy as np
    import tensorflow as tf
    import tf_models

    keras.utils.set_random_seed(0)
    if name in REAL_WORLD:
        module, builder = REAL_WORLD[name]
        model = __import__(module).build(builder)
    elif name in FIXED_BATCH:
        module, builder = FIXED_BATCH[name]
        model = __import__(module).build(builder, batch=1)
    else:
        model = getattr(keras.applications, MODELS[name])(input_shape=(size, size, 3), weights=None,
                                                          classifier_activation=None)
        tf_models.recalibrate(model)
    model.export(str(folder / "savedmodel"), verbose=False)
    model.save(str(folder / "model.keras"))
    spec = model.inputs[0]
    shape = tuple(1 if d is None else d for d in spec.shape)
    rng = np.random.default_rng(0)
    x = (rng.integers(0, 50, shape).astype(np.int32) if "int" in str(spec.dtype)
         else rng.standard_normal(shape).astype(np.float32))
    fn = tf.saved_model.load(str(folder / "savedmodel")).signatures["serving_default"]
    (arg,) = fn.structured_input_signature[1]
    (ref,) = fn(**{arg: tf.constant(x)}).values()
    try:
        if name in FIXED_BATCH:  # from the SavedModel TFLite still wants TF ops; from Keras it writes WHILE
            tflite = tf.lite.TFLiteConverter.from_keras_model(model).convert()
        else:
            tflite = tf.lite.TFLiteConverter.from_saved_model(str(folder / "savedmodel")).convert()
    except Exception as exc:  # TFLite cannot write this net without TF ops: no .tflite row
        (folder / "tflite_error.txt").write_text(str(exc).strip().splitlines()[0][:160])
        np.savez(folder / "io.npz", x_nhwc=x, ref=ref.numpy())
        return
    (folder / "model.tflite").write_bytes(tflite)
    extra = {}
    if x.dtype == np.float32:
        def representative() -> object:
            gen = np.random.default_rng(1)
            for _ in range(16):
                yield [gen.standard_normal(shape).astype(np.float32)]

        conv = tf.lite.TFLiteConverter.from_saved_model(str(folder / "savedmodel"))
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = representative
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        try:
            (folder / "model_int8.tflite").write_bytes(conv.convert())
        except Exception as exc:  # no int8 version of some op: no int8 row
            (folder / "int8_error.txt").write_text(str(exc).strip().splitlines()[0][:160])
        else:
            q = tf.lite.Interpreter(model_path=str(folder / "model_int8.tflite"))
            q.resize_tensor_input(q.get_input_details()[0]["index"], list(x.shape))
            q.allocate_tensors()
            detail = q.get_input_details()[0]
            scale, zero = detail["quantization"]
            q.set_tensor(detail["index"], np.clip(np.round(x / scale + zero), -128, 127).astype(detail["dtype"])
                         if scale else x)
            q.invoke()
            extra["ref_int8"] = q.get_tensor(q.get_output_details()[0]["index"])
            extra["in_quant"] = np.array([scale, zero], dtype=np.float64)
    interpreter = tf.lite.Interpreter(model_content=tflite)
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], list(x.shape))
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    ref_tflite = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    np.savez(folder / "io.npz", x_nhwc=x, ref=ref.numpy(), ref_tflite=ref_tflite, **extra)


def _run(launcher: Launcher, cmd: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    """Run ``cmd``; return its wall time, peak RSS (``ru_maxrss`` of that child) and any error."""
    with tempfile.TemporaryDirectory() as tmp:
        err = Path(tmp) / "stderr"
        done = launcher.run(cmd, env=env, cwd=ROOT, stderr=err)
        result: dict[str, object] = {"seconds": done["seconds"], "peak_rss_mib": done["peak_rss_mib"]}
        if done["exit"] != 0:
            lines = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()]
            result["error"] = f"exit {int(done['exit'])}: {(lines or ['no output'])[-1][:160]}"
    return result


def _session(path: Path) -> object:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _feed(session: object, x_nhwc: object) -> dict[str, object]:
    """Feed ``x_nhwc`` in the layout the file declares (NCHW when its dim 1 is 3 channels)."""
    inp = session.get_inputs()[0]  # type: ignore[attr-defined]
    dims = list(inp.shape)  # type: ignore[attr-defined]
    shape = x_nhwc.shape  # type: ignore[attr-defined]
    nchw = len(shape) == 4 and dims[1:] == [shape[3], shape[1], shape[2]] and shape[3] != shape[2]
    x = x_nhwc.transpose(0, 3, 1, 2) if nchw else x_nhwc  # type: ignore[attr-defined]
    if "int8" in inp.type and QUANT_IN:  # type: ignore[attr-defined]
        import numpy as np

        scale, zero = QUANT_IN
        x = np.clip(np.round(x / scale + zero), -128, 127).astype(np.int8)
    return {inp.name: x}


def _latencies(paths: dict[str, Path], x_nhwc: object, runs: int) -> dict[str, float]:
    """Median single-thread ONNX Runtime latency (ms) of each file, runs interleaved.

    Interleaving matters on a shared machine: load from other processes then hits every file
    alike instead of whichever happened to run during a busy spell.
    """
    sessions = {key: _session(path) for key, path in paths.items()}
    feeds = {key: _feed(s, x_nhwc) for key, s in sessions.items()}
    for key, s in sessions.items():
        for _ in range(2):
            s.run(None, feeds[key])  # type: ignore[attr-defined]
    times: dict[str, list[float]] = {key: [] for key in sessions}
    for _ in range(runs):
        for key, s in sessions.items():
            t0 = time.perf_counter()
            s.run(None, feeds[key])  # type: ignore[attr-defined]
            times[key].append(time.perf_counter() - t0)
    return {key: statistics.median(t) * 1000 for key, t in times.items()}


def _inspect(path: Path, x_nhwc: object, ref: object) -> dict[str, object]:
    """Node count, Transpose count and max error relative to scale against the reference."""
    import numpy as np
    import onnx

    ops = [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]
    session = _session(path)
    (out,) = session.run(None, _feed(session, x_nhwc))[:1]  # type: ignore[attr-defined]
    if np.asarray(ref).dtype.kind in "iu":  # int8: the error in output quantization steps
        r = np.asarray(ref, dtype=np.int64)
        if out.ndim == 4 and out.shape != r.shape and out.transpose(0, 2, 3, 1).shape == r.shape:
            out = out.transpose(0, 2, 3, 1)
        steps = int(np.abs(out.reshape(r.shape).astype(np.int64) - r).max()) if out.dtype.kind in "iu" else -1
        return {"nodes": len(ops), "transposes": ops.count("Transpose"), "max_rel_err": float(steps), "steps": True}
    r = np.asarray(ref, dtype=np.float64)
    if out.ndim == 4 and out.shape != r.shape and out.transpose(0, 2, 3, 1).shape == r.shape:
        out = out.transpose(0, 2, 3, 1)  # ours returns images NCHW
    err = float(np.abs(out.reshape(r.shape) - r).max() / np.abs(r).max())
    return {"nodes": len(ops), "transposes": ops.count("Transpose"), "max_rel_err": err}


def main(argv: list[str] | None = None) -> int:
    """Build the models, convert each with both tools, print the table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated, from: " + ", ".join([*MODELS, *REAL_WORLD, *FIXED_BATCH])
                        + "; 'real' = the U-Net ... GRU six")
    parser.add_argument("--sources", default=",".join(SOURCES),
                        help="comma-separated, from: savedmodel, tflite (the same net as a float .tflite)")
    parser.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    parser.add_argument("--tf2onnx-python", default=None, help="python of an environment with tf2onnx")
    parser.add_argument("--runs", type=int, default=20, help="ONNX Runtime runs per file (median)")
    parser.add_argument("--work", type=Path, default=None, help="keep the models and ONNX files here")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--build", nargs=2, metavar=("MODEL", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build:
        build(args.build[0], Path(args.build[1]), args.size)
        return 0
    names = list(REAL_WORLD) if args.models == "real" else args.models.split(",")
    unknown = [n for n in names if n not in MODELS and n not in REAL_WORLD and n not in FIXED_BATCH]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    sources = args.sources.split(",")
    if any(s not in SOURCES for s in sources):
        parser.error(f"--sources takes {', '.join(SOURCES)}")
    sys.path.insert(0, str(ROOT / "tests" / "frontends" / "tensorflow"))

    launcher = Launcher()  # started while this process is small: see benchmarks/_measure.py
    import numpy as np
    import onnxruntime

    work = args.work or Path(tempfile.mkdtemp(prefix="bench_tensorflow_"))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3")
    route = {"savedmodel": "tensorflow:onnx", "tflite": "tflite:onnx", "keras": "tensorflow:onnx",
             "int8": "tflite:onnx"}
    flag = {"savedmodel": "--saved-model", "tflite": "--tflite", "int8": "--tflite"}
    commands = {"ours": lambda kind, src, out: [sys.executable, "-m", "convert", route[kind], str(src),
                                                "-o", str(out), "--no-check"]}
    if args.tf2onnx_python:
        commands["tf2onnx"] = lambda kind, src, out: [args.tf2onnx_python, "-m", "tf2onnx.convert", flag[kind],
                                                      str(src), "--output", str(out), "--opset", "17"]
    print(f"{os.cpu_count()} CPUs; input {args.size}x{args.size}; ONNX Runtime {onnxruntime.__version__} "
          f"CPU, 1 thread, median of {args.runs}", flush=True)
    results = []
    for name in names:
        folder = work / name
        folder.mkdir(parents=True, exist_ok=True)
        built = (folder / "io.npz").is_file() and (folder / "model.keras").is_file()
        if built and "int8" in sources:  # built before int8 rows existed: build again
            saved = np.load(folder / "io.npz")
            built = ("ref_int8" in saved.files or (folder / "int8_error.txt").is_file()
                     or saved["x_nhwc"].dtype.kind != "f")
        if not built:
            subprocess.run([sys.executable, __file__, "--size", str(args.size), "--build", name, str(folder)],
                           check=True, env=env, cwd=ROOT)
        io = np.load(folder / "io.npz")
        for kind in sources:
            src = {"savedmodel": folder / "savedmodel", "keras": folder / "model.keras",
                   "tflite": folder / "model.tflite", "int8": folder / "model_int8.tflite"}[kind]
            if kind in ("tflite", "int8") and not src.is_file():
                note = folder / ("tflite_error.txt" if kind == "tflite" else "int8_error.txt")
                why = note.read_text() if note.is_file() else "float input only"
                print(f"{name}.{kind}: TFLiteConverter did not write one: {why}", flush=True)
                continue
            ref = io[{"tflite": "ref_tflite", "int8": "ref_int8"}.get(kind, "ref")]
            global QUANT_IN
            QUANT_IN = (float(io["in_quant"][0]), int(io["in_quant"][1])) if kind == "int8" else None
            row: dict[str, object] = {"model": name if kind == "savedmodel" else f"{name}.{kind}"}
            done: dict[str, Path] = {}
            for tool, command in commands.items():
                if kind == "keras" and tool != "ours":
                    continue
                out = folder / f"{tool}.{kind}.onnx"
                out.unlink(missing_ok=True)
                info = _run(launcher, command(kind, src, out), env=env)
                if "error" not in info:
                    try:
                        info.update(_inspect(out, io["x_nhwc"], ref))
                        done[tool] = out
                    except Exception as exc:  # a file ONNX Runtime cannot run: reported in the table
                        info["error"] = f"ONNX Runtime: {str(exc).strip().splitlines()[0][:160]}"
                row[tool] = info
            for tool, ms in _latencies(done, io["x_nhwc"], args.runs).items():
                row[tool]["ort_ms"] = ms  # type: ignore[index]
            results.append(row)
            _print_row(row)
    launcher.close()
    print()
    _print_markdown(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def _err(info: dict[str, object]) -> str:
    value = float(info["max_rel_err"])  # type: ignore[arg-type]
    if info.get("steps"):
        return "float output" if value < 0 else f"{int(value)} steps"
    return f"{value:.1e}"


def _print_row(row: dict[str, object]) -> None:
    for tool in TOOLS:
        info = row.get(tool)
        if not isinstance(info, dict):
            continue
        if "error" in info:
            print(f"{row['model']:<20} {tool:<8} failed: {info['error']}", flush=True)
            continue
        print(f"{row['model']:<20} {tool:<8} {info['seconds']:6.1f} s {info['peak_rss_mib']:6.0f} MiB "
              f"{info['nodes']:5d} nodes {info['transposes']:4d} Transposes {info['ort_ms']:8.2f} ms "
              f"err {_err(info)}", flush=True)


def _print_markdown(results: list[dict[str, object]]) -> None:
    print("| model | converter | convert time | peak RSS | nodes | Transposes | ORT latency | max rel err vs ref |")
    print("|---|---|---|---|---|---|---|---|")
    for row in results:
        for i, tool in enumerate(TOOLS):
            info = row.get(tool)
            if not isinstance(info, dict):
                continue
            model = row["model"] if i == 0 or "ours" not in row else ""
            if "error" in info:
                print(f"| {model} | {tool} | failed: {info['error']} | | | | | |")
                continue
            print(f"| {model} | {tool} | {info['seconds']:.1f} s | {info['peak_rss_mib']:.0f} MiB | {info['nodes']} | "
                  f"{info['transposes']} | {info['ort_ms']:.2f} ms | {_err(info)} |")


if __name__ == "__main__":
    sys.exit(main())
