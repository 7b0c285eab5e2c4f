"""The code blocks of README.md and of the pages in docs/, and how each is run
(``tests/docs/test_readme.py``).

Every fenced block (a fence at the start of its line) is marked by the HTML comment on
the line just before it:

- ``<!-- runs -->``: run in order, in one temporary folder per page, as one shell session
  would (a ``bash`` block: variables set by one are seen by the next, with ``set -euo
  pipefail``, so an unset variable fails it; a ``python`` block: run by the session's
  Python);
- ``<!-- runs; ready when URL answers -->``: the same, then the session waits until
  ``URL`` answers (a block that starts a server in the background);
- ``<!-- file: NAME -->``: written to ``NAME`` in the session's folder, at its place in
  the order;
- ``<!-- runs in a fresh copy of the repository -->``: run on its own, in a fresh copy of
  the repository (the quick start);
- ``<!-- not run: REASON -->``: shown, never run, and the reason says why.

The session's folder holds a ``.venv`` (the virtualenv the tests run in, as the quick
start made it). Run as ``python -m tests.docs.readme FOLDER [--page docs/NAME.md]``, the
session runs the page's blocks (the README's by default) there;
the test runs it so in a private network (and process) namespace where it can, so the
README's ``localhost:8000`` is its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SHELLS = ("bash", "sh", "shell")
BLOCK_TIMEOUT = 180.0
READY_TIMEOUT = 90.0


@dataclass(frozen=True)
class Runs:
    ready: str | None = None  # a URL the session waits for after the block


@dataclass(frozen=True)
class File:
    name: str


@dataclass(frozen=True)
class FreshCopy:
    pass


@dataclass(frozen=True)
class NotRun:
    reason: str


Mark = Runs | File | FreshCopy | NotRun

MARKS: list[tuple[re.Pattern[str], type[Mark]]] = [
    (re.compile(r"runs"), Runs),
    (re.compile(r"runs; ready when (?P<ready>\S+) answers"), Runs),
    (re.compile(r"file: (?P<name>[\w./-]+)"), File),
    (re.compile(r"runs in a fresh copy of the repository"), FreshCopy),
    (re.compile(r"not run: (?P<reason>\S.*)"), NotRun),
]


@dataclass(frozen=True)
class Block:
    line: int  # the opening fence's, 1-based
    language: str
    text: str
    comment: str | None  # the HTML comment on the line just before the fence
    page: str = "README.md"  # the page's path in the repository

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def mark(self) -> Mark:
        """What to do with the block; ValueError when it is unmarked or cannot be run."""
        if self.comment is None:
            raise ValueError(f"{self.where}: a ```{self.language} block with no mark before it")
        for pattern, kind in MARKS:
            if (found := pattern.fullmatch(self.comment)) is not None:
                mark = kind(**found.groupdict())
                break
        else:
            raise ValueError(f"{self.where}: unknown mark <!-- {self.comment} -->")
        runnable = (*SHELLS, "python") if isinstance(mark, Runs) else SHELLS
        if isinstance(mark, Runs | FreshCopy) and self.language not in runnable:
            raise ValueError(f"{self.where}: a ```{self.language} block cannot be run")
        return mark


def blocks(markdown: str, page: str = "README.md") -> list[Block]:
    lines = markdown.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: a block that is never closed")
        before = lines[i - 1].strip() if i > 0 else ""
        comment = re.fullmatch(r"<!--\s*(.*?)\s*-->", before)
        text = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(i + 1, lines[i][3:].strip(), text, comment and comment[1], page))
        i = end + 1
    return found


def pages() -> list[Path]:
    """The README and every page in docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_blocks(page: Path) -> list[Block]:
    return blocks(page.read_text(), str(page.relative_to(ROOT)))


def readme_blocks() -> list[Block]:
    return page_blocks(README)


def runs_anything(page: Path) -> bool:
    """Whether a block of ``page`` is run or written in its session (an unmarked
    block is ``test_every_block_is_marked``'s to report)."""
    for block in page_blocks(page):
        try:
            if isinstance(block.mark(), Runs | File):
                return True
        except ValueError:
            continue
    return False


def base_environment() -> dict[str, str]:
    """The environment a newcomer's shell has: none of Airlock's variables, no
    PYTHONPATH, no virtualenv activated."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")
    return {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_") and k not in drop}


class BlockFailedError(AssertionError):
    pass


# -- the session ----------------------------------------------------------------------------


class Session:
    """A page's ``runs`` and ``file`` blocks, in order, in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.own = folder.parent / f"{folder.name}-session"  # the harness's files, apart
        self.own.mkdir(exist_ok=True)
        self.state = self.own / "exported.sh"
        self.state.write_text("")

    def run(self, block: Block) -> None:
        match block.mark():
            case File(name):
                (self.folder / name).write_text(block.text)
            case Runs(ready) if block.language == "python":
                script = self.own / f"block-{block.line}.py"
                script.write_text(block.text)
                self._check(block, [str(self.folder / ".venv/bin/python"), str(script)])
                self._wait(block, ready)
            case Runs(ready):
                script = self.own / f"block-{block.line}.sh"
                script.write_text(
                    f"set -euo pipefail\nset -a\nsource {self.state}\n{block.text}"
                    f"export -p > {self.state}.next\n"
                )
                self._check(block, ["bash", str(script)])
                self._keep_exports()
                self._wait(block, ready)
            case _:
                pass

    def _check(self, block: Block, argv: list[str]) -> None:
        try:
            done = subprocess.run(
                argv,
                cwd=self.folder,
                env=base_environment(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BlockFailedError(self._report(block, f"ran over {BLOCK_TIMEOUT:.0f} s")) from exc
        if done.returncode != 0:
            said = f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            raise BlockFailedError(self._report(block, said))

    def _keep_exports(self) -> None:
        """What the block exported, for the next (readonly variables are Bash's own)."""
        exported = (self.state.parent / f"{self.state.name}.next").read_text().splitlines()
        kept = [line for line in exported if not re.match(r"declare -\w*r", line)]
        self.state.write_text("\n".join(kept) + "\n")

    def _wait(self, block: Block, url: str | None) -> None:
        if url is None:
            return
        deadline = time.monotonic() + READY_TIMEOUT
        while not _answers(url):
            if time.monotonic() > deadline:
                raise BlockFailedError(self._report(block, f"{url} did not answer"))
            time.sleep(0.2)

    def _report(self, block: Block, what: str) -> str:
        logs = "".join(
            f"\n--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
            for log in sorted(self.folder.glob("*.log"))
        )
        return f"{block.where} ({block.language}): {what}{logs}"

    def stop(self) -> None:
        """Stops what the blocks left running: every process working in the folder
        (a server started in the background, its worker and beat)."""
        left = working_in(self.folder)
        for pid in left:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while (left := working_in(self.folder)) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            _signal(pid, signal.SIGKILL)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def working_in(folder: Path) -> list[int]:
    """The processes whose current folder is ``folder`` or within it (none known where
    there is no ``/proc``)."""
    found: list[int] = []
    processes = Path("/proc")
    if not processes.is_dir():
        return found
    for proc in processes.iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if cwd == folder or folder in cwd.parents:
            found.append(int(proc.name))
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def run_session(folder: Path, page: Path = README) -> None:
    """Every ``runs`` and ``file`` block of ``page``, in order, in ``folder``."""
    session = Session(folder)
    try:
        for block in page_blocks(page):
            session.run(block)
    finally:
        session.stop()


def loopback_up() -> None:
    """In a network namespace of its own, the loopback interface starts down."""
    ip = shutil.which("ip", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if ip is None:
        raise SystemExit("`ip` is not installed: cannot bring the private loopback up")
    subprocess.run([ip, "link", "set", "lo", "up"], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--page", type=Path, default=README, help="README.md by default")
    parser.add_argument("--private-network", action="store_true")
    args = parser.parse_args()
    if args.private_network:
        loopback_up()
    try:
        run_session(args.folder.resolve(), (ROOT / args.page).resolve())
    except BlockFailedError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
