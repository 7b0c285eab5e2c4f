"""The policy files a process runs with: a bad one refuses to start naming the variable
and the line; a changed one is reloaded; a bad new one is refused and the running
policy stays."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from airlock.persistence.db import ConfigurationError
from airlock.workers.service.policy_file import PolicyFileError, PolicyHolder
from airlock.workers.service.settings import load_settings

ASK = '[[rules]]\nname = "asks"\nverdict = "ask"\n'
ALLOW = '[[rules]]\nname = "allows-everything"\nverdict = "allow"\n'
BAD = (
    '[[rules]]\nname = "broken"\nverdict = "allow"\nwhen = [{ path = "x", op = "~", value = 1 }]\n'
)


def write(path: Path, text: str, tick: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(tick * 10**9, tick * 10**9))  # a distinct mtime, whatever the clock


def test_a_bad_file_refuses_to_start_naming_the_variable_and_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "policy.toml"
    write(path, BAD, 1)
    monkeypatch.setenv("AIRLOCK_POLICY", str(path))
    with pytest.raises(ConfigurationError, match=r"AIRLOCK_POLICY: .*line 4: op '~'"):
        load_settings()
    monkeypatch.setenv("AIRLOCK_POLICY", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigurationError, match=r"AIRLOCK_POLICY: .*cannot be read"):
        load_settings()
    with pytest.raises(PolicyFileError, match=r"AIRLOCK_POLICY_SHADOW: .*line 4"):
        PolicyHolder.load(None, path)


def test_a_changed_file_is_reloaded_and_a_bad_one_keeps_the_running_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.toml"
    write(path, ASK, 1)
    holder = PolicyHolder.load(path)
    first, _ = holder.current()
    assert first is not None and first.rules[0].name == "asks"
    write(path, ALLOW, 2)
    second, _ = holder.current()
    assert second is not None and second.rules[0].name == "allows-everything"
    write(path, BAD, 3)
    with caplog.at_level(logging.ERROR, logger="airlock"):
        kept, _ = holder.current()
    assert kept == second
    assert "refused, the running policy stays" in caplog.text and "line 4" in caplog.text
    path.unlink()
    assert holder.current()[0] == second  # a file that vanished: the running policy stays
    write(path, ASK, 4)
    assert holder.current()[0] == first


def test_no_file_judges_nothing() -> None:
    holder = PolicyHolder.load(None)
    assert not holder.configured
    assert holder.for_run("alice", {}) is None


def test_an_empty_variable_names_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRLOCK_POLICY", "")
    assert load_settings().policy is None


ASKS_LEADS = '[[rules]]\nname = "asks"\nverdict = "ask"\napprovers = ["leads"]\n'
ASKS_OWNER = '[[rules]]\nname = "asks"\nverdict = "ask"\napprovers = ["owner"]\n'


@pytest.mark.parametrize("how", ["in place", "replaced"])
def test_a_new_file_of_the_same_size_and_mtime_is_reloaded(tmp_path: Path, how: str) -> None:
    """A file copied in with its mtime kept (``cp -p``, ``rsync -a``, ``tar x``,
    ``touch -r``) and the same size as the running one is a new policy all the same:
    had the stat of size and mtime alone been its stamp, a rule now asking for
    ``leads`` would still ask for ``owner``, for ever (until the file changed again)."""
    assert len(ASKS_LEADS) == len(ASKS_OWNER)
    path = tmp_path / "policy.toml"
    write(path, ASKS_OWNER, 1)
    holder = PolicyHolder.load(path)
    first, _ = holder.current()
    assert first is not None and first.rules[0].approvers == ("owner",)
    if how == "in place":
        write(path, ASKS_LEADS, 1)
    else:
        staged = tmp_path / "staged.toml"
        write(staged, ASKS_LEADS, 1)
        staged.replace(path)
    now, _ = holder.current()
    assert now is not None and now.rules[0].approvers == ("leads",)


def test_the_log_names_each_file_loaded_by_its_absolute_path_and_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "policy.toml", ASK, 1)
    write(tmp_path / "shadow.toml", ALLOW, 1)
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO, logger="airlock"):
        holder = PolicyHolder.load(Path("policy.toml"), Path("shadow.toml"))
    enforced, shadow = holder.current()
    assert enforced is not None and shadow is not None
    loaded = [r for r in caplog.records if getattr(r, "action", None) == "policy.loaded"]
    folder = tmp_path.resolve()
    assert [r.getMessage() for r in loaded] == [
        f"AIRLOCK_POLICY: {folder / 'policy.toml'} loaded, sha256 {enforced.sha256}",
        f"AIRLOCK_POLICY_SHADOW: {folder / 'shadow.toml'} loaded, sha256 {shadow.sha256}",
    ]
    assert [getattr(r, "path", None) for r in loaded] == [
        str(folder / "policy.toml"),
        str(folder / "shadow.toml"),
    ]


DENY_WIPE = '\n[[rules]]\nname = "no-wipe"\ntool = "wipe"\nverdict = "deny"\nreason = "no"\n'


def test_a_file_changed_while_it_is_read_keeps_the_running_policy_until_it_is_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer mid-write: the first half of the new file (itself valid TOML, which lets
    everything run) is never taken for the policy."""
    path = tmp_path / "policy.toml"
    write(path, ASK, 1)
    holder = PolicyHolder.load(path)
    running, _ = holder.current()
    write(path, ALLOW, 2)  # the writer's first write

    def while_the_writer_goes_on(read: Path) -> bytes:
        first = read.read_bytes()
        write(read, ALLOW + DENY_WIPE, 3)
        return first

    assert holder.enforced is not None
    holder.enforced.read = while_the_writer_goes_on
    with caplog.at_level(logging.INFO, logger="airlock"):
        assert holder.current()[0] == running
    assert caplog.records == []  # not refused: read again at the next check
    holder.enforced.read = Path.read_bytes
    whole, _ = holder.current()
    assert whole is not None and [r.name for r in whole.rules] == ["allows-everything", "no-wipe"]


def test_a_half_written_file_is_refused_once_and_read_again_when_it_is_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.toml"
    write(path, ASK, 1)
    holder = PolicyHolder.load(path)
    running, _ = holder.current()
    whole = ALLOW + DENY_WIPE
    write(path, whole[: whole.index("wipe")], 2)  # the writer stopped mid-string
    with caplog.at_level(logging.ERROR, logger="airlock"):
        assert holder.current()[0] == running
        assert holder.current()[0] == running
    refused = [r for r in caplog.records if getattr(r, "action", None) == "policy.reload_refused"]
    assert len(refused) == 1 and "the running policy stays" in refused[0].getMessage()
    write(path, whole, 3)
    now, _ = holder.current()
    assert now is not None and [r.name for r in now.rules] == ["allows-everything", "no-wipe"]
