"""The inbox's edit form refuses what the webhook refuses: a non-finite number in a
JSON field (issue 26, defect 10) names the field, before any decision is made."""

from __future__ import annotations

import pytest

from workers.http.inbox.forms import Field, FormError, edited

FIELDS = [Field("filter", "json", True, ""), Field("limit", "number", False, "")]


@pytest.mark.parametrize(
    "form",
    [
        {"edit.c.filter": '{"n": NaN}'},
        {"edit.c.filter": "[1, Infinity]"},
        {"edit.c.filter": '{"a": {"b": -Infinity}}'},
        {"edit.c.filter": "1e999"},
        {"edit.c.filter": "{}", "edit.c.limit": "nan"},
        {"edit.c.filter": "{}", "edit.c.limit": "1e999"},
    ],
)
def test_an_edit_with_a_non_finite_number_is_refused_naming_the_field(
    form: dict[str, str],
) -> None:
    with pytest.raises(FormError, match="finite"):
        edited(FIELDS, form, "edit.c.")


def test_finite_numbers_are_kept() -> None:
    form = {"edit.c.filter": '{"n": 1.5, "m": [1e300]}', "edit.c.limit": "2.5"}
    assert edited(FIELDS, form, "edit.c.") == {"filter": {"n": 1.5, "m": [1e300]}, "limit": 2.5}
