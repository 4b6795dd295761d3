"""Snapshots as bytes for the deployment's shared cache (:mod:`slurmtower.live.sharing`).

What crosses Redis is read by every process of a deployment, and whoever can write a key
there is not trusted with code execution: no pickle. A blob is::

    b"STSNAP1\\n" | header length (uint32 LE) | header (JSON) | sections ...

The header names the kind, the row count, the sections' lengths and, per column, its
distinct values (JSON); the sections are raw little-endian arrays and bytes:

* ``JobTable`` / ``NodeTable``: the keys (job ids as int64; node names as a JSON list), the
  rows' JSON fragments one per line (compact JSON holds no raw newline; optionally
  zlib-compressed), and for each column an array of indexes into its distinct values
  (uint8/16/32, the smallest that fits). A set column (a job's nodes, a node's states and
  partitions) lists its distinct sets, each comma-joined. The job table's ``line`` column (the
  squeue lines' digests, :func:`~slurmtower.slurm.adapters.line_hash`: the same in every
  process and run) is a last section of uint64 when every row has one (``"lines": true``),
  so that a refresh worker can go on from a table kept or shared (it parses only the lines
  that changed since); without it the column decodes as ``None``.
* ``partitions`` / ``stats``: the pydantic JSON of the value, validated back into the models.

Decoding checks every length, offset and index (a malformed blob raises
:class:`ValueError`, never builds a half table); the fragments are served as they are, so a
writer of the Redis could falsify what is shown, not run anything.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from pydantic import TypeAdapter, ValidationError

from slurmtower.models import ControllerStats, Partition
from slurmtower.models.table import JobTable, NodeTable

__all__ = ["MAGIC", "blob_digest", "decode_snapshot", "encode_snapshot"]

MAGIC = b"STSNAP1\n"
_HEAD = struct.Struct("<I")
_LITTLE = sys.byteorder == "little"
#: Columns of a table that are not columns of distinct values (the job table's line digests: a
#: section of their own).
_LOCAL_COLUMNS: dict[type[JobTable | NodeTable], frozenset[str]] = {JobTable: frozenset({"line"}),
                                                                     NodeTable: frozenset()}
#: resource -> what its blob holds: a table class, or the models its pydantic JSON validates into.
_KINDS: dict[str, type[JobTable | NodeTable] | TypeAdapter[Any]] = {
    "jobs": JobTable,
    "nodes": NodeTable,
    "partitions": TypeAdapter(list[Partition]),
    "stats": TypeAdapter(ControllerStats),
}
_SCALARS = (str, int, float, type(None))


def _packed(typecode: str, values: Sequence[int] | array[int]) -> bytes:
    arr = values if isinstance(values, array) else array(typecode, values)
    if not _LITTLE:
        arr = array(typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _unpacked(typecode: str, data: bytes | memoryview, count: int, what: str) -> array[int]:
    arr: array[int] = array(typecode)
    if len(data) != count * arr.itemsize:
        raise ValueError(f"{what}: {len(data)} bytes for {count} values of {arr.itemsize}")
    arr.frombytes(data)
    if not _LITTLE:
        arr.byteswap()
    return arr


def blob_digest(blob: bytes) -> str:
    """The content address of a blob (BLAKE2b, 96 bits, hex): equal values, equal names."""
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


def _index_code(distinct: int) -> str:
    return "B" if distinct <= 0xFF else "H" if distinct <= 0xFFFF else "I"


def encode_snapshot(resource: str, value: Any, *, compress: int = 0) -> bytes:
    """The blob of ``value``, the snapshot of ``resource`` (``jobs``: a :class:`JobTable`,
    ``nodes``: a :class:`NodeTable`, ``partitions``: a list of :class:`Partition`, ``stats``:
    :class:`ControllerStats`).

    ``compress`` is the zlib level of a table's fragments (0: stored as they are).

    Raises:
        ValueError: ``resource`` has no codec, or ``value`` is not what it holds.
    """
    kind = _KINDS.get(resource)
    if kind is None:
        raise ValueError(f"no codec for resource {resource!r}")
    if isinstance(kind, type):
        if type(value) is not kind:
            raise ValueError(f"{resource} holds a {kind.__name__}, not a {type(value).__name__}")
        return _encode_table(value, compress)
    body = kind.dump_json(value)
    return _assemble({"kind": resource, "sections": [len(body)]}, [body])


def _assemble(header: dict[str, Any], sections: list[bytes]) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([MAGIC, _HEAD.pack(len(head)), head, *sections])


def _encode_table(table: JobTable | NodeTable, compress: int) -> bytes:
    cls = type(table)
    rows = len(table)
    if cls is JobTable:
        keys_kind, keys = "int64", _packed("q", table.keys)
    else:
        keys_kind, keys = "json", json.dumps(list(table.keys), separators=(",", ":")).encode()
    # Compact JSON never holds a raw newline (JSON escapes them in strings): one line per row,
    # split back at C speed.
    fragments = b"\n".join(table.fragments)
    if fragments.count(b"\n") != max(rows - 1, 0) or not all(table.fragments):
        raise ValueError("a row's JSON holds a newline or is empty")
    if compress:
        fragments = zlib.compress(fragments, compress)
    columns: list[dict[str, Any]] = []
    sections = [keys, fragments]
    for name in cls._COLUMNS:
        if name in _LOCAL_COLUMNS[cls]:
            continue
        codes: dict[Any, int] = {}
        # A dict keeps first-seen order: the distinct values and each row's code in one pass.
        idx = [codes.setdefault(v, len(codes)) for v in table.columns[name]]
        if name in cls._SET_COLUMNS:
            # Node, state and partition names hold no comma (Slurm's list separator).
            joined = [",".join(sorted(members)) for members in codes]
            if any("," in m for members in codes for m in members):
                raise ValueError(f"a member of column {name} holds a comma")
            column: dict[str, Any] = {"name": name, "sets": joined}
        else:
            column = {"name": name, "values": list(codes)}
        code = _index_code(len(codes))
        column["index"] = code
        columns.append(column)
        sections.append(_packed(code, idx))
    lines = False
    if cls is JobTable:
        digests = table.columns["line"]
        if rows and all(type(d) is int and 0 <= d < 2**64 for d in digests):
            sections.append(_packed("Q", digests))
            lines = True
    header = {"kind": cls.__name__, "rows": rows, "keys": keys_kind, "compressed": bool(compress),
              "columns": columns, "lines": lines, "sections": [len(s) for s in sections]}
    return _assemble(header, sections)


def decode_snapshot(resource: str, blob: bytes) -> Any:
    """The snapshot of ``resource`` a blob of :func:`encode_snapshot` holds.

    Raises:
        ValueError: the blob is malformed, truncated or of another resource.
    """
    kind = _KINDS.get(resource)
    if kind is None:
        raise ValueError(f"no codec for resource {resource!r}")
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + _HEAD.size:
        raise ValueError("not a slurmtower snapshot blob")
    (head_len,) = _HEAD.unpack_from(blob, len(MAGIC))
    start = len(MAGIC) + _HEAD.size
    try:
        header = json.loads(blob[start:start + head_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"snapshot header: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError("snapshot header is not an object")
    lengths = header.get("sections")
    if not isinstance(lengths, list) or not all(isinstance(n, int) and n >= 0 for n in lengths):
        raise ValueError("snapshot header: bad section lengths")
    if start + head_len + sum(lengths) != len(blob):
        raise ValueError("snapshot blob: sections do not add up to its length")
    view = memoryview(blob)
    sections: list[memoryview] = []
    at = start + head_len
    for n in lengths:
        sections.append(view[at:at + n])
        at += n
    found = header.get("kind")
    expected = kind.__name__ if isinstance(kind, type) else resource
    if found != expected:
        raise ValueError(f"snapshot blob of kind {str(found)[:40]!r}, expected {expected!r}")
    if isinstance(kind, type):
        return _decode_table(kind, header, sections)
    if len(sections) != 1:
        raise ValueError("snapshot blob: one section expected")
    try:
        return kind.validate_json(bytes(sections[0]))
    except ValidationError as exc:
        raise ValueError(f"snapshot of {resource}: {exc.error_count()} invalid fields") from None


def _decode_table(cls: type[JobTable | NodeTable], header: dict[str, Any],
                  sections: list[memoryview]) -> JobTable | NodeTable:
    rows = header.get("rows")
    columns = header.get("columns")
    wanted = [c for c in cls._COLUMNS if c not in _LOCAL_COLUMNS[cls]]
    lines = header.get("lines", False) is True and cls is JobTable
    if not isinstance(rows, int) or rows < 0 or not isinstance(columns, list) \
            or len(sections) != 2 + len(columns) + lines:
        raise ValueError("snapshot table: bad header")
    if [c.get("name") if isinstance(c, dict) else None for c in columns] != wanted:
        raise ValueError(f"snapshot table: columns must be {wanted}")
    if header.get("keys") == "int64" and cls is JobTable:
        keys: list[Any] = _unpacked("q", sections[0], rows, "keys").tolist()
        ordered = keys == sorted(keys)  # timsort: one C pass over sorted input
    elif header.get("keys") == "json" and cls is NodeTable:
        keys = json.loads(bytes(sections[0]))
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError("snapshot table: bad keys")
        ordered = True  # natural order is the table's promise; a wrong one misorders pages only
    else:
        raise ValueError("snapshot table: bad key kind")
    if len(keys) != rows or not ordered or len(set(keys)) != rows:
        raise ValueError("snapshot table: keys not unique and in order")
    data = bytes(sections[1])
    if header.get("compressed"):
        try:
            data = zlib.decompress(data)
        except zlib.error as exc:
            raise ValueError(f"snapshot table: fragments do not inflate: {exc}") from None
    fragments = data.split(b"\n") if rows else []
    if len(fragments) != rows or (rows and not all(fragments)):
        raise ValueError("snapshot table: rows and JSON lines do not match")
    values: dict[str, Sequence[Any]] = {}
    for column, section in zip(columns, sections[2:2 + len(columns)], strict=True):
        values[column["name"]] = _decode_column(cls, column, section, rows)
    for name in _LOCAL_COLUMNS[cls]:
        values[name] = (None,) * rows
    if lines:
        values["line"] = _unpacked("Q", sections[-1], rows, "lines").tolist()
    return cls(keys, fragments, values)


def _decode_column(cls: type[JobTable | NodeTable], column: dict[str, Any], section: memoryview,
                   rows: int) -> Sequence[Any]:
    name = column["name"]
    if name in cls._SET_COLUMNS:
        sets = column.get("sets")
        if not isinstance(sets, list) or not all(isinstance(s, str) for s in sets):
            raise ValueError(f"snapshot table: bad sets of column {name}")
        distinct: list[Any] = [frozenset(s.split(",")) if s else frozenset() for s in sets]
    else:
        found = column.get("values")
        if not isinstance(found, list) or not all(isinstance(v, _SCALARS) for v in found):
            raise ValueError(f"snapshot table: bad values of column {name}")
        distinct = found
    code = column.get("index")
    if code not in ("B", "H", "I"):
        raise ValueError(f"snapshot table: bad index of column {name}")
    idx = _unpacked(code, section, rows, f"column {name}")
    if rows == 0:
        return ()
    if max(idx) >= len(distinct):
        raise ValueError(f"snapshot table: column {name} points past its values")
    if rows == 1:
        return (distinct[idx[0]],)
    picked: tuple[Any, ...] = itemgetter(*idx)(distinct)  # one C loop
    return picked
