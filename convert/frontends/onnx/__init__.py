"""ONNX frontend: .onnx (with external data) -> IR. The IR has ONNX semantics, so ops pass through."""

from __future__ import annotations

from collections.abc import Sequence

from convert import ir

from .reader import check_support, read_onnx, sniff

__all__ = ["FRONTEND", "read_onnx"]


def _ops() -> Sequence[ir.OpSupport]:
    import onnx

    latest: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in ("", "ai.onnx") and not schema.deprecated:
            latest[schema.name] = max(latest.get(schema.name, 0), schema.since_version)
    rows = [ir.OpSupport(name, name, f"standard ONNX op (latest version {v})") for name, v in sorted(latest.items())]
    rows.append(ir.OpSupport("ai.onnx.ml::*", "unchanged", "passed through; ONNX Runtime runs them"))
    rows.append(ir.OpSupport("com.microsoft::*", "unchanged", "ONNX Runtime contrib ops, passed through"))
    return rows


FRONTEND = ir.FrontendSpec(
    name="onnx",
    description="ONNX model (.onnx, external data read lazily from the model's folder)",
    suffixes=(".onnx",),
    load=read_onnx,
    sniff=sniff,
    ops=_ops,
    check_support=check_support,
    runtime="convert.parity.runtimes.onnxruntime",
)
