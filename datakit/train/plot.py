"""Loss curve as a PNG, drawn with numpy and encoded with zlib + struct (no matplotlib dependency).

The picture is deliberately plain: axes, a train-loss line, eval-loss markers, min/max tick labels
in a 3x5 pixel font. It exists so a run directory is self-explanatory at a glance (and so the smoke
ferry can attach it to a report) without pulling a plotting stack into a training dependency set.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
import zlib
from collections.abc import Sequence

import numpy as np

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GREY = (225, 225, 225)
BLUE = (31, 119, 180)
RED = (214, 39, 40)

# 3x5 glyphs, rows top to bottom; enough for numbers and the few labels we draw.
_GLYPHS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "-": "000000111000000",
    "+": "000010111010000", "E": "111100110100111", "A": "010101111101101", "I": "111010010010111",
    "L": "100100100100111", "N": "110101101101101", "O": "010101101101010", "P": "110101110100100",
    "R": "110101110101101", "S": "011100010001110", "T": "111010010010010", "V": "101101101101010",
    " ": "000000000000000",
}


def png_bytes(rgb: np.ndarray) -> bytes:
    """Encode an (H, W, 3) uint8 image as a PNG (8-bit truecolor, filter 0 on every row)."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"expected (H, W, 3) uint8 image, got {rgb.dtype}{list(rgb.shape)}")
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


class _Canvas:
    def __init__(self, width: int, height: int):
        self.img = np.full((height, width, 3), 255, np.uint8)
        self.h, self.w = height, width

    def rect(self, x0: int, y0: int, x1: int, y1: int, color) -> None:
        x0, x1 = sorted((max(0, x0), min(self.w - 1, x1)))
        y0, y1 = sorted((max(0, y0), min(self.h - 1, y1)))
        self.img[y0 : y1 + 1, x0 : x1 + 1] = color

    def line(self, x0: float, y0: float, x1: float, y1: float, color, thick: int = 1) -> None:
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        xs = np.rint(np.linspace(x0, x1, n)).astype(int)
        ys = np.rint(np.linspace(y0, y1, n)).astype(int)
        for dx in range(thick):
            for dy in range(thick):
                xx, yy = xs + dx - thick // 2, ys + dy - thick // 2
                ok = (xx >= 0) & (xx < self.w) & (yy >= 0) & (yy < self.h)
                self.img[yy[ok], xx[ok]] = color

    def text(self, x: int, y: int, s: str, color=BLACK, scale: int = 2) -> None:
        for i, ch in enumerate(s.upper()):
            glyph = _GLYPHS.get(ch, _GLYPHS[" "])
            for r in range(5):
                for c in range(3):
                    if glyph[r * 3 + c] == "1":
                        gx, gy = x + (i * 4 + c) * scale, y + r * scale
                        self.rect(gx, gy, gx + scale - 1, gy + scale - 1, color)


def _fmt(v: float) -> str:
    if v == 0 or not math.isfinite(v):
        return "0"
    if 1e-2 <= abs(v) < 1e5:
        return f"{v:.3g}" if abs(v) < 1000 else str(int(round(v)))
    return f"{v:.2e}".replace("e+0", "e").replace("e-0", "e-")


def render_loss_plot(
    train: Sequence[tuple[int, float]],
    evals: Sequence[tuple[int, float]] = (),
    width: int = 640,
    height: int = 400,
) -> np.ndarray:
    """(step, loss) series -> RGB image. Non-finite points are left out (they are skipped steps)."""
    train = [(s, v) for s, v in train if math.isfinite(v)]
    evals = [(s, v) for s, v in evals if math.isfinite(v)]
    cv = _Canvas(width, height)
    left, right, top, bottom = 70, width - 20, 40, height - 40
    pts = train + evals
    if pts:
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        xmin, xmax = min(xs), max(xs)
        ymin, ymax = min(ys), max(ys)
    else:
        xmin, xmax, ymin, ymax = 0, 1, 0.0, 1.0
    if xmax == xmin:
        xmax = xmin + 1
    pad = (ymax - ymin) * 0.05 or 0.5
    ymin, ymax = ymin - pad, ymax + pad

    def px(step: float) -> float:
        return left + (step - xmin) / (xmax - xmin) * (right - left)

    def py(v: float) -> float:
        return bottom - (v - ymin) / (ymax - ymin) * (bottom - top)

    for i in range(5):  # horizontal grid + y labels
        v = ymin + (ymax - ymin) * i / 4
        y = int(round(py(v)))
        cv.line(left, y, right, y, GREY)
        cv.text(4, y - 5, _fmt(v))
    cv.line(left, top, left, bottom, BLACK)
    cv.line(left, bottom, right, bottom, BLACK)
    for s in (xmin, (xmin + xmax) // 2, xmax):
        x = int(round(px(s)))
        cv.line(x, bottom, x, bottom + 5, BLACK)
        label = str(int(s))
        cv.text(x - len(label) * 4, bottom + 9, label)
    cv.text((left + right) // 2 - 16, height - 14, "STEP")
    for (s0, v0), (s1, v1) in zip(train, train[1:]):
        cv.line(px(s0), py(v0), px(s1), py(v1), BLUE, thick=2)
    if len(train) == 1:
        x, y = int(px(train[0][0])), int(py(train[0][1]))
        cv.rect(x - 2, y - 2, x + 2, y + 2, BLUE)
    for s, v in evals:
        x, y = int(round(px(s))), int(round(py(v)))
        cv.rect(x - 3, y - 3, x + 3, y + 3, RED)
    cv.rect(left + 10, 12, left + 30, 15, BLUE)
    cv.text(left + 36, 9, "TRAIN LOSS")
    cv.rect(left + 140, 10, left + 146, 16, RED)
    cv.text(left + 152, 9, "EVAL LOSS")
    return cv.img


def write_loss_plot(
    path: str, train: Sequence[tuple[int, float]], evals: Sequence[tuple[int, float]] = ()
) -> str:
    """Render and write atomically (temp + rename)."""
    data = png_bytes(render_loss_plot(train, evals))
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".loss.", suffix=".png.tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
