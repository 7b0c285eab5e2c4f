"""The policy file (``AIRLOCK_POLICY``) and its shadow (``AIRLOCK_POLICY_SHADOW``): read
at start (a bad file refuses to start; the log names the file and its sha256), reloaded
when it changes (read once: one that changed while it was read is read again at the
next check; a bad new file is refused and the running policy stays). Regex conditions
run on RE2 (``policy_regex``). A turn is judged once, at suspension, and its judgement
stored with it: no reload changes a waiting turn's verdict."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import JsonValue

from airlock.loop.errors import AirlockError
from airlock.loop.policy import Policy, PolicyError, RunPolicy, parse_policy
from airlock.workers.service.policy_regex import compile_re2

log = logging.getLogger("airlock")


class PolicyFileError(AirlockError):
    """The policy file cannot be used."""


def read_policy(path: Path) -> Policy:
    """The policy ``path`` holds. Raises ``PolicyFileError`` naming the file, the line
    and the reason."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PolicyFileError(f"{path}: cannot be read: {exc}") from exc
    return policy_of(path, data)


def policy_of(path: Path, data: bytes) -> Policy:
    """The policy ``data`` (read from ``path``) holds, its regex conditions on RE2.
    Raises ``PolicyFileError`` naming the file, the line and the reason."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyFileError(f"{path}: cannot be read: {exc}") from exc
    try:
        return parse_policy(text, compile_re2)
    except PolicyError as exc:
        raise PolicyFileError(f"{path}: {exc}") from exc


Stamp = tuple[int, int, int, int, int]


def _stamp(path: Path) -> Stamp | None:
    """What tells a new version of the file from the one read: its size and mtime, and
    its inode and ctime, which no copy keeps (``cp -p``, ``rsync -a`` and ``tar`` keep the
    mtime; a file of the same size copied so was never reloaded)."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_mtime_ns, found.st_size, found.st_ino, found.st_dev, found.st_ctime_ns


Read = Callable[[Path], bytes]


def _read_whole(path: Path, stamp: Stamp, read: Read) -> bytes | None:
    """The file's bytes, read once; None when its stamp changed while it was read, or it
    vanished (a writer mid-write, or replacing it). Raises ``OSError``."""
    try:
        data = read(path)
    except FileNotFoundError:
        return None
    return data if _stamp(path) == stamp else None


@dataclass
class _Watched:
    """One file, its policy as last read well, and the stat it was read at."""

    variable: str
    path: Path
    policy: Policy
    stamp: Stamp | None = None
    refused: Stamp | None = None
    """The stat of a new version refused as malformed (not read again until it changes)."""
    read: Read = field(default=Path.read_bytes, repr=False)

    def current(self) -> Policy:
        stamp = _stamp(self.path)
        if stamp is None or stamp in (self.stamp, self.refused):
            return self.policy
        try:
            data = _read_whole(self.path, stamp, self.read)
            if data is None:  # read again at the next check, once the writer is done
                return self.policy
            policy = policy_of(self.path, data)
        except (OSError, PolicyFileError) as exc:
            why = f"{self.path}: cannot be read: {exc}" if isinstance(exc, OSError) else exc
            self.refused = stamp
            log.error(
                f"{self.variable}: the new file is refused, the running policy stays: {why}",
                extra={"action": "policy.reload_refused", "sha256": self.policy.sha256},
            )
            return self.policy
        if policy.sha256 != self.policy.sha256:
            log.info(
                f"{self.variable}: reloaded {self.path.resolve()}, sha256 {policy.sha256}",
                extra={"action": "policy.reloaded", "sha256": policy.sha256},
            )
        self.policy, self.stamp, self.refused = policy, stamp, None
        return policy


@dataclass
class PolicyHolder:
    """The process's policy files, reloaded when they change."""

    enforced: _Watched | None = None
    shadow: _Watched | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(cls, policy: Path | None, shadow: Path | None = None) -> PolicyHolder:
        """Read both files now. Raises ``PolicyFileError`` naming the variable."""
        return cls(_watch("AIRLOCK_POLICY", policy), _watch("AIRLOCK_POLICY_SHADOW", shadow))

    @property
    def configured(self) -> bool:
        return self.enforced is not None or self.shadow is not None

    def current(self) -> tuple[Policy | None, Policy | None]:
        with self._lock:
            enforced = self.enforced.current() if self.enforced else None
            shadow = self.shadow.current() if self.shadow else None
            return enforced, shadow

    def for_run(self, requester: str | None, metadata: Mapping[str, JsonValue]) -> RunPolicy | None:
        """The policies a segment judges its turns by, with the run's facts."""
        if not self.configured:
            return None
        enforced, shadow = self.current()
        return RunPolicy(enforced, shadow, requester, dict(metadata))


def _watch(variable: str, path: Path | None) -> _Watched | None:
    if path is None:
        return None
    stamp = _stamp(path)  # before the read: a change while it is read is read again
    try:
        policy = read_policy(path)
    except PolicyFileError as exc:
        raise PolicyFileError(f"{variable}: {exc}") from exc
    log.info(
        f"{variable}: {path.resolve()} loaded, sha256 {policy.sha256}",
        extra={"action": "policy.loaded", "path": str(path.resolve()), "sha256": policy.sha256},
    )
    return _Watched(variable, path, policy, stamp)
