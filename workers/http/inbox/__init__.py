"""The approver inbox (``/inbox``): server-rendered pages where people see what waits,
decide per call, and read a run's story. Every decision goes through
``Service.record_decision``, as the webhook's and the CLI's do. ``pages``: what each
page shows and each form does; ``routes``: the router; ``forms``: the decision form;
``present``: how the pages say things; ``live``: the pages' live streams."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from airlock.workers.http.auth import Authenticator
from airlock.workers.http.hub import Hubs
from airlock.workers.http.inbox import live
from airlock.workers.http.inbox.pages import HERE, Inbox
from airlock.workers.http.inbox.routes import router
from airlock.workers.http.streams import StreamSlots
from airlock.workers.service import Service
from airlock.workers.service.settings import Settings


def mount(
    app: FastAPI,
    service: Service,
    auth: Authenticator,
    config: Settings,
    *,
    hubs: Hubs,
    slots: StreamSlots,
) -> None:
    """Add the inbox's pages, its live streams and its assets to the API."""
    app.mount("/inbox/static", StaticFiles(directory=HERE / "static"), name="inbox-static")
    inbox = Inbox(service, auth, service.sign_ins(config.session_secret))
    app.include_router(router(inbox))
    live.mount(app, inbox, hubs, slots)
