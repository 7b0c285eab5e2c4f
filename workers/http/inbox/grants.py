"""The inbox's standing grants: ``/inbox/grants`` lists them (those that stand now, or
every one), each with who gave it, for what and until when; a grant's grantor, the
operator or a holder of an operator role revokes it there (``Service.grants``)."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from airlock.persistence.store import UnknownRunError
from airlock.workers.http.inbox.pages import HEADERS, Inbox
from airlock.workers.service import ConflictError
from airlock.workers.service.grants import view
from airlock.workers.service.principals import ForbiddenError
from airlock.workers.service.sessions import Session

NOTICES = {"revoked": "Grant revoked: it releases nothing from now on."}


def mount(router: APIRouter, inbox: Inbox) -> None:
    @router.get("/inbox/grants", include_in_schema=False)
    def grants_page(request: Request) -> Response:
        session = inbox.session(request)
        if session is None:
            return inbox.to_login()
        notice = NOTICES.get(request.query_params.get("notice") or "")
        return page(inbox, session, request.query_params, notice=notice)

    @router.post("/inbox/grants/{grant_id}/revoke", include_in_schema=False)
    async def revoke(grant_id: str, request: Request) -> Response:
        session = await run_in_threadpool(inbox.session, request)
        if session is None:
            return inbox.to_login()
        await inbox.form(request, session)  # its CSRF token and origin
        return await run_in_threadpool(_revoke, inbox, grant_id, session)


def page(
    inbox: Inbox,
    session: Session,
    params: Mapping[str, str],
    *,
    notice: str | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    every = params.get("state") == "all"
    grants = inbox.service.grants
    now = grants.now()
    shown = [view(g, now) for g in grants.list(state="all" if every else "active")]
    return inbox.page(
        "grants.html", status, session=session, grants=shown, every=every, notice=notice,
        error=error,
    )  # fmt: skip


def _revoke(inbox: Inbox, grant_id: str, session: Session) -> Response:
    try:
        inbox.service.grants.revoke(grant_id, by=session.principal)
    except UnknownRunError as exc:
        return page(inbox, session, {}, error=str(exc), status=404)
    except ForbiddenError as exc:
        return page(inbox, session, {}, error=str(exc), status=403)
    except ConflictError as exc:
        return page(inbox, session, {}, error=str(exc), status=409)
    return RedirectResponse("/inbox/grants?notice=revoked", 303, headers=HEADERS)
