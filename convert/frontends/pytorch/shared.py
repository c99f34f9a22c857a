"""One read of a PyTorch model file per conversion, shared by the steps that need it.

A file conversion reads the model for ``check_support`` (every unsupported op, listed before
anything is written), for ``load`` (the lowering), and for the parity check's reference. Each read
costs as much as the first: for a ``.pt2``, torch's deserialiser (1.7-3.3 s for ResNet-50 on two
cores); for TorchScript or a checkpoint, a whole capture (``torch.export`` or the TorchScript
conversion). So:

- ``check_support`` and ``load`` share one capture through ``Options.memo`` (the same options
  object, the same file, unchanged on disk); ``load`` takes it out of the memo;
- the parity reference runs the ExportedProgram torch loaded from the ``.pt2``, when nothing of
  it has changed since: the same graph code, and every parameter, buffer and constant the same
  tensor at the same version (torch counts in-place writes in ``Tensor._version``). Otherwise
  the reference reads the file again. The reference is then what a fresh ``torch.export.load``
  gives, without paying for it twice.

Part of the files layer (``__init__``'s "the path a model takes").
"""

from __future__ import annotations

from pathlib import Path

from convert.ir import Options

__all__ = ["file_key", "recall_program", "remember_program"]


def file_key(what: str, path: Path) -> str:
    """A memo key for ``what`` read from ``path``: a changed file (size, time) is another key."""
    st = path.stat()
    return f"pytorch.{what}:{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _fingerprint(program: object) -> tuple[object, ...]:
    tensors = [*getattr(program, "state_dict", {}).items(), *getattr(program, "constants", {}).items()]
    return (str(program.graph_module.code),  # type: ignore[attr-defined]
            tuple((name, id(t), getattr(t, "_version", None)) for name, t in sorted(tensors, key=lambda kv: kv[0])))


def remember_program(options: Options, path: Path, program: object) -> None:
    """Keep the ExportedProgram torch just loaded from ``path`` for the parity reference."""
    options.memo[file_key("program", path)] = (program, _fingerprint(program))


def recall_program(options: Options, path: Path) -> object | None:
    """The ExportedProgram loaded from ``path`` in this conversion, if it is still as torch loaded it."""
    entry = options.memo.pop(file_key("program", path), None)
    if entry is None:
        return None
    program, fingerprint = entry  # type: ignore[misc]
    return program if _fingerprint(program) == fingerprint else None
