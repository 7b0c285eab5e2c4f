"""The MCP servers file: what it declares, and every bad file refused with its line and
the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.loop import Effect
from airlock.workers.mcp.config import McpConfigError, load_servers, parse_servers
from airlock.workers.service.settings import Settings

GOOD = """\
[servers.bank]
url = "http://127.0.0.1:9000/mcp"            # Streamable HTTP; or
# command = ["python", "-m", "bank_server"]  # stdio
headers = { Authorization = "Bearer ${BANK_TOKEN}" }
trust_annotations = false                    # the default: annotations are hints

[servers.bank.tools]
balance  = { effect = "read" }
transfer = { effect = "write", approvers = ["payments"] }

[servers.files]
command = ["python", "-m", "files_server", "--root", "${ROOT}"]
trust_annotations = true
"""
ENV = {"BANK_TOKEN": "s3cret", "ROOT": "/srv"}


def test_the_design_example_parses() -> None:
    servers = parse_servers(GOOD, "servers.toml", ENV)
    bank = servers.get("bank")
    assert bank.url == "http://127.0.0.1:9000/mcp" and bank.transport == "http"
    assert bank.headers == {"Authorization": "Bearer s3cret"}
    assert not bank.trust_annotations
    assert bank.tools["balance"].effect is Effect.READ
    assert bank.tools["transfer"].effect is Effect.WRITE
    assert bank.tools["transfer"].approvers == ("payments",)
    files = servers.get("files")
    assert files.command == ("python", "-m", "files_server", "--root", "/srv")
    assert files.transport == "stdio" and files.trust_annotations


def test_a_missing_variable_refuses_naming_it_and_its_line() -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_servers(GOOD, "servers.toml", {"ROOT": "/srv"})
    assert caught.value.line == 4
    assert "BANK_TOKEN is not set" in str(caught.value)
    assert str(caught.value).startswith("AIRLOCK_MCP_SERVERS: servers.toml:4: ")


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('[servers.bank]\nurl = "http://x/mcp"\nurl = 2\n', 3, "Cannot overwrite a value"),
        ("[servers.bank]\ntimeout = 3\n", 1, "exactly one of url"),
        ('[servers.bank]\nurl = "http://x"\ncommand = ["a"]\n', 1, "exactly one of url"),
        ('[servers.bank]\nurl = "ftp://x"\n', 2, "should match pattern"),
        ('[servers.bank]\nurl = "http://x"\nretries = 3\n', 3, "Extra inputs"),
        (
            '[servers.bank]\nurl = "http://x"\n\n[servers.bank.tools]\n'
            'pay = { effect = "maybe" }\n',
            5,
            "tools.pay.effect",
        ),
        (
            '[servers.bank]\nurl = "http://x"\n[servers.bank.tools]\n'
            'pay = { effect = "write", quorum = 0 }\n',
            4,
            "quorum",
        ),
        (
            '[servers.bank]\nurl = "http://x"\n[servers.bank.tools]\na__b = { effect = "write" }\n',
            4,
            "holds no '__'",
        ),
        ('[servers.my__bank]\nurl = "http://x"\n', 1, "server name"),
        ('[servers."bad name"]\nurl = "http://x"\n', 0, "server name"),
        ('[servers.bank]\ncommand = ["x"]\nheaders = { A = "b" }\n', 1, "headers apply"),
        ("servers = 3\n", 1, "servers must be a table"),
        ("[other]\nx = 1\n", 0, "unknown key 'other'"),
    ],
)
def test_bad_files_are_refused_with_the_line_and_the_reason(
    text: str, line: int, reason: str
) -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_servers(text, "s.toml", {})
    assert reason in caught.value.reason
    if line:
        assert caught.value.line == line, str(caught.value)


def test_an_unknown_server_is_named_with_the_declared_ones() -> None:
    servers = parse_servers(GOOD, "s.toml", ENV)
    with pytest.raises(
        McpConfigError, match=r"no server 'nope' is declared \(declared: bank, files\)"
    ):
        servers.get("nope")


def test_a_bad_file_refuses_start_through_the_settings(tmp_path: Path) -> None:
    bad = tmp_path / "servers.toml"
    bad.write_text('[servers.bank]\nurl = "http://x"\ntimeout = -1\n')
    with pytest.raises(ValueError, match=r"servers.toml:3: \[servers.bank\] timeout"):
        Settings.model_validate({"mcp_servers": str(bad)})
    with pytest.raises(McpConfigError, match="cannot read the file"):
        load_servers(tmp_path / "missing.toml")
