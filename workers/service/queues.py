"""The broker's queues (DESIGN §4): segments on one, outbound notifications on another,
each taken by consumers of its own, so that no receiver of a notification, slow or
hostile, holds a worker that runs segments."""

from __future__ import annotations

SEGMENTS = "airlock"
NOTIFICATIONS = "airlock.notifications"
