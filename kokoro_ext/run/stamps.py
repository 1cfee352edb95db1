"""Files whose SHA-256 this user has verified already, so that a start need not hash them.

Loading checks every file of a build against the SHA-256 its manifest records
(kokoro_ext.run.artifacts.verify); for the full-size build that is 500 MB of weights, a
third of a second and more at every start.  Instead a file is hashed in full the first
time it is seen, and a stamp of what was verified is kept in the user's cache directory
(kokoro_ext.run.cache.cache_dir(), ``verified.json``):

    realpath -> {device, inode, size, mtime_ns, ctime_ns, sha256}

A later load stats the file and skips the hash only if all of these are unchanged and
the stamp's SHA-256 is the one the manifest expects; anything else (another file at
that path, a file rewritten, truncated, copied, touched, or a manifest that now expects
other bytes) means hashing it again.  Writing a file changes its mtime, and setting the
mtime back (``touch -d``, ``os.utime``) changes its ctime, which no user can set: so a
file that changed through the file system is always hashed again.  What a stamp cannot
see is a change below the file system (a failing disk flipping a bit in place); the
manifest check exists to catch a wrong or damaged copy of a build, not an attacker who
can write the user's own cache.  ``artifacts.verify(..., trust_stamps=False)`` hashes
everything.

The stamps are a cache: a cache directory that is missing and cannot be created, is
read-only, or holds an unreadable ``verified.json`` only means hashing every time.  The
file is replaced atomically (written beside it, then renamed), so a concurrent reader
sees the old or the new one; of two processes writing at once one's stamps may be lost,
which again costs a hash, never a wrong answer.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kokoro_ext.run import cache

STAMPS = "verified.json"
#: Stamps kept: the newest of those whose files still exist unchanged.  Every
#: build a test suite makes adds some; a user has a handful of builds.
MAX_STAMPS = 256
_VERSION = 1


@dataclass(frozen=True)
class FileStamp:
    """What identifies one version of a file without reading it."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: str | Path) -> FileStamp:
        """The stamp of the file at ``path`` now (OSError if it cannot be stat'ed)."""
        st = os.stat(path)
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def stamps_path() -> Path | None:
    """Where the stamps are kept, or None where there is no cache directory."""
    try:
        return cache.cache_dir() / STAMPS
    except RuntimeError:  # no home directory to put ~/.cache in
        return None


#: A file changed this recently is not stamped: a second write within the file system's
#: timestamp granularity (a clock tick on many) could leave size and times as they were,
#: the "racily clean" case git guards its index against the same way.
RACY_NS = 2_000_000_000


def _racy(stamp: FileStamp, now: int) -> bool:
    return now - max(stamp.mtime_ns, stamp.ctime_ns) < RACY_NS


def _key(path: str | Path) -> str:
    return os.path.realpath(path)


def _read(location: Path | None) -> dict[str, dict]:
    if location is None:
        return {}
    try:
        data = json.loads(location.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _unchanged(record: dict, path: str | Path) -> bool:
    """Whether ``record``'s stamp is that of the file at ``path`` now (OSError if it cannot
    be stat'ed)."""
    return {k: v for k, v in record.items() if k != "sha256"} == asdict(FileStamp.of(path))


def is_verified(path: str | Path, sha256: str, location: Path | None = None) -> bool:
    """Whether a stamp shows that the file at ``path``, as it is now, has SHA-256 ``sha256``.

    ``location``: the stamps file (default: ``stamps_path()``).
    """
    location = stamps_path() if location is None else location
    record = _read(location).get(_key(path))
    if not isinstance(record, dict) or record.get("sha256") != sha256:
        return False
    try:
        return _unchanged(record, path)
    except OSError:
        return False


def record_verified(
    files: dict[str | Path, tuple[FileStamp, str]], location: Path | None = None
) -> bool:
    """Stamp each file of ``files``: path -> (its stamp taken before it was hashed, the
    SHA-256 its bytes were found to have).

    A file whose stamp changed since (it was written while being hashed) is not stamped.
    Returns whether the stamps were written; any OSError (read-only or missing cache
    directory) is swallowed, as the stamps are only a cache.
    """
    location = stamps_path() if location is None else location
    if location is None or not files:
        return False
    try:
        now = time.time_ns()
        fresh = {
            _key(p): {**asdict(before), "sha256": digest}
            for p, (before, digest) in files.items()
            if FileStamp.of(p) == before and not _racy(before, now)
        }
        if not fresh:
            return False
        kept = {}
        for key, record in _read(location).items():
            # drop stamps of files that are gone or changed: they can vouch for nothing
            if key in fresh or not isinstance(record, dict):
                continue
            try:
                if _unchanged(record, key):
                    kept[key] = record
            except OSError:
                continue
        room = max(0, MAX_STAMPS - len(fresh))
        merged = {**dict(list(kept.items())[max(0, len(kept) - room) :] if room else []), **fresh}
        location.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{STAMPS}.", dir=location.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                json.dump({"version": _VERSION, "files": merged}, f, indent=1)
            os.replace(temporary, location)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        return False
    return True


__all__ = ["FileStamp", "MAX_STAMPS", "STAMPS", "is_verified", "record_verified", "stamps_path"]
