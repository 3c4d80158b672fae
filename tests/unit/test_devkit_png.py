"""devkit.png: the PNG reader the report's screenshot test uses, on PNGs written here with
every scanline filter (a reader that ignores one gets the pixels wrong)."""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

import pytest

from devkit.png import _paeth, read_png


def predictor(kind: int, left: int, up: int, corner: int) -> int:
    return {0: 0, 1: left, 2: up, 3: (left + up) // 2, 4: _paeth(left, up, corner)}[kind]


def write_png(path: Path, rows: list[bytes], width: int, channels: int) -> None:
    colour = {1: 0, 3: 2, 4: 6}[channels]
    raw = bytearray()
    previous = bytes(width * channels)
    for y, row in enumerate(rows):
        kind = y % 5
        raw.append(kind)
        for i, value in enumerate(row):
            left = row[i - channels] if i >= channels else 0
            corner = previous[i - channels] if i >= channels else 0
            raw.append((value - predictor(kind, left, previous[i], corner)) & 0xFF)
        previous = row

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, len(rows), 8, colour, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(bytes(raw)))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_every_filter_decodes_to_the_pixels_written(tmp_path: Path, channels: int) -> None:
    rng = random.Random(channels)
    width, height = 7, 11
    rows = [bytes(rng.randrange(256) for _ in range(width * channels)) for _ in range(height)]
    write_png(tmp_path / "x.png", rows, width, channels)
    image = read_png(tmp_path / "x.png")
    assert (image.width, image.height, image.channels) == (width, height, channels)
    assert image.rows == rows
    assert image.pixel(2, 3) == tuple(rows[3][2 * channels : 3 * channels])


def test_a_blank_image_has_no_variance_and_a_drawn_one_has(tmp_path: Path) -> None:
    white = [bytes([255] * 30) for _ in range(10)]
    write_png(tmp_path / "blank.png", white, 10, 3)
    assert read_png(tmp_path / "blank.png").luminance_variance() == 0
    assert read_png(tmp_path / "blank.png").colours() == {(255, 255, 255)}
    drawn = white[:5] + [bytes([0, 128, 0] * 10)] + white[6:]
    write_png(tmp_path / "drawn.png", drawn, 10, 3)
    assert read_png(tmp_path / "drawn.png").luminance_variance() > 100


def test_not_a_png_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.png").write_bytes(b"GIF89a")
    with pytest.raises(ValueError, match="not a PNG"):
        read_png(tmp_path / "x.png")
