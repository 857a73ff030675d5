"""Deletion vectors in the exact byte format of PROTOCOL.md (accepted by delta-rs).

A deletion vector is a RoaringBitmapArray of deleted row positions: the magic
number 1681511377 (little-endian int32) followed by the "portable" 64-bit roaring
serialisation, which is what ``pyroaring.BitMap64.serialize`` writes. It is stored
inline in the log (Z85 text, storage type ``i``) or in ``deletion_vector_<uuid>.bin``
files (storage type ``u``) framed as: version byte 1, then per DV a big-endian int32
size, the payload and a big-endian CRC-32 of the payload.
"""

from __future__ import annotations

import functools
import os
import random
import struct
import uuid
import zlib
from typing import Iterable, Mapping
from urllib.parse import unquote, urlparse

from pyroaring import BitMap64

from isolde.errors import ExecutionError

from . import table_files
from .actions import DeletionVectorDescriptor
from .store import storage_error, writing

RBA_MAGIC = 1681511377
FORMAT_VERSION = 1

# --------------------------------------------------------------------------- Z85

_Z85_CHARS = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85_CHARS)}


def z85_encode(data: bytes) -> str:
    """ZeroMQ Z85; the input length must be a multiple of 4."""
    if len(data) % 4:
        raise ValueError("Z85 input length must be a multiple of 4")
    out = bytearray()
    for (word,) in struct.iter_unpack(">I", data):
        chunk = bytearray(5)
        for i in range(4, -1, -1):
            word, rem = divmod(word, 85)
            chunk[i] = _Z85_CHARS[rem]
        out += chunk
    return out.decode("ascii")


def z85_decode(text: str) -> bytes:
    raw = text.encode("ascii")
    if len(raw) % 5:
        raise ValueError("Z85 text length must be a multiple of 5")
    out = bytearray()
    for i in range(0, len(raw), 5):
        word = 0
        for c in raw[i : i + 5]:
            word = word * 85 + _Z85_INDEX[c]
        out += struct.pack(">I", word)
    return bytes(out)


# --------------------------------------------------------------------------- bitmap payload


def serialize_bitmap(rows: Iterable[int] | BitMap64) -> bytes:
    """RoaringBitmapArray bytes (magic + portable 64-bit roaring) for these row positions."""
    bitmap = rows if isinstance(rows, BitMap64) else BitMap64(rows)
    return struct.pack("<I", RBA_MAGIC) + bitmap.serialize()


def deserialize_bitmap(payload: bytes) -> BitMap64:
    (magic,) = struct.unpack_from("<I", payload, 0)
    if magic != RBA_MAGIC:
        raise ValueError(f"not a RoaringBitmapArray deletion vector (magic {magic})")
    return BitMap64.deserialize(payload[4:])


# --------------------------------------------------------------------------- descriptors


def inline_descriptor(rows: Iterable[int] | BitMap64) -> DeletionVectorDescriptor:
    """A DV stored in the log itself: fine for a handful of positions."""
    bitmap = rows if isinstance(rows, BitMap64) else BitMap64(rows)
    payload = serialize_bitmap(bitmap)
    padded = payload + b"\x00" * (-len(payload) % 4)
    return DeletionVectorDescriptor("i", z85_encode(padded), len(payload), len(bitmap))


def _table_root(table_path: str) -> str:
    if table_path.startswith("file:"):
        return unquote(urlparse(table_path).path)
    return table_path


@functools.lru_cache(maxsize=65536)
def _relative_dv_path(encoded: str) -> str:
    """A 'u' descriptor's ``<prefix>/deletion_vector_<uuid>.bin`` (the uuid z85-decoded once per
    descriptor: a statement over 1,220 files with vectors asked 4,900 times)."""
    prefix, uuid_text = encoded[:-20], encoded[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(uuid_text))}.bin"
    return os.path.join(prefix, name) if prefix else name


def dv_file_path(table_path: str, descriptor: DeletionVectorDescriptor) -> str:
    """The local path of a file-backed DV ('u' relative uuid or 'p' absolute path)."""
    if descriptor.storage_type == "u":
        relative = _relative_dv_path(descriptor.path_or_inline_dv)
        return table_files.join(_table_root(table_path), relative)
    if descriptor.storage_type == "p":
        return _table_root(descriptor.path_or_inline_dv)
    raise ValueError(f"deletion vector storage type {descriptor.storage_type!r} has no file")


class DeletionVectorError(ExecutionError, ValueError):
    """A deletion vector that cannot be read: its file is missing, or its size, checksum or
    cardinality disagree with the log. ``in_context`` names the table, version and data file."""

    def __init__(self, problem: str, dv_path: str | None, *, error_class: str, sqlstate: str = "XXKDS"):
        self.problem = problem  # a predicate: "does not exist", "fails its CRC-32 checksum", ...
        self.dv_path = dv_path
        self.table_path = self.data_file = self.version = None
        super().__init__(f"The {self._vector()} {problem}.", error_class=error_class, sqlstate=sqlstate)

    def _vector(self) -> str:
        return f"deletion vector file {self.dv_path}" if self.dv_path else "inline deletion vector"

    def in_context(self, table_path: str, data_file: str, version: int | None = None) -> "DeletionVectorError":
        """The same error, its message naming the table, the version and the data file."""
        out = DeletionVectorError(self.problem, self.dv_path, error_class=self.error_class, sqlstate=self.sqlstate)
        subject = f"version {version} of table {table_path}" if version is not None and version >= 0 \
            else f"table {table_path}"
        message = f"Cannot read {subject}: the {self._vector()} of data file {data_file} {self.problem}."
        if self.error_class == "DELTA_FILE_NOT_FOUND_DETAILED":
            message += " Was it deleted outside Delta, by hand or by a VACUUM with too short a retention?"
        out.message, out.args = message, (message,)
        out.table_path, out.data_file, out.version = table_path, data_file, version
        return out


def read_deletion_vector(table_path: str, descriptor: DeletionVectorDescriptor) -> BitMap64:
    """The deleted row positions a descriptor points to; checks size, CRC and cardinality
    (DeletionVectorError, also a ValueError, when any disagrees or the file is missing)."""
    path = None
    if descriptor.is_inline:
        payload = z85_decode(descriptor.path_or_inline_dv)[: descriptor.size_in_bytes]
    else:
        offset = descriptor.offset or 1
        path = dv_file_path(table_path, descriptor)
        try:
            with table_files.files_for(path).open_input(path) as fh:
                fh.seek(offset)
                head = fh.read(4)
                if len(head) < 4:
                    raise DeletionVectorError(f"ends before its offset {offset}", path,
                                              error_class="DELTA_DELETION_VECTOR_SIZE_MISMATCH")
                (size,) = struct.unpack(">i", head)
                if size != descriptor.size_in_bytes:
                    raise DeletionVectorError(f"has size {size} where the log says {descriptor.size_in_bytes}",
                                              path, error_class="DELTA_DELETION_VECTOR_SIZE_MISMATCH")
                payload = fh.read(size)
                tail = fh.read(4)
        except FileNotFoundError as e:
            raise DeletionVectorError("does not exist", path, error_class="DELTA_FILE_NOT_FOUND_DETAILED",
                                      sqlstate="42K03") from e
        if len(tail) < 4 or zlib.crc32(payload) & 0xFFFFFFFF != struct.unpack(">I", tail)[0]:
            raise DeletionVectorError("fails its CRC-32 checksum", path,
                                      error_class="DELTA_DELETION_VECTOR_CHECKSUM_MISMATCH")
    try:
        bitmap = deserialize_bitmap(payload)
    except ValueError as e:
        raise DeletionVectorError(f"is not a RoaringBitmapArray ({e})", path,
                                  error_class="DELTA_DELETION_VECTOR_INVALID_ROW_INDEX") from e
    if len(bitmap) != descriptor.cardinality:
        raise DeletionVectorError(f"holds {len(bitmap)} rows where the log says {descriptor.cardinality}", path,
                                  error_class="DELTA_DELETION_VECTOR_CARDINALITY_MISMATCH")
    return bitmap


def read_deleted_rows(table_path: str, descriptor: DeletionVectorDescriptor | None) -> set[int]:
    """Deleted row positions as a plain set (empty for no DV)."""
    return set() if descriptor is None else set(read_deletion_vector(table_path, descriptor))


def write_deletion_vectors(
    table_path: str,
    rows_by_key: Mapping[object, Iterable[int] | BitMap64],
    *,
    prefix_length: int = 0,
) -> dict[object, DeletionVectorDescriptor]:
    """Write several DVs into one new ``deletion_vector_<uuid>.bin`` and return a descriptor per key.

    Keys are whatever the caller uses to tell files apart (usually the data file path).
    ``prefix_length`` random characters place the file in a sub-folder, as Delta does
    to spread object-store keys.
    """
    file_uuid = uuid.uuid4()
    prefix = "".join(random.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(prefix_length))
    encoded = prefix + z85_encode(file_uuid.bytes)
    directory = table_files.join(_table_root(table_path), prefix) if prefix else _table_root(table_path)
    unchanged = f"No deletion vector was recorded: the table {_table_root(table_path)} is unchanged."
    if not table_files.is_remote(directory):  # (object stores have no folders to make)
        with writing(directory, what="the folder for deletion vector files", consequence=unchanged):
            os.makedirs(directory, exist_ok=True)
    path = table_files.join(directory, f"deletion_vector_{file_uuid}.bin")
    body = bytearray([FORMAT_VERSION])
    out: dict[object, DeletionVectorDescriptor] = {}
    for key, rows in rows_by_key.items():
        bitmap = rows if isinstance(rows, BitMap64) else BitMap64(rows)
        payload = serialize_bitmap(bitmap)
        offset = len(body)
        body += struct.pack(">i", len(payload)) + payload + struct.pack(">I", zlib.crc32(payload) & 0xFFFFFFFF)
        out[key] = DeletionVectorDescriptor("u", encoded, len(payload), len(bitmap), offset=offset)
    _write_new_file(path, bytes(body), unchanged)
    return out


def _write_new_file(path: str, body: bytes, consequence: str) -> None:
    """Create ``path`` with ``body``, fsynced. A write the file system refuses (disk full,
    permission denied) removes the partial file and raises StorageError naming it. On S3 one
    PUT (the name holds a fresh uuid: nobody else writes it)."""
    if table_files.is_remote(path):
        try:
            table_files.files_for(path).write_bytes(path, body)
        except OSError as e:
            raise storage_error(e, path, what="a deletion vector file", consequence=consequence) from e
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError as e:
        raise storage_error(e, path, what="a deletion vector file", consequence=consequence) from e
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException as e:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        if isinstance(e, OSError) and not isinstance(e, (FileExistsError, FileNotFoundError)):
            raise storage_error(e, path, what="a deletion vector file",
                                consequence=consequence + " The partial file was removed.") from e
        raise
    os.close(fd)


def write_deletion_vector(table_path: str, rows: Iterable[int] | BitMap64, *, inline: bool = False) -> DeletionVectorDescriptor:
    """One DV, inline in the log or in its own file."""
    if inline:
        return inline_descriptor(rows)
    return write_deletion_vectors(table_path, {0: rows})[0]


def union_deletion_vector(
    table_path: str, existing: DeletionVectorDescriptor | None, new_rows: Iterable[int] | BitMap64, *, inline: bool = False
) -> DeletionVectorDescriptor:
    """A DV holding the rows of ``existing`` plus ``new_rows`` (a file's DV only ever grows)."""
    bitmap = BitMap64() if existing is None else read_deletion_vector(table_path, existing)
    bitmap |= new_rows if isinstance(new_rows, BitMap64) else BitMap64(new_rows)
    return write_deletion_vector(table_path, bitmap, inline=inline)
