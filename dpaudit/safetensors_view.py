"""Chosen coordinates of the tensors in ``.safetensors`` files, read without torch and without loading a tensor.

The format (huggingface/safetensors, "Format"): 8 bytes, a little-endian u64 N; N bytes of a JSON header
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``; then the data, each tensor
little-endian and C-ordered at ``8 + N + begin``. The safetensors package itself reads whole tensors (its NumPy
side refuses bfloat16), and ``dpaudit check`` runs where torch is not installed: this reads the few values a
weight fingerprint needs (dpaudit/probe/fingerprint.py) through a memory map, with every header field checked
against the file's size first, so a damaged or hostile file is "unreadable", never a crash or a huge read. As the format
requires (and the safetensors package enforces at load), the tensors' byte ranges must tile the data with no hole
and no overlap: a header that points a million names at the same bytes is refused, not compared a million times.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpaudit.checks import counts

MAX_HEADER = 100 * 2 ** 20  # the safetensors package's own limit on the header
FLOATS = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "U16": 2,
         "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class Unreadable(ValueError):
    """A file that is not a well-formed safetensors file (the message says what is wrong)."""


@dataclass(frozen=True)
class Entry:
    """One tensor of a file: where its bytes lie and how to read them."""
    file: Path
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # the tensor's first byte in the file

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOATS

    def values(self, flat_index: np.ndarray, data: np.ndarray | None = None) -> np.ndarray:
        """The tensor's values at C-order flat indices ``flat_index``, as float64 (bfloat16 widened exactly);
        ``data``: the file's bytes already mapped (:func:`mapped`), so that many reads open the file once."""
        if not self.is_float:
            raise Unreadable(f"{self.name}: dtype {self.dtype} is not a float")
        size = SIZES[self.dtype]
        if data is None:
            data = mapped(self.file)
        where = self.start + np.asarray(flat_index, dtype=np.int64)[:, None] * size + np.arange(size)
        raw = np.ascontiguousarray(data[where]).reshape(-1)
        if self.dtype == "BF16":
            return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return raw.view(FLOATS[self.dtype]).astype(np.float64)


def mapped(f: Path) -> np.ndarray:
    """File ``f``'s bytes, memory-mapped read-only (nothing is read until indexed)."""
    return np.memmap(f, dtype=np.uint8, mode="r")


def entries(f: Path) -> list[Entry]:
    """Every tensor of safetensors file ``f``; :class:`Unreadable` naming the first defect of a damaged file."""
    try:
        size = f.stat().st_size
        with open(f, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise Unreadable("shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER or 8 + n > size:
                raise Unreadable(f"its header length {n:,} does not fit the file ({size:,} bytes)")
            header = json.loads(fh.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise Unreadable(f"cannot read its header ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise Unreadable("its header is not a JSON object")
    data = size - 8 - n
    out, spans = [], []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(t, dict):
            raise Unreadable(f"tensor {str(name)[:60]!r} is not described by an object")
        dtype, shape, offsets = t.get("dtype"), t.get("shape"), t.get("data_offsets")
        if not isinstance(dtype, str) or not counts(shape) or not counts(offsets) or len(offsets) != 2:
            raise Unreadable(f"tensor {str(name)[:60]!r} has no valid dtype, shape and data_offsets")
        begin, end = offsets
        if not begin <= end <= data:
            raise Unreadable(f"tensor {str(name)[:60]!r}: its data_offsets do not fit the file")
        spans.append((begin, end))
        if dtype not in SIZES:  # a dtype newer than this reader (F8_E8M0, F4, C64, ...): never a float it reads
            continue
        if end - begin != math.prod(shape) * SIZES[dtype]:
            raise Unreadable(f"tensor {str(name)[:60]!r}: its data_offsets do not match its shape")
        out.append(Entry(f, str(name), dtype, tuple(shape), 8 + n + begin))
    at = 0
    for begin, end in sorted(spans):  # the format: the tensors' bytes tile the data, no hole, no overlap
        if begin != at:
            raise Unreadable(f"its tensors' data_offsets {'overlap' if begin < at else 'leave a hole'} at byte {at:,} "
                             "(the format requires them to cover the data exactly)")
        at = end
    if at != data:
        raise Unreadable(f"its tensors' data_offsets cover {at:,} of its {data:,} data bytes")
    return out

