"""The static allocation problem: buffers with known lifetimes, one byte offset each, one arena.

A buffer is live over half-open time segments (usually one, [lower, upper); a tensor with several device
copies in a plan is one buffer with a segment per copy, so all copies share its one offset, as FORMATS'
`arena` allocation has one offset per tensor). Two buffers live at a common instant must not overlap in
[offset, offset + size). The peak of live bytes is a lower bound on any arena.

Files use MiniMalloc's CSV, `id,lower,upper,size[,offset]`, so results compare with MiniMalloc directly.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hybrid.errors import FormatError
from hybrid.units import MAX_BYTES


@dataclass(frozen=True)
class Buffer:
    """One allocation: `size` bytes at an offset that is a multiple of `alignment`, live on `segments`."""

    id: str
    lower: int
    upper: int
    size: int
    alignment: int = 1
    gaps: tuple[tuple[int, int], ...] = ()   # sub-intervals of [lower, upper) where the buffer is not live

    def segments(self) -> list[tuple[int, int]]:
        if not self.gaps:
            return [(self.lower, self.upper)]
        out: list[tuple[int, int]] = []
        t = self.lower
        for g0, g1 in sorted(self.gaps):
            if g0 > t:
                out.append((t, g0))
            t = max(t, g1)
        if t < self.upper:
            out.append((t, self.upper))
        return out


@dataclass
class Problem:
    """Buffers plus an optional capacity (the arena may not exceed it). Array views are built once."""

    buffers: list[Buffer]
    capacity: int | None = None
    _arrays: "Arrays | None" = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.buffers)

    @property
    def arrays(self) -> "Arrays":
        if self._arrays is None:
            self._arrays = Arrays.build(self.buffers)
        return self._arrays

    def peak_live(self) -> int:
        """The largest sum of sizes live at one instant (a lower bound on every arena)."""
        return self.arrays.peak_live()


@dataclass(frozen=True)
class Arrays:
    """Flat NumPy form: per buffer size/alignment; per segment (start, end, buffer), sorted by buffer."""

    size: np.ndarray
    align: np.ndarray
    seg_lo: np.ndarray
    seg_hi: np.ndarray
    seg_buf: np.ndarray
    seg_first: np.ndarray        # buffer b's segments are seg_first[b]:seg_first[b + 1]

    @staticmethod
    def build(buffers: list[Buffer]) -> "Arrays":
        lo: list[int] = []
        hi: list[int] = []
        sb: list[int] = []
        first = [0]
        for b, buf in enumerate(buffers):
            if buf.size < 0 or buf.alignment < 1:
                raise FormatError(f"buffer {buf.id!r}: size must be >= 0 and alignment >= 1")
            if buf.upper <= buf.lower:
                raise FormatError(f"buffer {buf.id!r}: lifetime [{buf.lower}, {buf.upper}) is empty; "
                                  "upper must exceed lower")
            for s, e in buf.segments():
                lo.append(s)
                hi.append(e)
                sb.append(b)
            first.append(len(lo))
        return Arrays(np.array([b.size for b in buffers], np.int64), np.array([b.alignment for b in buffers], np.int64),
                      np.array(lo, np.int64), np.array(hi, np.int64), np.array(sb, np.int64),
                      np.array(first, np.int64))

    def peak_live(self) -> int:
        if not len(self.seg_lo):
            return 0
        t = np.concatenate([self.seg_lo, self.seg_hi])
        d = np.concatenate([self.size[self.seg_buf], -self.size[self.seg_buf]])
        order = np.lexsort((d, t))          # ends (negative) before starts at one instant: half-open
        return int(max(0, np.cumsum(d[order]).max()))


_MAX_TIME = 2**62   # lifetimes are int64 instants


def read_csv(path: str | Path, alignment: int = 1) -> tuple[Problem, np.ndarray | None]:
    """MiniMalloc CSV -> (problem, offsets or None when the file has no `offset` column)."""
    p = Path(path)
    try:
        with p.open(newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise FormatError(f"{p}: cannot read ({e.strerror})") from None
    if not rows:
        raise FormatError(f"{p}: empty file; expected a header id,lower,upper,size[,offset]")
    head = [h.strip() for h in rows[0]]
    need = ["id", "lower", "upper", "size"]
    if any(k not in head for k in need):
        text = ",".join(head)
        if text.lstrip().startswith("{"):   # a JSON file, on one line (a plan, a graph): name it, not print it
            hint = ("a JSON file, not a MiniMalloc CSV; lay out a plan with --graph G --plan P"
                    if '"hybrid-plan/' in text else "a JSON file, not a MiniMalloc CSV")
            raise FormatError(f"{p}: {hint} (its header is id,lower,upper,size[,offset])")
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise FormatError(f"{p}: header {shown!r} lacks one of id,lower,upper,size")
    col = {k: head.index(k) for k in head}
    has_off = "offset" in col
    bufs: list[Buffer] = []
    offs: list[int] = []
    line_of: dict[str, int] = {}
    for ln, r in enumerate(rows[1:], start=2):
        if not r or all(not x.strip() for x in r):
            continue
        try:
            bid = r[col["id"]].strip()
            buf = Buffer(bid, int(r[col["lower"]]), int(r[col["upper"]]), int(r[col["size"]]), alignment)
            off = int(r[col["offset"]]) if has_off else 0
        except (ValueError, IndexError):
            raise FormatError(f"{p}: line {ln}: expected integers for lower, upper, size"
                              f"{', offset' if has_off else ''}, got {','.join(r)!r}") from None
        if bid in line_of:
            raise FormatError(f"{p}: line {ln}: buffer id {bid!r} appears twice (lines {line_of[bid]} and {ln}); "
                              "give every buffer its own id")
        line_of[bid] = ln
        if not all(abs(x) <= _MAX_TIME for x in (buf.lower, buf.upper)):
            raise FormatError(f"{p}: line {ln}: lower and upper must lie within +-{_MAX_TIME}, got {buf.lower}, "
                              f"{buf.upper}")
        if buf.upper <= buf.lower:   # as Arrays.build says it, with the file and line
            raise FormatError(f"{p}: line {ln}: buffer {bid!r}: lifetime [{buf.lower}, {buf.upper}) is empty; "
                              "upper must exceed lower")
        for name, x in (("size", buf.size), ("offset", off)):
            if not 0 <= x <= MAX_BYTES:
                raise FormatError(f"{p}: line {ln}: {name} must be from 0 to {MAX_BYTES}, got {x}")
        bufs.append(buf)
        if has_off:
            offs.append(off)
    if sum(b.size for b in bufs) > MAX_BYTES:
        raise FormatError(f"{p}: the buffers' sizes add up to more than {MAX_BYTES} bytes, the most this tool takes")
    prob = Problem(bufs)
    prob.arrays            # checks every buffer now, naming the bad one
    return prob, (np.array(offs, np.int64) if has_off else None)


def write_csv(path: str | Path, problem: Problem, offsets: np.ndarray | None = None) -> None:
    """MiniMalloc CSV, with an `offset` column when offsets are given. Lines end in a bare newline: MiniMalloc
    splits on it, and a header ending in `size\r` lacks its `size` column there."""
    from hybrid.files import atomic_open

    with atomic_open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "lower", "upper", "size"] + (["offset"] if offsets is not None else []))
        for k, b in enumerate(problem.buffers):
            w.writerow([b.id, b.lower, b.upper, b.size] + ([int(offsets[k])] if offsets is not None else []))
