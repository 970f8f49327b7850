"""The demo's secret key when none is configured: made at the first start and kept in the
instance folder, readable by its owner only.

The web process, the ``rq worker`` processes and ``flask`` commands started in one directory
all build the app from the same instance folder, so they all sign and check with one key,
and it survives restarts (sessions stay valid) without ever being a constant in the code.
"""

from __future__ import annotations

import os
import secrets
import tempfile

KEY_FILE = "secret_key"


def instance_secret_key(folder: str) -> str:
    """The key kept in ``folder``, made now if there is none yet."""
    path = os.path.join(folder, KEY_FILE)
    try:
        return _read(path)
    except FileNotFoundError:
        return _create(path)


def _create(path: str) -> str:
    key = secrets.token_hex(32)
    # Written whole under a name of this call's own (mkstemp: O_EXCL, mode 0600), then
    # linked into place. link() fails when the file exists, so of two processes starting at
    # once one wins and the other reads the winner's key, and no one reads half a file.
    fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{KEY_FILE}.")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(key + "\n")
        os.link(partial, path)
    except FileExistsError:
        return _read(path)
    finally:
        os.unlink(partial)
    return key


def _read(path: str) -> str:
    with open(path, encoding="ascii") as file:
        key = file.read().strip()
    if not key:
        raise RuntimeError(f"{path} is empty: delete it, and the next start makes a new key.")
    return key
