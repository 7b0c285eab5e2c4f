"""W2's agent: W1 (a read tool, a gated write, an answer) with a real model over HTTP,
``OpenAIModel`` pointed at the fake server of ``bench.fake_openai`` (the URL in
``BENCH_W2_MODEL_URL``, which ``bench.w2`` sets for the API and the worker)."""

from __future__ import annotations

import os

from airlock.loop import Agent
from airlock.providers import OpenAIModel
from bench.agents import lookup, send_email

MODEL_URL = "BENCH_W2_MODEL_URL"

W2 = Agent(
    name="w2",
    tools=[lookup, send_email],
    model=OpenAIModel(
        model="fake-w2",
        # never a real provider: without the variable, a port on this machine
        base_url=os.environ.get(MODEL_URL, "http://127.0.0.1:8900/v1"),
        api_key="fake",
    ),
)
AGENTS = [W2]
