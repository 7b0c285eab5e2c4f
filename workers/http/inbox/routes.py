"""The inbox's routes, on a FastAPI router: each a thin shell over ``Inbox``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from airlock.workers.http.inbox import grants
from airlock.workers.http.inbox.pages import HEADERS, HERE, Inbox
from airlock.workers.http.problems import ProblemError
from airlock.workers.service.sessions import COOKIE, ThrottledError


def router(inbox: Inbox) -> APIRouter:
    """The inbox's pages: sign-in and out, the queue, a run, decisions."""
    routes = APIRouter()
    _sign_in(routes, inbox)
    _pages(routes, inbox)
    grants.mount(routes, inbox)
    return routes


def _sign_in(router: APIRouter, inbox: Inbox) -> None:
    @router.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        icon = (HERE / "static" / "favicon.svg").read_bytes()
        cache = {**HEADERS, "Cache-Control": "public, max-age=86400"}
        return Response(icon, media_type="image/svg+xml", headers=cache)

    @router.get("/inbox/login", include_in_schema=False)
    def login_page(request: Request) -> Response:
        return inbox.page("login.html", **inbox.login_context())

    @router.post("/inbox/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = await inbox.form(request, None)
        client = request.client.host if request.client is not None else ""
        try:
            principal, expires = await run_in_threadpool(inbox.sign_in, form, client)
        except ThrottledError as exc:
            error = f"too many failed sign-ins {exc.what}: try again in {exc.retry_after} seconds"
            page = inbox.page("login.html", 429, error=error, **inbox.login_context())
            page.headers["Retry-After"] = str(exc.retry_after)
            return page
        except ProblemError as exc:  # the issuer's keys cannot be had (503)
            return inbox.page("login.html", exc.status, error=exc.detail, **inbox.login_context())
        except ValueError as exc:  # it proves no one, or the name is not one
            return inbox.page("login.html", 401, error=str(exc), **inbox.login_context())
        cookie, _ = await run_in_threadpool(inbox.sessions.issue, principal, expires)
        response = RedirectResponse("/inbox", 303, headers=HEADERS)
        response.set_cookie(
            COOKIE,
            cookie,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/inbox",
        )
        return response

    @router.post("/inbox/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        session = await run_in_threadpool(inbox.session, request)
        if session is not None:
            await inbox.form(request, session)
            await run_in_threadpool(inbox.sessions.close, request.cookies.get(COOKIE))
        response = inbox.to_login()
        response.delete_cookie(COOKIE, path="/inbox")
        return response


def _pages(router: APIRouter, inbox: Inbox) -> None:
    @router.get("/inbox", include_in_schema=False)
    def queue(request: Request) -> Response:
        session = inbox.session(request)
        if session is None:
            return inbox.to_login()
        return inbox.page("queue.html", **inbox.queue(request.query_params, session))

    @router.get("/inbox/queue", include_in_schema=False)
    def queue_rows(request: Request) -> Response:
        session = inbox.session(request)
        if session is None:
            return Response(status_code=401, headers=HEADERS)
        return inbox.page("rows.html", **inbox.queue(request.query_params, session))

    @router.get("/inbox/runs/{run_id}", include_in_schema=False)
    def run_page(run_id: str, request: Request) -> Response:
        session = inbox.session(request)
        if session is None:
            return inbox.to_login()
        notice = request.query_params.get("notice")
        return inbox.run_page(run_id, session, notice=notice)

    @router.post("/inbox/runs/{run_id}/decide", include_in_schema=False)
    async def decide(run_id: str, request: Request) -> Response:
        session = await run_in_threadpool(inbox.session, request)
        if session is None:
            return inbox.to_login()
        form = await inbox.form(request, session)
        return await run_in_threadpool(inbox.decide, run_id, form, session)

    @router.post("/inbox/runs/{run_id}/preview", include_in_schema=False)
    async def preview(run_id: str, request: Request) -> Response:
        session = await run_in_threadpool(inbox.session, request)
        if session is None:
            return Response(status_code=401, headers=HEADERS)
        form = await inbox.form(request, session)
        return await run_in_threadpool(inbox.preview, run_id, form, session)

    @router.post("/inbox/bulk", include_in_schema=False)
    async def bulk(request: Request) -> Response:
        session = await run_in_threadpool(inbox.session, request)
        if session is None:
            return inbox.to_login()
        form = await inbox.form(request, session)
        return await run_in_threadpool(inbox.bulk, form, session)
