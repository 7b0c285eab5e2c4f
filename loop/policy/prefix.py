"""``prefix`` conditions. A prefix that starts with ``/`` is a path prefix: the value must
be an absolute path, and is compared once normalised (``.`` and ``..`` resolved, repeated
slashes merged), so ``/srv/data/../etc/passwd`` is ``/etc/passwd``, not under
``/srv/data/``; a prefix ending in ``/`` also matches the folder itself. Any other prefix
is compared as plain text."""

from __future__ import annotations

import posixpath


def is_path_prefix(prefix: str) -> bool:
    return prefix.startswith("/")


def normal_path(path: str) -> str:
    """An absolute path with ``.``, ``..`` and repeated slashes resolved (as the kernel
    reads it, symbolic links aside: ``//etc`` is ``/etc``)."""
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/")


def has_prefix(value: str, prefix: str) -> bool:
    """Whether ``value`` starts with ``prefix``, as the module says. Raises
    ``ValueError`` for a value a path prefix cannot judge (not an absolute path)."""
    if not is_path_prefix(prefix):
        return value.startswith(prefix)
    if not value.startswith("/"):
        raise ValueError(
            f"is not an absolute path: the path prefix {prefix!r} cannot tell where it leads"
        )
    return (normal_path(value).rstrip("/") + "/").startswith(prefix)


def unnormalised(prefix: str) -> str | None:
    """Why a path prefix can never match a normalised value (None: it can): it holds
    ``.``, ``..`` or repeated slashes."""
    if not is_path_prefix(prefix):
        return None
    normal = normal_path(prefix)
    written = normal if normal == "/" or not prefix.endswith("/") else normal + "/"
    if written == prefix:
        return None
    return (
        f"the path prefix {prefix!r} is not normalised: paths are compared with '.', '..' "
        f"and repeated slashes resolved, so write {written!r}"
    )


def surprise(prefix: str) -> str | None:
    """What a reader of the prefix might not expect (None: nothing)."""
    if is_path_prefix(prefix) and prefix != "/" and not prefix.endswith("/"):
        sibling = prefix + "-old"
        return (
            f"prefix {prefix!r} also matches {sibling!r}: end it with '/' to mean the "
            "folder and what is in it"
        )
    if not is_path_prefix(prefix) and ("/" in prefix or ".." in prefix):
        return (
            f"prefix {prefix!r} is compared as plain text ('..' in a value is not "
            "resolved): only a prefix that starts with '/' is compared as a path"
        )
    return None
