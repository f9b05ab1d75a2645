"""Answers gzip-compressed once and sent to many, each with its own few bytes at the end.

A hundred tabs opening together share one history answer (samples.py), and every sidebar polling
a big machine shares one ``samples/latest`` per sample; each answer then ends in bytes of its own
(``server_time``, the sample's age, a scrape's health). tornado's ``compress_response`` would
compress every answer again, whole, on the event loop (~13 ms for a 900 KB history at level 6).
Here the shared part is compressed once, off the loop where it is big, ending in a full flush (no
back-reference crosses it); each answer's tail is then deflated on its own and the gzip trailer
(the CRC-32 and length of everything) computed from the shared part's, by zlib's ``crc32`` start
value. The result is one ordinary gzip member: any client decodes it.
"""
from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Mapping

# Smaller answers go as they are: gzip's 18 bytes and the work are not worth it.
GZIP_MIN_BYTES = 1024
# Level 6 (zlib's default): a 900 KB history of 8 GPUs in ~13 ms, to 7 % of its size; level 1
# is twice as fast and a third bigger (measured in docs/server.md).
LEVEL = 6
# The tail is a few hundred bytes at most: a small window and little memory make it cheap.
_TAIL_WBITS, _TAIL_MEMLEVEL = -9, 1


def accepts_gzip(headers: Mapping[str, str] | None) -> bool:
    """Whether an ``Accept-Encoding`` header admits gzip (``gzip;q=0`` refuses it)."""
    value = headers.get("Accept-Encoding", "") if headers is not None else ""
    for part in value.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip()
            if q.lower().startswith("q="):
                try:
                    return float(q[2:]) > 0
                except ValueError:
                    return False
            return True
    return False


class SharedBody:
    """The bytes every answer shares and, made at most once, their gzip stream up to the tail."""

    __slots__ = ("raw", "_deflated", "_lock")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._deflated: tuple[bytes, int] | None = None  # (gzip header + blocks, CRC-32 of raw)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def deflated(self) -> bool:
        """Whether the gzip of the shared part is made already."""
        return self._deflated is not None

    def worth_compressing(self) -> bool:
        return len(self.raw) >= GZIP_MIN_BYTES

    def deflate(self) -> tuple[bytes, int]:
        """The gzip header and the shared part's blocks (made once; call it in a worker for a big one)."""
        made = self._deflated
        if made is None:
            with self._lock:  # two requests at once: one compresses, the other waits for it
                made = self._deflated
                if made is None:
                    co = zlib.compressobj(LEVEL, zlib.DEFLATED, 31)  # 31: the gzip header
                    made = self._deflated = (co.compress(self.raw) + co.flush(zlib.Z_FULL_FLUSH),
                                             zlib.crc32(self.raw))
        return made

    def gzip(self, tail: bytes = b"") -> tuple[bytes, bytes]:
        """This body then ``tail``, as one gzip member: the shared blocks (not copied) and the rest."""
        head, crc = self.deflate()
        co = zlib.compressobj(LEVEL, zlib.DEFLATED, _TAIL_WBITS, _TAIL_MEMLEVEL)
        end = co.compress(tail) + co.flush()  # the final block
        trailer = struct.pack("<II", zlib.crc32(tail, crc), (len(self.raw) + len(tail)) & 0xFFFFFFFF)
        return head, end + trailer
