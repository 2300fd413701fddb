"""Standard output whose reader may leave early (`sim3d run ... | head -2`): the command still
finishes its work and writes its files, and what it would have printed goes nowhere."""

from __future__ import annotations

import os


class ReaderMayLeave:
    """A text stream that forwards to `stream` until a write or flush finds the pipe closed
    (EPIPE), then points the file descriptor at /dev/null and goes on as if written, as a
    program whose output nobody reads any more should."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_left = False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._silence()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()

    def _silence(self) -> None:
        self.reader_left = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name):  # isatty, fileno, encoding, ...: the stream's own
        return getattr(self._stream, name)
