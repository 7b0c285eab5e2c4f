"""Run in a process of its own (``python -m tests.unit.green_mcp_probe``), patched by gevent
as a ``-P gevent`` worker is: segments (greenlets) call an MCP tool through the session
pool while another greenlet must run for the tool to answer. Were a waiting segment to
hold the hub, that greenlet would never run and the calls would fail their deadline.
Prints the answers, one per line."""

from gevent import monkey  # type: ignore[import-untyped]

monkey.patch_all()

import os  # noqa: E402
import sys  # noqa: E402

import anyio  # noqa: E402
import gevent  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

from airlock.workers.mcp import pool, runtime  # noqa: E402
from airlock.workers.mcp.config import parse_servers  # noqa: E402

OPENED = {"gate": False}
server = MCPServer("bank")


@server.tool()
async def wait_for_gate(n: int) -> str:
    while not OPENED["gate"]:  # set by a greenlet of the calling process
        await anyio.sleep(0.01)
    return f"answer {n}"


def main() -> None:
    pool._POOLS[os.getpid()] = pool.SessionPool(lambda _: Client(server, cache=None))
    config = parse_servers('[servers.bank]\nurl = "http://x/mcp"\ntimeout = 20\n', "s", {})
    bank = config.get("bank")

    def segment(n: int) -> str:
        outcome = runtime.call(
            bank, "wait_for_gate", {"n": n}, idempotency_key=f"r:{n}", repeatable=True
        )
        return outcome.text

    calls = [gevent.spawn(segment, n) for n in range(20)]
    gevent.sleep(0)  # the calls are sent and waited for
    OPENED["gate"] = True  # runs only if the waiting segments left the hub free
    gevent.joinall(calls, raise_error=True)
    sys.stdout.write("\n".join(c.value for c in calls) + "\n")


if __name__ == "__main__":
    main()
