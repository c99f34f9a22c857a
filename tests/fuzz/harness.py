"""The fuzz harness: seeds, mutators, and one case run through the CLI and classified.

A case is a seed model (``seeds/<name>/``: its files and ``case.json`` with the route) with one or
more files mutated. ``run_case`` runs ``convert ROUTE FILES... -o OUT/ --no-check -q`` in a
forked child of a fork server (a subprocess that imports the frameworks once; a child costs
milliseconds), with a wall-clock limit and an address-space limit, and classifies it:

- ``success``: exit 0;
- ``clean``: exit 2, exactly one ``convert: error:`` line, no traceback, nothing left in OUT;
- ``crash``: anything else (exit 1 or 3, a traceback, several error lines, a signal, files left);
- ``hang``: still running at the time limit (killed).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEEDS_DIR = HERE / "seeds"
CRASHES_DIR = HERE / "crashes"
TIMEOUT_S = float(os.environ.get("CONVERT_FUZZ_TIMEOUT", "20"))
MEMORY_HEADROOM = 3 * 1024**3  # a child may map this much beyond what the parent has mapped

__all__ = ["CRASHES_DIR", "SEEDS_DIR", "Case", "Outcome", "Seed", "load_seeds", "mutate", "preload",
           "run_case", "save_case"]


@dataclass(frozen=True)
class Seed:
    """A valid model: its folder, route and files in command-line order."""

    name: str
    folder: Path
    route: str
    files: tuple[str, ...]

    def read(self) -> dict[str, bytes]:
        """Return every file of the seed folder (companions such as ``.data`` included) by relative path."""
        return {p.relative_to(self.folder).as_posix(): p.read_bytes() for p in sorted(self.folder.rglob("*"))
                if p.is_file() and p.name != "case.json"}


@dataclass
class Case:
    """A seed with mutated file contents and a description of what was done."""

    seed: Seed
    contents: dict[str, bytes]
    steps: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    """How one run ended."""

    kind: str  # success | clean | crash | hang
    code: int | None
    stderr: str
    why: str = ""


def load_seeds(folder: Path = SEEDS_DIR, *, campaign: bool = False) -> list[Seed]:
    """Return the seeds under ``folder`` (one sub-folder each).

    Seeds whose ``case.json`` says ``"campaign_only": true`` (TensorFlow and TFLite: TensorFlow's
    import alone takes longer than CI's fuzz budget) are left out unless ``campaign`` is true.
    """
    seeds = []
    for sub in sorted(p for p in folder.iterdir() if (p / "case.json").is_file()):
        meta = json.loads((sub / "case.json").read_text())
        if meta.get("campaign_only") and not campaign:
            continue
        seeds.append(Seed(sub.name, sub, meta["route"], tuple(meta["files"])))
    return seeds


def _import_for(routes: list[str]) -> None:
    """Import the frontends and exporters of ``routes`` (in the fork server, once)."""
    import convert.api  # the CLI imports it on first use: once here, not in every child
    import convert.cli  # noqa: F401
    from convert import formats

    for route in routes:
        src, _, dst = route.partition(":")
        with contextlib.suppress(Exception):
            formats.frontend(src)
            formats.exporter(dst)
        if src == "pytorch":
            with contextlib.suppress(ImportError):
                import torch  # noqa: F401
        if src == "paddle":
            from convert.frontends.paddle import ops  # noqa: F401


_SERVER: subprocess.Popen[str] | None = None


def preload(seeds: list[Seed]) -> None:
    """Start the fork server with the seeds' frameworks imported (see ``run_case``)."""
    global _SERVER
    if _SERVER is not None and _SERVER.poll() is None:
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    _SERVER = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve",
                                *sorted({s.route for s in seeds})],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    atexit.register(_stop_server, _SERVER)


def _stop_server(server: subprocess.Popen[str]) -> None:
    if server.poll() is None:
        with contextlib.suppress(OSError):
            server.stdin.close()  # type: ignore[union-attr]
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


# ---------------------------------------------------------------------------------------------
# Mutators: each takes the bytes of one file, its name and a Random, returns new bytes.
# ---------------------------------------------------------------------------------------------
HUGE_INTS = [-1, 0, 2**31 - 1, 2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1, -(2**31), -(2**63)]
WEIRD_STRINGS = ["", "\x00", "a\x00b", "x" * 5000, "sub/", "../outside", "/etc/passwd", "é" * 3, ".", "a/b/c"]
Mutator = Callable[[bytes, str, random.Random], bytes]


def flip_bytes(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Flip 1-8 random bits."""
    if not data:
        return b"\x00"
    out = bytearray(data)
    for _ in range(rnd.randint(1, 8)):
        i = rnd.randrange(len(out))
        out[i] ^= 1 << rnd.randrange(8)
    return bytes(out)


def truncate(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Cut the file at a random length (possibly empty)."""
    return data[: rnd.randrange(len(data) + 1)]


def overwrite_int(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Write a huge/negative 4- or 8-byte integer, or a 10-byte varint, at a random offset."""
    if not data:
        return data
    value = rnd.choice(HUGE_INTS)
    kind = rnd.choice(["i4", "i8", "varint"])
    if kind == "varint":
        v = value & (2**64 - 1)
        enc = bytearray()
        while True:
            enc.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
            v >>= 7
            if not v:
                break
        blob = bytes(enc)
    else:
        size = 4 if kind == "i4" else 8
        blob = (value & (2 ** (8 * size) - 1)).to_bytes(size, "little")
    i = rnd.randrange(len(data))
    return data[:i] + blob + data[i + len(blob):]


def splice(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Delete, duplicate or insert garbage in a random range."""
    if not data:
        return b"\xff" * rnd.randint(1, 16)
    i = rnd.randrange(len(data))
    j = min(len(data), i + rnd.randint(1, 64))
    op = rnd.choice(["delete", "duplicate", "garbage"])
    if op == "delete":
        return data[:i] + data[j:]
    if op == "duplicate":
        return data[:j] + data[i:j] + data[j:]
    return data[:i] + bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16))) + data[i:]


def corrupt_string(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Put a non-UTF-8 byte, NUL or slash inside a run of printable ASCII (names, locations, keys)."""
    runs = [m.span() for m in re.finditer(rb"[A-Za-z_.][A-Za-z0-9_./]{2,}", data)]
    if not runs:
        return flip_bytes(data, name, rnd)
    a, b = rnd.choice(runs)
    i = rnd.randrange(a, b)
    return data[:i] + rnd.choice([b"\xff", b"\xc3", b"\x00", b"/", b"\xed\xa0\x80"]) + data[i + 1:]


_NUMBER = re.compile(rb"(?<![A-Za-z_])-?\d+(\.\d+)?(e[-+]?\d+)?")


def text_number(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Replace a number in a text file (cfg, prototxt, JSON) by a huge, negative or odd one."""
    spans = [m.span() for m in _NUMBER.finditer(data)]
    if not spans:
        return splice(data, name, rnd)
    a, b = rnd.choice(spans)
    new = rnd.choice([str(v) for v in HUGE_INTS] + ["1e308", "-0", "0.5", "nan", "99999999999999999999999"])
    return data[:a] + new.encode() + data[b:]


def text_line(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Delete, duplicate or swap a line of a text file."""
    lines = data.split(b"\n")
    if len(lines) < 2:
        return splice(data, name, rnd)
    i = rnd.randrange(len(lines))
    op = rnd.choice(["delete", "duplicate", "swap"])
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    else:
        j = rnd.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def _json_nodes(node: object, path: tuple[object, ...] = ()) -> Iterator[tuple[tuple[object, ...], object]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _json_nodes(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _json_nodes(v, (*path, i))


def json_tree(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Delete a key or element, change a value's type, a number to a huge one, or nest deeply."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return text_number(data, name, rnd)
    nodes = list(_json_nodes(doc))
    path, _ = rnd.choice(nodes[1:] or nodes)
    if not path:
        return data
    parent = doc
    for key in path[:-1]:
        parent = parent[key]  # type: ignore[index]
    key = path[-1]
    op = rnd.choice(["delete", "type", "number", "deep", "string"])
    if op == "delete":
        del parent[key]  # type: ignore[attr-defined]
    elif op == "type":
        parent[key] = rnd.choice([None, True, 1.5, "x", [], {}, [[1]], {"a": 1}])  # type: ignore[index]
    elif op == "number":
        parent[key] = rnd.choice([*HUGE_INTS, 1e308, -1.5])  # type: ignore[index]
    elif op == "deep":  # a value nested thousands of lists deep (a RecursionError for naive readers)
        parent[key] = "__DEEP__"  # type: ignore[index]
        depth = rnd.choice([1000, 5000, 100000])
        return json.dumps(doc).replace('"__DEEP__"', "[" * depth + "0" + "]" * depth, 1).encode()
    else:
        parent[key] = rnd.choice(WEIRD_STRINGS)  # type: ignore[index]
    return json.dumps(doc).encode()


def _proto_class(name: str) -> type | None:
    if name.endswith(".onnx"):
        import onnx

        return onnx.ModelProto  # type: ignore[no-any-return]
    if name.endswith(".caffemodel"):
        from convert._proto import caffe_pb2

        return caffe_pb2.NetParameter  # type: ignore[no-any-return]
    if name.endswith(".pdmodel"):
        from convert.frontends.paddle import framework_pb2

        return framework_pb2.ProgramDesc  # type: ignore[no-any-return]
    if name.endswith("saved_model.pb"):
        from tensorflow.core.protobuf import saved_model_pb2

        return saved_model_pb2.SavedModel  # type: ignore[no-any-return]
    return None


def _repeated(fd: object) -> bool:
    flag = getattr(fd, "is_repeated", None)  # newer protobuf; older ones have only `label`
    return bool(flag) if flag is not None else fd.label == fd.LABEL_REPEATED  # type: ignore[attr-defined]


def _messages(msg: object) -> Iterator[object]:
    yield msg
    for fd, value in msg.ListFields():  # type: ignore[attr-defined]
        if fd.type != fd.TYPE_MESSAGE:
            continue
        if _repeated(fd):
            if fd.message_type.GetOptions().map_entry:
                continue
            for item in value:
                yield from _messages(item)
        else:
            yield from _messages(value)


def proto_field(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Structure-aware: delete a field or element, set an int huge, a string odd, duplicate an element."""
    cls = _proto_class(name)
    if cls is None:
        return flip_bytes(data, name, rnd)
    msg = cls()
    try:
        msg.ParseFromString(data)
    except Exception:
        return flip_bytes(data, name, rnd)
    subs = list(_messages(msg))
    for _ in range(10):
        target = rnd.choice(subs)
        fields = target.ListFields()  # type: ignore[attr-defined]
        if fields:
            break
    else:
        return data
    fd, value = rnd.choice(fields)
    repeated = _repeated(fd)
    if fd.type == fd.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry:  # a map (SavedModel): drop a key
        if value:
            del value[rnd.choice(sorted(value))]
        return msg.SerializeToString()  # type: ignore[no-any-return]
    ints = (fd.TYPE_INT32, fd.TYPE_INT64, fd.TYPE_UINT32, fd.TYPE_UINT64, fd.TYPE_SINT32, fd.TYPE_SINT64)
    op = rnd.choice(["delete", "value", "duplicate"])
    try:
        if op == "delete":
            if repeated and len(value) > 1:
                del value[rnd.randrange(len(value))]
            else:
                target.ClearField(fd.name)  # type: ignore[attr-defined]
        elif op == "duplicate" and repeated and fd.type == fd.TYPE_MESSAGE:
            value.add().CopyFrom(value[rnd.randrange(len(value))])
        elif op == "duplicate" and repeated:
            value.append(value[rnd.randrange(len(value))])
        elif fd.type in ints:
            bits = 32 if fd.type in (fd.TYPE_INT32, fd.TYPE_UINT32, fd.TYPE_SINT32) else 64
            unsigned = fd.type in (fd.TYPE_UINT32, fd.TYPE_UINT64)
            lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            new = min(hi, max(lo, rnd.choice(HUGE_INTS)))
            if repeated:
                value[rnd.randrange(len(value))] = new
            else:
                setattr(target, fd.name, new)
        elif fd.type == fd.TYPE_STRING:
            new_s = rnd.choice(WEIRD_STRINGS)
            if repeated:
                value[rnd.randrange(len(value))] = new_s
            else:
                setattr(target, fd.name, new_s)
        elif fd.type in (fd.TYPE_FLOAT, fd.TYPE_DOUBLE) and not repeated:
            setattr(target, fd.name, rnd.choice([float("nan"), float("inf"), -1e38, 0.0]))
        elif fd.type == fd.TYPE_BYTES and not repeated:
            setattr(target, fd.name, value[: rnd.randrange(len(value) + 1)])
        else:
            target.ClearField(fd.name)  # type: ignore[attr-defined]
        return msg.SerializeToString()  # type: ignore[no-any-return]
    except (ValueError, TypeError, IndexError):
        return data


def zip_member(data: bytes, name: str, rnd: random.Random) -> bytes:
    """For a zip archive (.pt): mutate one member's bytes and rewrite the archive consistently."""
    try:
        zin = zipfile.ZipFile(io.BytesIO(data))
        members = [(i, zin.read(i)) for i in zin.infolist()]
    except Exception:  # a damaged archive (bad header, unknown compression ...): mutate its bytes instead
        return flip_bytes(data, name, rnd)
    if not members:
        return data
    k = rnd.randrange(len(members))
    mutator = rnd.choice([flip_bytes, truncate, overwrite_int, corrupt_string, splice])
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for i, (zi, content) in enumerate(members):
            zout.writestr(zi, mutator(content, zi.filename, rnd) if i == k else content)
    return out.getvalue()


def onnx_graph(data: bytes, name: str, rnd: random.Random) -> bytes:
    """ONNX-aware: rewire a node input (cycles, type mismatches), retype an attribute, make a dim huge."""
    import onnx

    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:
        return flip_bytes(data, name, rnd)
    graph = model.graph
    if not graph.node:
        return data
    node = rnd.choice(list(graph.node))
    op = rnd.choice(["rewire", "retype", "dim", "self-loop", "attr-value"])
    names = [o for n in graph.node for o in n.output] + [i.name for i in graph.input] + \
        [t.name for t in graph.initializer]
    if op == "rewire" and node.input:
        node.input[rnd.randrange(len(node.input))] = rnd.choice(names)
    elif op == "self-loop" and node.input and node.output:
        node.input[rnd.randrange(len(node.input))] = node.output[0]
    elif op in ("retype", "attr-value") and node.attribute:
        attr = rnd.choice(list(node.attribute))
        if op == "retype":
            attr.type = rnd.choice([t for t in onnx.AttributeProto.AttributeType.values() if t != attr.type])
        else:
            attr.ClearField("ints")
            attr.ints.extend(rnd.choice([[], [0], [-1], [2**31], [1] * 9, [2**62, 2**62]]))
            attr.type = onnx.AttributeProto.INTS
    else:
        values = [v for v in [*graph.input, *graph.output, *graph.value_info] if v.type.tensor_type.shape.dim]
        if not values:
            return data
        dims = rnd.choice(values).type.tensor_type.shape.dim
        dims[rnd.randrange(len(dims))].dim_value = rnd.choice([0, 2**31, 2**40, 2**62])
    return model.SerializeToString()


def zip_structure(data: bytes, name: str, rnd: random.Random) -> bytes:
    """For a zip archive: change its structure, not a member's bytes. A member written twice (the
    copy mutated, before or after the original), a member renamed to differ in case only, to hold a
    NUL, to climb out of its folder or to sit in another root folder, the members reordered, one
    dropped, bytes put before the archive, thousands of empty members added."""
    try:
        zin = zipfile.ZipFile(io.BytesIO(data))
        members = [(i.filename, zin.read(i)) for i in zin.infolist()]
    except Exception:
        return flip_bytes(data, name, rnd)
    if not members:
        return data
    op = rnd.choice(["dup-first", "dup-last", "case", "nul", "dotdot", "root", "reorder", "drop", "prefix",
                     "many"])
    k = rnd.randrange(len(members))
    member, content = members[k]
    nul = False
    if op in ("dup-first", "dup-last"):
        copy = (member, rnd.choice([flip_bytes, truncate, corrupt_string, splice])(content, member, rnd))
        members.insert(k if op == "dup-first" else k + 1, copy)
    elif op == "case":
        members.insert(rnd.choice([k, k + 1]), (member.swapcase(), content))
    elif op == "nul":
        members[k] = (member + "#NUL#", content)
        nul = True
    elif op == "dotdot":
        members[k] = (member.replace("/", "/../", 1), content)
    elif op == "root":
        members[k] = ("other/" + member.split("/", 1)[-1], content)
    elif op == "reorder":
        rnd.shuffle(members)
    elif op == "drop":
        del members[k]
    elif op == "many":
        members += [(f"{member.split('/')[0]}/pad/{i}", b"") for i in range(rnd.choice([1000, 20000]))]
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it is asked to write
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
            for m, c in members:
                zout.writestr(zipfile.ZipInfo(m), c)
    blob = out.getvalue()
    if nul:
        blob = blob.replace(b"#NUL#", b"\x00abc")  # zipfile cuts a name at NUL when writing: patched after
    if op == "prefix":
        blob = rnd.choice([b"\x00" * 7, b"#!/bin/sh\nexit 0\n", data[:64]]) + blob
    return blob


def _wire_fields(data: bytes) -> list[tuple[int, int, int, int, int]] | None:
    """Split a protobuf message into (field, wire type, start, value start, end) records, or None."""
    from convert._wire import read_varint

    fields, pos = [], 0
    try:
        while pos < len(data):
            start = pos
            tag, pos = read_varint(data, pos)
            wire, number = tag & 7, tag >> 3
            value = pos
            if wire == 0:
                _, pos = read_varint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 2:
                length, pos = read_varint(data, pos)
                value = pos
                pos += length
            elif wire == 5:
                pos += 4
            else:
                return None
            if pos > len(data) or number == 0:
                return None
            fields.append((number, wire, start, value, pos))
    except (ValueError, IndexError):
        return None
    return fields


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def proto_swap(data: bytes, name: str, rnd: random.Random, depth: int = 0) -> bytes:
    """Wire-level protobuf edit, schema-blind: in a message found at some nesting depth, swap the
    field numbers of two fields, renumber one field (to another known number or a huge one), or
    change a field's wire type; lengths of the enclosing messages are recomputed."""
    fields = _wire_fields(data)
    if not fields:
        return flip_bytes(data, name, rnd) if depth == 0 else data
    nested = [f for f in fields if f[1] == 2 and _wire_fields(data[f[3]:f[4]])]
    if nested and depth < 6 and rnd.random() < 0.7:
        number, wire, start, value, end = rnd.choice(nested)
        inner = proto_swap(data[value:end], name, rnd, depth + 1)
        return data[:start] + _varint(number << 3 | 2) + _varint(len(inner)) + inner + data[end:]
    numbers = sorted({f[0] for f in fields})
    op = rnd.choice(["swap", "renumber", "rewire"])
    renumber: dict[int, tuple[int, int]] = {}
    if op == "swap" and len(numbers) > 1:
        a, b = rnd.sample(numbers, 2)
        wires = {f[0]: f[1] for f in fields}
        renumber = {a: (b, wires[a]), b: (a, wires[b])}
    elif op == "renumber":
        a = rnd.choice(numbers)
        wires = {f[0]: f[1] for f in fields}
        renumber = {a: (rnd.choice([*numbers, 2**29 - 1, 19000, 1]), wires[a])}
    else:
        a = rnd.choice(numbers)
        wires = {f[0]: f[1] for f in fields}
        renumber = {a: (a, rnd.choice([w for w in (0, 1, 2, 5) if w != wires[a]]))}
    out = bytearray()
    for number, wire, start, value, end in fields:
        if number not in renumber:
            out += data[start:end]
            continue
        new_number, new_wire = renumber[number]
        payload = data[value:end]
        if wire == 2 and new_wire == 2:
            out += _varint(new_number << 3 | 2) + _varint(len(payload)) + payload
        elif new_wire == wire:
            out += _varint(new_number << 3 | wire) + payload
        elif new_wire == 2:
            out += _varint(new_number << 3 | 2) + _varint(len(payload)) + payload
        else:  # a length-delimited or fixed value read as another wire type: its bytes as they fall
            out += _varint(new_number << 3 | new_wire) + payload
    return bytes(out)


def graph_cycle(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Make the model's graph cyclic or forward-referencing, format by format: ONNX nodes feeding
    each other, a prototxt bottom naming a later top, a Darknet route/shortcut pointing ahead."""
    if name.endswith(".onnx"):
        import onnx

        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except Exception:
            return flip_bytes(data, name, rnd)
        nodes = [n for n in model.graph.node if n.input and n.output]
        if len(nodes) < 2:
            return onnx_graph(data, name, rnd)
        a, b = sorted(rnd.sample(range(len(nodes)), 2))
        nodes[a].input[0] = nodes[b].output[0]  # a reads what b computes, b depends on a: a cycle
        if rnd.random() < 0.5:
            model.graph.node.reverse()  # and the nodes out of order
        return model.SerializeToString()
    text = data.decode("utf-8", "replace")
    if name.endswith(".prototxt"):
        tops = re.findall(r'top:\s*"([^"]+)"', text)
        bottoms = list(re.finditer(r'bottom:\s*"([^"]+)"', text))
        if not tops or not bottoms:
            return text_line(data, name, rnd)
        hit = rnd.choice(bottoms)
        return (text[:hit.start()] + f'bottom: "{tops[-1]}"' + text[hit.end():]).encode()
    if name.endswith(".cfg"):
        sections = [m.start() for m in re.finditer(r"^\[", text, re.M)]
        if len(sections) < 3:
            return text_line(data, name, rnd)
        at = rnd.choice(sections[1:])
        ref = rnd.choice(["[route]\nlayers=5\n", "[route]\nlayers=-1,3\n", "[shortcut]\nfrom=2\n",
                          "[route]\nlayers=0\n", "[shortcut]\nfrom=-100\n", "[route]\nlayers=-1,-1,-1\n"])
        return (text[:at] + ref + "\n" + text[at:]).encode()
    return splice(data, name, rnd)


def huge_dims(data: bytes, name: str, rnd: random.Random) -> bytes:
    """Set a declared size to a huge, negative or zero value, format by format (cfg width/filters,
    prototxt dims, ONNX initializer dims with their data left as it is, JSON shapes)."""
    weird = rnd.choice([0, -1, -(2**31), 2**31, 2**32 + 3, 2**40, 2**62, 2**63 - 1, 10**18])
    if name.endswith(".onnx"):
        import onnx

        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except Exception:
            return flip_bytes(data, name, rnd)
        inits = [t for t in model.graph.initializer if t.dims]
        if not inits:
            return onnx_graph(data, name, rnd)
        t = rnd.choice(inits)
        t.dims[rnd.randrange(len(t.dims))] = weird
        return model.SerializeToString()
    text = data.decode("utf-8", "replace")
    if name.endswith((".cfg", ".prototxt", ".json")):
        keys = r"(width|height|channels|filters|size|batch|dim|num_output|kernel_size|shape|stride|groups)"
        hits = list(re.finditer(keys + r'(\s*[:=]\s*\[?\s*)(-?\d+)', text))
        if not hits:
            return text_number(data, name, rnd)
        hit = rnd.choice(hits)
        return (text[:hit.start(3)] + str(weird) + text[hit.end(3):]).encode()
    return overwrite_int(data, name, rnd)


BINARY: tuple[Mutator, ...] = (flip_bytes, truncate, overwrite_int, splice, corrupt_string)
TEXT: tuple[Mutator, ...] = (text_number, text_line, truncate, splice, corrupt_string)


def mutators_for(name: str, *, structural: bool = False) -> tuple[Mutator, ...]:
    """Return the mutators that make sense for a file named ``name``; ``structural`` gives the
    round-three set only (zip structure, wire-level protobuf swaps, cycles, huge dims)."""
    if structural:
        if name.endswith((".pt", ".pt2", ".keras")):
            return (zip_structure,)
        if name.endswith(".onnx"):
            return (proto_swap, graph_cycle, huge_dims)
        if name.endswith((".caffemodel", ".pdmodel", "saved_model.pb", ".tflite")):
            return (proto_swap,) if not name.endswith(".tflite") else (overwrite_int, splice)
        if name.endswith((".cfg", ".prototxt")):
            return (graph_cycle, huge_dims)
        if name.endswith(".json"):
            return (huge_dims, json_tree)
        return (overwrite_int, truncate)
    if name.endswith(".onnx"):
        return (onnx_graph, onnx_graph, proto_field, proto_field, *BINARY)
    if name.endswith((".caffemodel", ".pdmodel", "saved_model.pb")):
        return (proto_field, proto_field, *BINARY)
    if name.endswith(".json"):
        return (json_tree, json_tree, *TEXT)
    if name.endswith((".cfg", ".prototxt")):
        return TEXT
    if name.endswith((".pt", ".pt2")):
        return (zip_member, zip_member, truncate, flip_bytes)
    return BINARY


def mutate(case: Case, file: str, mutator: Mutator, rnd: random.Random) -> None:
    """Apply ``mutator`` to ``file`` of ``case`` and record the step."""
    case.contents[file] = mutator(case.contents[file], file, rnd)
    case.steps.append(f"{mutator.__name__}({file})")


# ---------------------------------------------------------------------------------------------
# Running a case
# ---------------------------------------------------------------------------------------------
def _vm_size() -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(argv: list[str], out: Path, err: Path) -> None:  # never returns
    code = 99
    try:
        limit = _vm_size() + MEMORY_HEADROOM
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd, path in ((1, out), (2, err)):  # the server's stdout is its reply pipe: keep it clean
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        from convert.cli import main

        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc(file=sys.stderr)
        code = 99
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def write_case(case: Case, folder: Path) -> list[str]:
    """Write the case's files into ``folder``; return the command line's input paths."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.contents.items():
        path = folder / name
        if "/" in name:  # a SavedModel's variables/ ...
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return [str(folder / f) for f in case.seed.files]


def run_case(case: Case, work: Path, timeout: float = TIMEOUT_S) -> Outcome:
    """Run the case through the CLI in a child of the fork server and classify the result.

    The children are forked by a separate server process that has imported the frameworks but
    never run them: forking the test process itself, after other tests have run torch (and
    started its thread pools), gives children that deadlock.
    """
    if work.exists():
        shutil.rmtree(work)
    inputs = write_case(case, work / "in")
    outdir = work / "out"
    outdir.mkdir()
    argv = [case.seed.route, *inputs, "-o", str(outdir) + "/", "--no-check", "-q"]
    out, err = work / "stdout.txt", work / "stderr.txt"
    preload([case.seed])
    assert _SERVER is not None and _SERVER.stdin is not None and _SERVER.stdout is not None
    _SERVER.stdin.write(json.dumps({"argv": argv, "out": str(out), "err": str(err), "timeout": timeout}) + "\n")
    _SERVER.stdin.flush()
    reply = _SERVER.stdout.readline()
    if not reply:
        raise RuntimeError("the fuzz fork server died")
    status = json.loads(reply)
    stderr = _read(err)
    if status["kind"] == "hang":
        return Outcome("hang", None, stderr, f"still running after {timeout:.0f} s")
    if status["kind"] == "signal":
        return Outcome("crash", None, stderr, f"killed by signal {status['signal']}")
    return _classify(int(status["code"]), stderr, outdir)


def _fork_run(argv: list[str], out: Path, err: Path, timeout: float) -> dict[str, object]:
    pid = os.fork()
    if pid == 0:
        _child(argv, out, err)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return {"kind": "signal", "signal": os.WTERMSIG(status)}
            return {"kind": "exit", "code": os.WEXITSTATUS(status)}
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return {"kind": "hang"}


def serve(routes: list[str]) -> None:
    """The fork server: import once, then run one case per request line (JSON in, JSON out)."""
    _import_for(routes)
    for line in sys.stdin:
        req = json.loads(line)
        reply = _fork_run(req["argv"], Path(req["out"]), Path(req["err"]), float(req["timeout"]))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _classify(code: int, stderr: str, outdir: Path) -> Outcome:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("convert: error:")]
    if "Traceback" in stderr:
        return Outcome("crash", code, stderr, "traceback")
    if code == 0:
        return Outcome("success", code, stderr)
    if code == 2:
        left = sorted(p.name for p in outdir.rglob("*"))
        if left:
            return Outcome("crash", code, stderr, f"exit 2 but left {left} at the output path")
        if len(errors) != 1:
            return Outcome("crash", code, stderr, f"exit 2 with {len(errors)} error lines")
        return Outcome("clean", code, stderr)
    first = errors[0] if errors else (stderr.strip().splitlines() or [""])[-1]
    return Outcome("crash", code, stderr, f"exit {code}: {first[:300]}")


def signature(why: str) -> str:
    """The crash class of an outcome: its reason with names, numbers and paths blurred."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'*'", why)
    text = re.sub(r"/\S+", "PATH", text)
    return re.sub(r"\d+", "N", text)[:160]


def save_case(case: Case, outcome: Outcome, root: Path, per_class: int = 3) -> Path | None:
    """Store a crashing case as ``root/<seed>-<hash>/`` (its files and ``case.json``) for replay.

    At most ``per_class`` cases per seed and crash class are kept; returns None for the others.
    """
    found = f"{outcome.kind}: {outcome.why}"
    if root.is_dir():
        same = [p for p in root.glob(f"{case.seed.name}-*/case.json")
                if signature(json.loads(p.read_text()).get("found", "")) == signature(found)]
        if len(same) >= per_class:
            return None
    digest = hashlib.sha1()
    for name in sorted(case.contents):
        digest.update(name.encode() + b"\0" + case.contents[name])
    folder = root / f"{case.seed.name}-{digest.hexdigest()[:10]}"
    write_case(case, folder)
    meta = {"route": case.seed.route, "files": list(case.seed.files), "seed": case.seed.name,
            "steps": case.steps, "found": found}
    (folder / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    return folder


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    serve(sys.argv[2:])
