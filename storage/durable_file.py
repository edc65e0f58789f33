"""Replacing a small file so that a crash leaves either its old or its new content.

The content goes to <path>.tmp, is fsynced, renamed over <path>, and the directory is fsynced so
the rename itself survives a power loss. `Log.load` and the checkpoint readers never see a .tmp
file as the real one; leftovers of a crash between write and rename are overwritten next time.
"""

import os


def replace_durably(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
