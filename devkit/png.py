"""Read the pixels of a PNG (8-bit greyscale/RGB/RGBA, not interlaced: what Chromium's
screenshots are), without an imaging library, to tell a rendered page from a blank one."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}  # colour type -> samples per pixel


@dataclass(frozen=True)
class Image:
    width: int
    height: int
    channels: int
    rows: list[bytes]  # unfiltered scanlines

    def pixel(self, x: int, y: int) -> tuple[int, ...]:
        start = x * self.channels
        return tuple(self.rows[y][start : start + self.channels])

    def colours(self) -> set[tuple[int, ...]]:
        return {self.pixel(x, y) for y in range(self.height) for x in range(self.width)}

    def luminance_variance(self) -> float:
        """Variance of (R+G+B)/3 (or grey) over every pixel: 0 for a blank page."""
        n = 0
        total = 0.0
        squares = 0.0
        for row in self.rows:
            for x in range(self.width):
                px = row[x * self.channels : (x + 1) * self.channels]
                value = sum(px[:3]) / 3 if self.channels >= 3 else float(px[0])
                total += value
                squares += value * value
                n += 1
        mean = total / n
        return squares / n - mean * mean


def read_png(path: Path) -> Image:
    data = path.read_bytes()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path} is not a PNG")
    pos = len(SIGNATURE)
    header: tuple[int, ...] = ()
    chunk_kind: bytes
    compressed = b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        chunk_kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if chunk_kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif chunk_kind == b"IDAT":
            compressed += body
        elif chunk_kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour type {colour}, interlace {interlace})")
    channels = CHANNELS[colour]
    raw = zlib.decompress(compressed)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        offset = y * (stride + 1)
        kind = raw[offset]
        line = bytearray(raw[offset + 1 : offset + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], (previous[i - channels] if i >= channels else 0)
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                line[i] = (line[i] + _paeth(left, up, corner)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return Image(width, height, channels, rows)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c
