"""README.md and the pages in docs/ run as written (issue 27, defect 7): every fenced
block is marked with how it is run, or why it is not (see ``tests/docs/readme.py``), and
the blocks that run, run. A block added without a mark fails the first test, so the
pages stay true. The blocks that moved from the README to docs/ (issue 29) run there."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.readme import (
    DOCS,
    README,
    ROOT,
    SHELLS,
    Block,
    File,
    FreshCopy,
    NotRun,
    Runs,
    base_environment,
    blocks,
    page_blocks,
    pages,
    readme_blocks,
    runs_anything,
)

ISOLATE = ["unshare", "--user", "--map-root-user", "--net", "--pid", "--fork", "--mount-proc"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_is_marked(page: Path) -> None:
    problems = []
    for block in page_blocks(page):
        try:
            block.mark()
        except ValueError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)


def test_the_tutorial_and_the_quick_start_are_run() -> None:
    marks = [block.mark() for block in readme_blocks()]
    assert sum(isinstance(m, FreshCopy) for m in marks) == 1
    assert File("myagents.py") in marks
    assert any(isinstance(m, Runs) and m.ready for m in marks)


def test_the_blocks_moved_from_the_readme_are_run_where_they_went() -> None:
    """The README ran these Python blocks before they moved to docs/ (issue 29)."""
    for name in ("models.md", "principals.md"):
        marks = [b.mark() for b in page_blocks(DOCS / name) if b.language == "python"]
        assert Runs() in marks, name


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("```bash\nls\n```\n", "no mark before it"),
        ("<!-- runs -->\n\n```bash\nls\n```\n", "no mark before it"),
        ("<!-- run it -->\n```bash\nls\n```\n", "unknown mark"),
        ("<!-- not run: -->\n```bash\nls\n```\n", "unknown mark"),
        ("<!-- runs -->\n```text\nls\n```\n", "cannot be run"),
        ("<!-- runs in a fresh copy of the repository -->\n```python\n1\n```\n", "cannot be run"),
    ],
)
def test_a_block_without_a_mark_it_can_be_run_by_is_refused(text: str, problem: str) -> None:
    (block,) = blocks(text)
    with pytest.raises(ValueError, match=problem):
        block.mark()


def test_marks_say_how_each_block_is_run() -> None:
    text = (
        "<!-- file: a.py -->\n```python\nx = 1\n```\n"
        "<!-- runs; ready when http://localhost:8000/healthz answers -->\n```bash\nx &\n```\n"
        "<!-- not run: a diagram -->\n```\n+--+\n```\n"
    )
    assert [b.mark() for b in blocks(text)] == [
        File("a.py"),
        Runs(ready="http://localhost:8000/healthz"),
        NotRun("a diagram"),
    ]


def _isolation() -> list[str] | None:
    """The command that runs the session in network and process namespaces of its own
    (so ``localhost:8000`` is the README's, and nothing it starts outlives it)."""
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run([*ISOLATE, "true"], capture_output=True, check=False)
    return ISOLATE if probe.returncode == 0 else None


def _port_8000_free() -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 8000))
        except OSError:
            return False
    return True


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    _runs_as_written(README, tmp_path)


@pytest.mark.parametrize(
    "page",
    [p for p in pages() if p != README and runs_anything(p)],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_each_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    _runs_as_written(page, tmp_path)


def _runs_as_written(page: Path, tmp_path: Path) -> None:
    """The page's session, in a folder of its own with the quick start's virtualenv."""
    folder = tmp_path / "session"
    folder.mkdir()
    (folder / ".venv").symlink_to(Path(sys.prefix))  # the quick start's virtualenv
    where = str(page.relative_to(ROOT))
    session = [sys.executable, "-m", "tests.docs.readme", str(folder), "--page", where]
    isolate = _isolation()
    if isolate is not None:
        session = [*isolate, *session, "--private-network"]
    elif not _port_8000_free():
        pytest.skip("no private network namespace (unshare), and localhost:8000 is taken")
    done = subprocess.run(
        session, cwd=ROOT, env=base_environment(), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-8000:] + done.stdout[-2000:]


def _fresh_copy(target: Path) -> None:
    """The repository's files as a clone would have them (with this working tree's
    changes), none of what was built or installed here."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_symlink():  # airlock/loop -> ../loop: a link, as git keeps it
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).symlink_to(os.readlink(source))
        elif source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _fresh_copy_blocks() -> list[Block]:
    """The quick start (a block with no mark fails ``test_every_block_is_marked``)."""
    found = []
    for block in readme_blocks():
        try:
            if isinstance(block.mark(), FreshCopy):
                found.append(block)
        except ValueError:
            continue
    return found


@pytest.mark.parametrize("block", _fresh_copy_blocks(), ids=lambda b: b.where)
def test_the_quick_start_runs_in_a_fresh_copy(block: Block, tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot tell the repository's files")
    copy = tmp_path / "airlock"
    copy.mkdir()
    _fresh_copy(copy)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=copy, env=base_environment(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{block.where}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_one_name_for_a_run_id_across_the_pages(page: Path) -> None:
    """A run's id is ``$RUN_ID`` on every page (issue 47, item 5: docs/http-api.md said
    ``$RUN`` where the README says ``$RUN_ID``)."""
    others = re.findall(r"\$\{?(RUN\w*)", page.read_text())
    assert {name for name in others if name != "RUN_ID"} == set()


def test_every_shell_block_not_run_says_why() -> None:
    """The blocks of commands no test runs, each with its reason: the only ones that
    need what a test here has not (Docker, an identity provider, a trace collector) or
    are the suite."""
    not_run = {
        block.where: mark.reason
        for page in pages()
        for block in page_blocks(page)
        if block.language in SHELLS and isinstance(mark := block.mark(), NotRun)
    }
    assert all(len(reason.split()) >= 3 for reason in not_run.values()), not_run
    assert sorted(p.split(":")[0] for p in not_run) == [
        "README.md", "docs/deploy.md", "docs/deploy.md", "docs/operations.md",
        "docs/principals.md",
    ]  # fmt: skip
