"""Find a Paddle model's files, check op support, and convert the program into the IR.

Accepted inputs: a model folder, a path prefix (``inference`` for ``inference.json`` +
``inference.pdiparams``), or the files themselves. Weights stay in the params file: every
initializer is a file slice, created only when an op reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from convert.ir import (
    ConversionError,
    GapCollector,
    GraphBuilder,
    Model,
    ModelFormatError,
    Options,
    Unsupported,
    UsageError,
    Value,
    convert_all,
)
from convert.ir.given import refuse_contradicting_shape

from .context import PaddleContext
from .legacy import read_pdmodel
from .params import ParamRecord, read_combined, read_separate, slices
from .pir import read_json
from .program import Op, Program

__all__ = ["ModelFiles", "check_support", "load", "read_program", "resolve"]

logger = logging.getLogger(__name__)

_PROGRAM_SUFFIXES = (".json", ".pdmodel")
_PARAMS_SUFFIX = ".pdiparams"


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """The program file and where its parameters are (combined file or a folder of files)."""

    program: Path
    params: Path | None  # combined .pdiparams
    params_dir: Path | None  # one file per parameter


def _pick_program(folder: Path) -> Path:
    found = sorted(p for p in folder.iterdir() if p.suffix in _PROGRAM_SUFFIXES and p.is_file())
    if not found:
        raise UsageError(f"{folder}: no Paddle program (.json or .pdmodel) in this folder")
    with_params = [p for p in found if p.with_suffix(_PARAMS_SUFFIX).is_file()]
    candidates = with_params or found
    if len(candidates) > 1:
        # A folder with both formats of one model: prefer the PIR program, as Paddle 3 does.
        stems = {p.stem for p in candidates}
        if len(stems) == 1:
            return next(p for p in candidates if p.suffix == ".json")
        names = ", ".join(p.name for p in candidates)
        raise UsageError(f"{folder}: several Paddle programs ({names}); name the one to convert")
    return candidates[0]


def resolve(paths: Sequence[Path]) -> ModelFiles:
    """Return the program and params locations for a folder, a prefix, or explicit files.

    Raises:
        UsageError: nothing usable was given, or a file is missing.
    """
    if not paths:
        raise UsageError("paddle: give a model folder, a path prefix, or the .json/.pdmodel file")
    program: Path | None = None
    params: Path | None = None
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            program = _pick_program(path)
        elif path.suffix == _PARAMS_SUFFIX:
            params = path
        elif path.suffix in _PROGRAM_SUFFIXES or (path.is_file() and program is None):
            program = path
        else:
            for suffix in _PROGRAM_SUFFIXES:
                candidate = path.with_name(path.name + suffix)
                if candidate.is_file():
                    program = candidate
                    break
            else:
                raise UsageError(f"{path}: no such file, folder, or prefix of a .json/.pdmodel file")
    if program is None:
        raise UsageError("paddle: a params file alone is not a model; give the .json or .pdmodel too")
    if not program.is_file():
        raise UsageError(f"{program}: no such file")
    if params is None:
        candidate = program.with_suffix(_PARAMS_SUFFIX)
        if candidate.is_file():
            params = candidate
    if params is not None and not params.is_file():
        raise UsageError(f"{params}: no such file")
    return ModelFiles(program, params, None if params is not None else program.parent)


def read_program(path: Path) -> Program:
    """Read either program format, choosing by suffix and then by content."""
    if path.suffix == ".json":
        return read_json(path)
    if path.suffix == ".pdmodel":
        return read_pdmodel(path)
    with path.open("rb") as f:
        head = f.read(64).lstrip()
    return read_json(path) if head.startswith(b"{") else read_pdmodel(path)


def _unsupported(program: Program) -> GapCollector:
    from .ops import OPS

    gaps = GapCollector()
    for op in program.ops:
        if op.type not in OPS:
            gaps.add(op.type, f"#{op.index} -> " + ", ".join(f"'{n}'" for n in op.output_names()[:2]))
    return gaps


def check_support(paths: Sequence[Path], options: Options) -> list[Unsupported]:
    """Return every op type of the model that has no converter (with count and first place)."""
    return _unsupported(read_program(resolve(paths).program)).items()


def _records(files: ModelFiles, program: Program) -> dict[str, ParamRecord]:
    if files.params is not None:
        return read_combined(files.params, program.params, program.vars)
    if not program.params:
        return {}
    assert files.params_dir is not None
    if not (files.params_dir / program.params[0]).is_file():
        raise UsageError(f"{files.program.name}: no params file: expected "
                         f"'{files.program.with_suffix(_PARAMS_SUFFIX).name}' or one file per parameter")
    return read_separate(files.params_dir, program.params, program.vars)


def _input_shape(program: Program, name: str, options: Options) -> list[int | str]:
    var = program.var(name)
    if name in options.input_shapes:
        if var.shape is not None:  # -1: a free dimension
            declared = [int(d) if d >= 0 else None for d in var.shape]
            refuse_contradicting_shape(name, options.input_shapes[name], declared, source=program.source.name)
        return list(options.input_shapes[name])
    if var.shape is None:
        raise ModelFormatError(f"{program.source.name}: input '{name}' has no shape; give --input-shape")
    dims: list[int | str] = []
    for i, d in enumerate(var.shape):
        dims.append(int(d) if d >= 0 else ("N" if i == 0 else f"{name}_dim{i}"))
    if options.dynamic_batch and dims:
        dims[0] = "N"
    return dims


def load(paths: Sequence[Path], options: Options) -> Model:
    """Read a Paddle inference model into the IR.

    Raises:
        UsageError: files missing. ModelFormatError: malformed program or params.
        UnsupportedOpsError: ops without a converter (all of them listed).
        ConversionError: a converter failed (names the op and its outputs).
    """
    if options.get("paddle_via", "reader") == "paddle2onnx":
        from .p2o import load_via_paddle2onnx

        return load_via_paddle2onnx(paths, options)
    from convert.ir import DataType

    from .ops import OPS, Converter

    files = resolve(paths)
    program = read_program(files.program)
    _unsupported(program).raise_if_any(files.program.name, hint="Run `convert ops paddle` for the supported list, "
                                                                "or try --via paddle2onnx.")
    unknown = sorted(set(options.input_shapes) - set(program.feeds))
    if unknown:
        raise UsageError(f"--input-shape names {', '.join(repr(n) for n in unknown)}, which "
                         f"{'is not an input' if len(unknown) == 1 else 'are not inputs'} of "
                         f"{files.program.name}; its inputs: {', '.join(repr(n) for n in program.feeds)}")
    records = _records(files, program)
    options.progress("read paddle program", 1, 3)
    builder = GraphBuilder(files.program.stem, source=files.program.name)
    ctx = PaddleContext(builder, program, options)
    for name in program.feeds:
        var = program.var(name)
        dtype = DataType.from_numpy(var.dtype) if var.dtype is not None else DataType.FLOAT
        ctx.values[name] = builder.input(name, dtype, _input_shape(program, name, options))

    def make_param(name: str) -> Value | None:
        record = records.get(name)
        return builder.initializer(slices(record), name) if record is not None else None

    ctx.param_factory = make_param

    def run(converter: Converter, op: Op) -> None:
        ctx.item = op
        converter(op, ctx)

    convert_all(program.ops, OPS, key=lambda op: op.type, call=run, options=options, stage="convert paddle ops",
                where=lambda op: f"{files.program.name} {op.where()}")
    ctx.item = None
    out_names = program.fetch_names or program.fetches
    for var_name, out_name in zip(program.fetches, out_names, strict=True):
        if var_name not in ctx.values and var_name not in ctx.consts:
            raise ConversionError(f"{files.program.name} fetch '{out_name}'",
                                  f"variable '{var_name}' is never produced")
        builder.output(ctx.value(var_name), out_name)
    kind = "PIR JSON" if program.kind == "json" else "ProgramDesc"
    return builder.build(doc=f"converted from Paddle {kind} {files.program.name}")
