"""What a PyTorch file holds, told from its zip directory without running any of its code.

- TorchScript (``torch.jit.save``): ``<root>/code/`` and ``<root>/constants.pkl``.
- ExportedProgram (``torch.export.save``): ``<root>/archive_format`` or ``<root>/models/*.json``
  (torch 2.7 on), ``serialized_exported_program.json`` at the top (torch 2.6 and before).
- ``torch.save`` checkpoint: ``<root>/data.pkl`` only (or a legacy non-zip pickle). Inspected with
  ``torch.load(weights_only=True, mmap=True)``: a state_dict loads; a pickled module does not, and
  is unpickled only under ``--trust-pickle``.

The files layer, the first step of the path a model takes (``__init__``): it imports nothing
else of the frontend, and nothing below it reads files.
"""

from __future__ import annotations

import functools
import importlib
import io
import pickle
import re
import warnings
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from convert._archive import read_members
from convert.ir import ModelFormatError, Options, UsageError, shown

if TYPE_CHECKING:  # pragma: no cover
    import pickletools

    import torch

__all__ = ["CHECKPOINT", "EXPORTED_PROGRAM", "TORCHSCRIPT", "check_archive", "check_pt2_payloads",
           "classify", "load_checkpoint", "load_factory", "load_torchscript",
           "traced_input_dtypes", "traced_input_shapes"]

TORCHSCRIPT = "torchscript"
EXPORTED_PROGRAM = "exported_program"
CHECKPOINT = "checkpoint"


def classify(path: Path) -> str | None:
    """Return TORCHSCRIPT, EXPORTED_PROGRAM, CHECKPOINT, or None when ``path`` is no PyTorch file.

    Raises:
        ModelFormatError: a damaged zip directory, or one that two zip readers read differently
            (``convert._archive``: duplicate member names, names with control characters).
    """
    try:
        if zipfile.is_zipfile(path):
            names = [info.filename for info in archive_members(path)]
            if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
                return TORCHSCRIPT
            if any(n.endswith("/archive_format") or ("/models/" in n and n.endswith(".json"))
                   or n == "serialized_exported_program.json" for n in names):  # the last: torch <= 2.6's layout
                return EXPORTED_PROGRAM
            if any(n.endswith("data.pkl") for n in names):
                return CHECKPOINT
            return None
        with open(path, "rb") as fh:
            head = fh.read(2)
        return CHECKPOINT if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") else None
    except OSError:
        return None


def archive_members(path: Path) -> list[zipfile.ZipInfo]:
    """Return a PyTorch archive's members, refusing one that Python's zipfile and PyTorch's reader
    would read differently (``convert._archive``). Cached per file state: a conversion asks several times.

    Raises:
        ModelFormatError: naming the member.
    """
    st = path.stat()
    return list(_members_of(str(path.resolve()), st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _members_of(path: str, size: int, mtime_ns: int) -> tuple[zipfile.ZipInfo, ...]:
    del size, mtime_ns  # the cache key: the file as it is now
    return tuple(read_members(Path(path), what="PyTorch archive"))


class _ShapesOnly(pickle.Unpickler):
    """Read ``traced_inputs.pkl`` of a TorchScript file: tensor sizes only, no storage, no code."""

    def find_class(self, module: str, name: str) -> object:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, *rest: _TracedInput(tuple(int(d) for d in size),
                                                                     _STORAGE_DTYPES.get(str(storage), "float32"))
        if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
            return lambda value, tag: value
        if module == "torch" and name.endswith("Storage"):
            return name
        if module == "collections" and name == "OrderedDict":
            return dict
        raise pickle.UnpicklingError(f"unexpected global {module}.{name}")

    def persistent_load(self, pid: object) -> object:
        # ('storage', <what find_class gave for torch.XStorage>, key, location, numel)
        return pid[1] if isinstance(pid, tuple) and len(pid) > 1 else None


_STORAGE_DTYPES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
                   "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
                   "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool"}


class _TracedInput(tuple):  # type: ignore[type-arg]
    """The shape of one recorded example input, with its dtype name in ``dtype``."""

    dtype: str

    def __new__(cls, shape: tuple[int, ...], dtype: str) -> _TracedInput:
        obj = super().__new__(cls, shape)
        obj.dtype = dtype
        return obj


# An archive member that inflates past both bounds is an archive bomb, not a model part.
_MAX_INFLATION = 200
_MAX_SMALL_MEMBER = 256 * 2**20


def check_archive(path: Path) -> None:
    """Refuse a zip whose members inflate out of proportion (a 6 MB file expanding to gigabytes),
    or that two zip readers would read differently (:func:`archive_members`).

    Raises:
        ModelFormatError: naming the member and its sizes.
    """
    infos = archive_members(path)
    size = path.stat().st_size
    for info in infos:
        if info.flag_bits & 0x1:
            raise ModelFormatError(f"{path.name}: member {shown(info.filename)} is flagged encrypted; PyTorch "
                                   "archives are never encrypted (it is damaged)")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ModelFormatError(f"{path.name}: member {shown(info.filename)} uses compression method "
                                   f"{info.compress_type}; PyTorch archives store or deflate their members")
        if info.header_offset + info.compress_size > size or (
                info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size):
            raise ModelFormatError(f"{path.name}: member {shown(info.filename)} claims {info.file_size:,} bytes "
                                   f"({info.compress_size:,} stored) in a {size:,}-byte archive; it is damaged")
        if info.file_size > _MAX_SMALL_MEMBER and info.file_size > _MAX_INFLATION * max(info.compress_size, 1):
            raise ModelFormatError(
                f"{path.name}: member {shown(info.filename)} inflates from {info.compress_size:,} to "
                f"{info.file_size:,} bytes; refused as an archive bomb"
            )


def archive_mentions(path: Path, needle: bytes) -> bool:
    """Return True when a JSON member of the archive (a .pt2's serialized graph) contains ``needle``.

    Members are streamed in 1 MiB chunks; members over the small-member bound are skipped.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".json") or info.file_size > _MAX_SMALL_MEMBER:
                    continue
                tail = b""
                with zf.open(info) as fh:
                    while chunk := fh.read(1 << 20):
                        if needle in tail + chunk:
                            return True
                        tail = chunk[-len(needle):]
    except (OSError, zipfile.BadZipFile, RuntimeError, ValueError):
        return False
    return False


# torch.export.load (torch/export/pt2_archive/_package.py, torch 2.7 to 2.14): for each
# ``<root>/models/<name>.json`` it unpickles ``data/sample_inputs/<name>.pt``, the legacy
# ``data/weights/<name>.pt`` or else each weight its ``data/weights/<name>_weights_config.json``
# marks ``use_pickle``, and the legacy ``data/constants/<name>.pt`` or else the constants its config
# lists (pickled tensors, TorchBind objects, and ``opaque_obj_*`` through plain ``pickle.loads``).
# When that fails it falls back to torch <= 2.7's layout, unpickling these top-level members (with
# ``weights_only=False`` when the safe unpickler refuses them):
_LEGACY_PICKLES = ("serialized_state_dict.pt", "serialized_constants.pt", "serialized_example_inputs.pt")
# ... and it dlopen()s the shared library of any AOTInductor package under ``data/aotinductor/``.
_AOTI_DIR = "data/aotinductor/"


def _archive_root(names: list[str]) -> str:
    """The folder PyTorch's reader prefixes to every record: the first member's, up to its first '/'."""
    first = names[0] if names else ""
    return first.split("/", 1)[0] + "/" if "/" in first else ""


def _payload_members(zf: zipfile.ZipFile, root: str, config: str, folder: str, *, constants: bool) -> list[str]:
    """The members a payload config has torch unpickle: ``folder`` + each such entry's path_name."""
    import json

    where = Path(zf.filename).name if zf.filename else "the archive"
    try:
        with zf.open(root + config) as fh:
            if zf.getinfo(root + config).file_size > _MAX_SMALL_MEMBER:
                raise ValueError(f"{zf.getinfo(root + config).file_size:,} bytes")
            entries = json.loads(fh.read()).get("config", {})
    except (ValueError, AttributeError) as exc:
        raise ModelFormatError(f"{where}: member {shown(root + config)} is not a valid payload config "
                               f"({exc})") from exc
    found = []
    for meta in entries.values() if isinstance(entries, dict) else ():
        if not isinstance(meta, dict):
            continue
        name = str(meta.get("path_name", ""))
        pickled = meta.get("use_pickle") or (constants and not name.startswith("tensor_"))
        if not pickled:
            continue
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise ModelFormatError(f"{where}: {shown(root + config)} names payload {shown(name)}, not a file "
                                   f"of {folder}; the archive is damaged or forged")
        found.append(root + folder + name)
    return found


def _pickled_members(zf: zipfile.ZipFile) -> list[str]:
    """The members of a .pt2 that torch.export.load unpickles, found as it finds them (above)."""
    names = zf.namelist()
    present = set(names)
    found = [n for n in _LEGACY_PICKLES if n in present]
    root = _archive_root(names)
    for name in names:
        if not (name.startswith(root + "models/") and name.endswith(".json")):
            continue
        model = name[len(root + "models/"):-len(".json")]
        found.append(f"{root}data/sample_inputs/{model}.pt")
        for kind, constants in (("weights", False), ("constants", True)):
            legacy = f"{root}data/{kind}/{model}.pt"
            config = f"data/{kind}/{model}_{kind}_config.json"
            if legacy in present:
                found.append(legacy)
            elif root + config in present:
                found += _payload_members(zf, root, config, f"data/{kind}/", constants=constants)
    return [n for n in dict.fromkeys(found) if n in present]  # torch reports missing members itself


def check_pt2_payloads(path: Path, *, trust: bool) -> None:
    """Refuse a .pt2 that would run code from the file when torch.export.load reads it, unless trusted.

    ``torch.export.load`` unpickles sample inputs and some weights with the full unpickler, which
    runs code named in the file, and loads the shared library of an AOTInductor package. Each
    pickled member must load with torch's weights-only unpickler (read as a stream, its tensors on
    the meta device: no member is held in memory), and no AOTInductor package may be present.

    Raises:
        UsageError: the file would run code and ``--trust-pickle`` was not given.
        ModelFormatError: a member cannot be read (a bad CRC, a damaged local header).
    """
    check_archive(path)
    if trust:
        return
    try:
        _check_pt2_code(path)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, OSError, UnicodeDecodeError,
            RuntimeError) as exc:
        # a bad CRC or local header, a truncated stream, an unknown compression method, a member flagged
        # as encrypted (RuntimeError), a name that is not UTF-8: the file's fault
        raise ModelFormatError(f"{path.name}: a member of the archive is damaged ({type(exc).__name__}: "
                               f"{str(exc).strip() or 'unreadable'}). Is the file truncated or corrupt?") from exc


def _check_pt2_code(path: Path) -> None:
    import torch

    members = archive_members(path)
    root = _archive_root([i.filename for i in members])
    aoti = next((i.filename for i in members if i.filename.startswith((root + _AOTI_DIR, _AOTI_DIR))), None)
    if aoti is not None:
        raise UsageError(
            f"{path.name} holds an AOTInductor package ({shown(aoti)}): torch.export.load loads its compiled "
            "library, which runs native code from the file. If you trust the file, pass --trust-pickle; "
            "better, save the model with torch.export.save alone")
    with zipfile.ZipFile(path) as zf:
        pickled = _pickled_members(zf)
        _same_records_as_torch(path, zf, pickled)
        for member in pickled:
            try:
                with zf.open(member) as stream:
                    torch.load(stream, map_location="meta", weights_only=True)
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError):
                raise  # the member is damaged: check_pt2_payloads says so
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0] or type(exc).__name__
                raise UsageError(
                    f"{path.name}: member {shown(member)} is a pickle that the safe (weights-only) unpickler "
                    f"refuses ({first[:300]}); loading it would run code from the file. If you trust the file, "
                    "pass --trust-pickle"
                ) from exc


def _same_records_as_torch(path: Path, zf: zipfile.ZipFile, members: list[str]) -> None:
    """Check that PyTorch's own reader finds each checked member at the local header zipfile read.

    The last guard of the differential ``convert._archive`` closes by refusing: whatever torch would
    read under a checked member's name is what was checked. The legacy top-level members are read
    by torch with zipfile itself.
    """
    import torch

    try:
        reader = torch._C.PyTorchFileReader(str(path))
    except RuntimeError:  # torch's reader refuses the archive: torch.export.load falls back to zipfile
        return
    root = _archive_root(zf.namelist())
    for member in members:
        if not root or not member.startswith(root):
            continue
        record = member[len(root):]
        try:
            theirs = int(reader.get_record_header_offset(record))
        except RuntimeError:
            theirs = -1
        if theirs != zf.getinfo(member).header_offset:
            raise ModelFormatError(f"{path.name}: PyTorch's reader finds member {shown(member)} at byte {theirs:,}, "
                                   f"zipfile at {zf.getinfo(member).header_offset:,}; the archive is refused")


def traced_input_shapes(path: Path) -> list[tuple[int, ...]] | None:
    """Return the shapes of the example inputs a traced TorchScript file recorded, or None."""
    try:
        with zipfile.ZipFile(path) as zf:
            name = next((n for n in zf.namelist() if n.endswith("/traced_inputs.pkl")), None)
            if name is None:
                return None
            data = zf.read(name)
        import io

        _walk_pickle(data)  # a damaged count or memo index: not gigabytes allocated by the unpickler
        table = _ShapesOnly(io.BytesIO(data)).load()
    except (OSError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, pickle.UnpicklingError,
            EOFError, TypeError, ValueError):
        return None
    shapes = table.get("forward") if isinstance(table, dict) else None
    if not isinstance(shapes, (list, tuple)) or not all(isinstance(s, tuple) for s in shapes):
        return None
    return list(shapes)


def traced_input_dtypes(path: Path) -> list[str] | None:
    """Return the dtype names ('float32', 'int64') of a traced TorchScript file's example inputs, or None."""
    shapes = traced_input_shapes(path)
    if shapes is None:
        return None
    return [getattr(s, "dtype", "float32") for s in shapes]


def _state_dict_of(obj: object) -> Mapping[str, object] | None:
    import torch

    if isinstance(obj, Mapping):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
        for key in ("state_dict", "model_state_dict", "model", "weights"):
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
                return inner
    return None


def load_factory(spec: str) -> torch.nn.Module:
    """Import ``package.module:factory`` and call it to build a module.

    Raises:
        UsageError: when the spec is malformed, the module or attribute is missing, or the
            factory does not return an ``nn.Module``.
    """
    import torch

    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise UsageError(f"--model '{spec}': expected package.module:factory")
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise UsageError(f"--model '{spec}': cannot import '{mod_name}': {exc}") from exc
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"--model '{spec}': '{mod_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    built = obj() if callable(obj) and not isinstance(obj, torch.nn.Module) else obj
    if not isinstance(built, torch.nn.Module):
        raise UsageError(f"--model '{spec}' returned {type(built).__name__}, not a torch.nn.Module")
    return built


def load_checkpoint(path: Path, options: Options) -> torch.nn.Module:
    """Return the module a ``torch.save`` file holds, refusing to unpickle code unless trusted.

    Raises:
        UsageError: for a pickled module without ``--trust-pickle``, or a state_dict without ``--model``.
        ModelFormatError: when the file cannot be read or a pickled class cannot be imported.
    """
    import torch

    trust = bool(options.get("trust_pickle", False))
    factory = options.get("torch_factory")
    try:
        obj = _load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        if "WeightsUnpickler error" in text and "global" not in text.lower():
            # not code but a damaged pickle (a wrong magic number, an unknown opcode): the file's fault
            detail = text.split("WeightsUnpickler error:", 1)[1].strip().splitlines()
            why = (detail[0] if detail else "") or "damaged"
            raise ModelFormatError(f"{path.name}: cannot read: the pickle is damaged ({why}). "
                                   "Is the file truncated or not a PyTorch file?") from exc
        if not trust:
            raise UsageError(
                f"{path.name} is a pickled Python object (a whole module saved with torch.save(model)); "
                "unpickling it runs code from the file, so it is refused. If you trust the file, pass "
                "--trust-pickle; better, save the model with torch.jit.save or torch.export.save"
            ) from exc
        try:
            obj = _load(path, weights_only=False)
        except (ModuleNotFoundError, AttributeError, ImportError) as err:
            raise ModelFormatError(
                f"{path.name}: the pickled model needs a class that cannot be imported here ({err}). "
                "Make the package that defines the model importable (install it or add it to PYTHONPATH)"
            ) from err
        except pickle.UnpicklingError as err:  # a damaged pickle (a wrong load key): the file's fault
            first = (str(err).strip().splitlines() or [""])[0] or "damaged"
            raise ModelFormatError(f"{path.name}: cannot read (UnpicklingError: {first})") from err
    if isinstance(obj, torch.jit.ScriptModule):
        return obj
    if isinstance(obj, torch.nn.Module):
        if factory:
            options.diagnostics.note(f"--model ignored: {path.name} holds a whole module")
        return obj
    state = _state_dict_of(obj)
    if state is None:
        raise ModelFormatError(f"{path.name} holds a {type(obj).__name__}, not a model or a state_dict")
    if not factory:
        raise UsageError(
            f"{path.name} holds weights only (a state_dict of {len(state)} tensors) and no architecture. "
            "Pass --model package.module:factory (a callable returning the nn.Module; the weights are "
            "loaded into it), or use the Python API convert.convert(model, example_inputs, ...)"
        )
    module = load_factory(str(factory))
    try:
        module.load_state_dict(dict(state), strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelFormatError(f"{path.name} does not fit --model {factory}: {str(exc).splitlines()[0]}") from exc
    return module


def _load(path: Path, *, weights_only: bool) -> object:
    import torch

    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=weights_only, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            return torch.load(path, map_location="cpu", weights_only=weights_only)
    except pickle.UnpicklingError:
        raise  # the caller's to judge: code in the pickle, or a damaged one
    except (ModuleNotFoundError, AttributeError, ImportError) as exc:
        if not weights_only:
            raise  # the caller's to judge: a class of the pickled module that cannot be imported
        # the weights-only unpickler imports nothing: torch's loader tripped on damaged data (#29)
        _damaged(path, exc)
    except Exception as exc:  # torch's loader on a damaged file (EOFError, a wrong magic number): the file's fault
        _damaged(path, exc)


def _damaged(path: Path, exc: BaseException) -> NoReturn:
    """Raise the one-line error for a file torch's loader could not read (never returns)."""
    first = (str(exc).strip().splitlines() or [""])[0] or "the file ends early or is damaged"
    raise ModelFormatError(f"{path.name}: cannot read ({type(exc).__name__}: {first})") from exc


_MEMO_OPS = frozenset(("PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"))
_RUN = 4096  # opcodes stepped over by one match of the fast path


@functools.cache
def _opcode_runs() -> tuple[dict[int, pickletools.OpcodeInfo], re.Pattern[bytes], re.Pattern[bytes]]:
    """Return pickletools' opcodes by byte, and two patterns matching a run of opcodes whose
    argument is a fixed number of bytes of any value (the second also takes the one-byte memo
    indices, which only a pickle under 255 bytes can see past its end)."""
    import pickletools

    by_byte = {op.code.encode("latin-1")[0]: op for op in pickletools.opcodes}

    def run(short_memo: bool) -> re.Pattern[bytes]:
        # STOP ends the walk, and a memo index is bounded: those take the slow path (BINPUT and
        # BINGET, one byte, only when the pickle may be shorter than 255 bytes).
        fast = [op for op in pickletools.opcodes if (op.arg is None or op.arg.n >= 0) and op.name != "STOP"
                and (op.name not in _MEMO_OPS or (short_memo and op.name in ("BINPUT", "BINGET")))]
        alternatives = [re.escape(op.code.encode("latin-1")) + b"." * (op.arg.n if op.arg else 0) for op in fast]
        # At most _RUN opcodes a match: the regex engine keeps state for each repeat of a group until
        # the match ends (10 MB of BININT1 in one unbounded run took 0.5 GB).
        return re.compile(b"(?:" + b"|".join(alternatives) + b"){0,%d}" % _RUN, re.DOTALL)

    return by_byte, run(False), run(True)


def _walk_pickle(data: bytes) -> None:
    """Walk a small pickle's opcodes without building anything, as ``pickletools.genops`` does
    (every opcode known, every argument read in full, a STOP before the end), bounded by its bytes.

    The C unpickler allocates what an opcode claims before checking it: the bytes of a counted
    string, a memo table as long as a ``LONG_BINPUT`` index. A damaged length or index (gigabytes)
    is a ValueError here instead.

    Hot path: a traced detector's archive holds ~200,000 opcodes, mostly in its ``.debug_pkl``
    source ranges, and ``genops`` walked them in 0.05 s, a tenth of its whole conversion. Here
    a regular expression steps over each run of opcodes whose argument is fixed-width (any bytes
    are a valid argument there; ``genops`` only checks that they are present), and every other
    opcode's argument is read by pickletools' own reader, so what is refused is what ``genops``
    refuses (a differential test holds the two walks to the same verdicts).
    """
    by_byte, plain, with_memo = _opcode_runs()
    run = with_memo if len(data) >= 255 else plain  # a one-byte memo index never exceeds a longer pickle
    stream = io.BytesIO(data)
    pos, end = 0, len(data)
    while True:
        while (step := run.match(data, pos).end()) != pos:  # type: ignore[union-attr]  # {0,n} always matches
            pos = step
        if pos >= end:
            raise ValueError("pickle exhausted before seeing STOP")
        op = by_byte.get(data[pos])
        if op is None:
            raise ValueError(f"at position {pos}, opcode {data[pos:pos + 1]!r} unknown")
        stream.seek(pos + 1)
        arg = None if op.arg is None else op.arg.reader(stream)
        if op.name in _MEMO_OPS and int(arg) > end:  # type: ignore[arg-type]
            raise ValueError(f"memo index {arg} in a pickle of {end} bytes")
        if op.name == "STOP":
            return
        pos = stream.tell()


class _Anything:
    """Whatever a TorchScript ``data.pkl`` builds (modules, tensors): nothing is imported or run."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        pass


class _StorageRecords(pickle.Unpickler):
    """Walk a TorchScript ``data.pkl`` and record each tensor storage it names: (type, key, numel)."""

    def __init__(self, data: bytes) -> None:
        import io

        super().__init__(io.BytesIO(data))
        self.storages: list[tuple[str, str, int]] = []

    def find_class(self, module: str, name: str) -> object:
        if module == "torch" and name.endswith("Storage"):
            return name
        if module == "collections" and name == "OrderedDict":
            return dict
        return _Anything

    def persistent_load(self, pid: object) -> object:
        # ('storage', <torch.XStorage, here its name>, key, location, numel)
        if isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage":
            self.storages.append((str(pid[1]), str(pid[2]), int(pid[4]) if isinstance(pid[4], int) else -1))
        return _Anything()


_STORAGE_ITEMSIZE = {"FloatStorage": 4, "DoubleStorage": 8, "HalfStorage": 2, "BFloat16Storage": 2, "LongStorage": 8,
                     "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1, "BoolStorage": 1}


def check_torchscript_storages(path: Path) -> None:
    """Refuse a TorchScript archive whose tensor data members are missing or shorter than the
    storages ``data.pkl`` declares, or whose ``.debug_pkl`` members are cut short: torch maps the
    former as they are and reads source ranges from the latter, and either crashes the process
    (SIGSEGV in torch's C++, found by the #29 campaign: 183 of 96,400 cases).

    Raises:
        ModelFormatError: naming the member and the sizes.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            infos = {i.filename: i for i in zf.infolist()}
            pickled = [n for n in infos if n.endswith("/data.pkl") and n.count("/") == 1]
            if not pickled:
                return  # not the layout torch.jit.save writes: torch's own loader decides
            prefix = pickled[0][: -len("data.pkl")]
            data = zf.read(pickled[0])
            debug = {n: zf.read(n) for n in infos if n.endswith(".debug_pkl")
                     and infos[n].file_size <= _MAX_SMALL_MEMBER}
        _walk_pickle(data)
        for name, blob in debug.items():  # source ranges: a cut one crashes torch's converter later
            try:
                _walk_pickle(blob)
            except ValueError as exc:
                raise ModelFormatError(f"{path.name}: debug member '{name}' is damaged ({exc})") from exc
    except (OSError, zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            ValueError) as exc:  # unreadable (cut, encrypted, unknown method), or a pickle cut short
        raise ModelFormatError(f"{path.name}: the TorchScript archive's data.pkl or debug members are damaged "
                               f"({type(exc).__name__}: {exc})") from exc
    records = _StorageRecords(data)
    try:
        records.load()
    except Exception:  # a data.pkl this walk does not follow: torch's own loader decides
        return
    for kind, key, numel in records.storages:
        member = f"{prefix}data/{key}"
        need = numel * _STORAGE_ITEMSIZE.get(kind, 1)
        info = infos.get(member)
        if info is None or numel < 0 or info.file_size < need:
            have = "missing" if info is None else f"{info.file_size:,} bytes"
            raise ModelFormatError(f"{path.name}: tensor data '{member}' is {have}; data.pkl declares a {kind} of "
                                   f"{numel:,} elements ({need:,} bytes); the archive is damaged")


def load_torchscript(path: Path) -> object:
    """``torch.jit.load`` on the CPU, without torch 2.14's FutureWarning that TorchScript is
    deprecated: reading TorchScript files is what the user asked for, and the warning would be a
    second stderr line beside a one-line error."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.load.* is deprecated", category=FutureWarning)
        return torch.jit.load(path, map_location="cpu")  # type: ignore[no-untyped-call]
