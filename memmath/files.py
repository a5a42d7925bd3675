"""Reading a small file safely: a config.json or a Hugging Face ref, never more than a limit, never a FIFO."""

from __future__ import annotations

import os
import stat


class NotARegularFile(Exception):
    """The path opened is not a regular file (a FIFO, a device, a socket, or a file swapped since it was checked)."""


def read_bounded(path, limit: int) -> bytes:
    """Up to limit + 1 bytes of the regular file at `path` (a caller refuses more than limit), opened without
    following a final symbolic link or waiting on a FIFO (O_NOFOLLOW, O_NONBLOCK) and checked again once open, since
    it may have been swapped since the caller's lstat. Raises NotARegularFile, or OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise NotARegularFile(str(path))
        return file.read(limit + 1)
