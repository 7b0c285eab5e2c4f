"""The inbox's edit form refuses what it cannot read, in words, whatever is posted."""

from __future__ import annotations

import pytest

from airlock.loop import PendingCall
from airlock.workers.http.inbox.forms import Field, FormError, decision_of

DIGEST = "a" * 64


@pytest.mark.parametrize("depth", [100, 900, 5_000, 300_000])
def test_a_json_field_nested_too_deeply_is_refused_in_words(depth: int) -> None:
    """Attack review: a JSON field posted nested deeper than Python's recursion limit
    raised RecursionError (a 500 from the decide and preview routes) instead of a
    refusal on the page."""
    call = PendingCall("c1", "put", {"doc": {}}, "write")
    forms = {"c1": [Field("doc", "json", True, "{}")]}
    form = {
        "turn_digest": DIGEST,
        "decision": "approve",
        "call.c1": "edit",
        "edit.c1.doc": "[" * depth + "]" * depth,
    }
    try:
        body = decision_of(form, [call], forms)
    except FormError as exc:
        assert "doc" in str(exc) or "depth" in str(exc)
        return
    assert depth <= 100 and body.calls is not None  # a shallow one is taken
