"""The inbox's pages: what each shows and what each form does, rendered on the server."""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from airlock.loop import Agent, DecisionError, StateError, SuspendedRunState
from airlock.persistence.domain import Run, RunStatus
from airlock.persistence.store import UnknownRunError
from airlock.workers.http.auth import Authenticator, TokenVerifier
from airlock.workers.http.inbox import queue, story
from airlock.workers.http.inbox.forms import Field, FormError, decision_of, fields_of
from airlock.workers.http.inbox.outcome import Summary, summary
from airlock.workers.http.inbox.present import NOTICES, STALE, explained, message
from airlock.workers.http.inbox.queue import STATUS_WORDS
from airlock.workers.http.problems import ProblemError
from airlock.workers.service import ConflictError, Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Authority, ForbiddenError, Principal, check_name
from airlock.workers.service.sessions import (
    COOKIE,
    Credentials,
    Proved,
    Session,
    Sessions,
    SignInFailedError,
    csrf_ok,
)
from airlock.workers.service.views import event_view, pending_view

HERE = Path(__file__).parent
PAGE = 25

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

STATUSES = {"waiting": "waiting", "recent": "recently decided or finished", "all": "all"}


class Inbox:
    def __init__(self, service: Service, auth: Authenticator, sessions: Sessions) -> None:
        self.service = service
        self.auth = auth
        self.sessions = sessions
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(["html"], default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.globals["STATUS_WORDS"] = STATUS_WORDS
        self.templates.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False)

    # -- plumbing ----------------------------------------------------------------------

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(**context)
        return HTMLResponse(html, status, headers=HEADERS)

    def session(self, request: Request) -> Session | None:
        """The request's sign-in (read from the store: on a worker thread)."""
        return self.sessions.read(request.cookies.get(COOKIE))

    def same_origin(self, request: Request) -> bool:
        """A form posted from another site is refused whatever its cookie says."""
        origin = request.headers.get("origin") or request.headers.get("referer")
        if not origin or origin == "null":
            return origin is None
        return urlsplit(origin).netloc == request.headers.get("host")

    async def form(self, request: Request, session: Session | None) -> dict[str, str]:
        """The posted form, once it came from this site with this sign-in's CSRF token.
        Raises ``ProblemError`` (403)."""
        if not self.same_origin(request):
            raise ProblemError(403, "Forbidden", "the form was posted from another site")
        form = await request.form()
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if session is not None and not csrf_ok(session, fields.get("csrf")):
            raise ProblemError(403, "Forbidden", "the form's CSRF token is missing or stale")
        return fields

    def to_login(self) -> RedirectResponse:
        return RedirectResponse("/inbox/login", 303, headers=HEADERS)

    # -- sign-in -------------------------------------------------------------------------

    def login_context(self) -> dict[str, Any]:
        return {
            "api_token": bool(self.auth.api_token),
            "oidc": self.auth.tokens is not None,
            "open": self.auth.open,
        }

    def sign_in(self, form: Mapping[str, str], client: str) -> Proved:
        """The principal a sign-in form from the address ``client`` proves (the rules:
        ``Sessions.sign_in``). Raises ``ThrottledError``, ``ValueError`` (a
        ``SignInFailedError`` among them) / ``ProblemError``."""
        name = (form.get("name") or "").strip()
        token = (form.get("token") or "").strip()
        return self.sessions.sign_in(client, name, self.credentials(token, name))

    def credentials(self, token: str, name: str) -> Credentials:
        """A sign-in form's credential, as ``Sessions.sign_in`` checks it: a token of
        the issuer (its subject, with its roles), or the API token (an operator, as the
        name given; on an open API, no token)."""
        tokens = self.auth.tokens
        signed = None
        if tokens is not None and token.count(".") == 2:
            signed = partial(_verified, tokens, token)
        return Credentials(signed=signed, secret=partial(self._secret, token, name))

    def _secret(self, token: str, name: str) -> Proved:
        api_token = self.auth.api_token
        if api_token and hmac.compare_digest(token.encode(), api_token.encode()):
            return _operator(name), None
        if self.auth.open and not token:
            return _operator(name), None
        raise SignInFailedError(
            "the token is neither the API token nor a token of the configured issuer"
        )

    # -- the queue -------------------------------------------------------------------------

    def queue(self, params: Mapping[str, str], session: Session) -> dict[str, Any]:
        return queue.queue(self.service, params, session)

    def bulk(self, form: Mapping[str, str], session: Session) -> Response:
        status, context = queue.bulk(self.service, form, session)
        return self.page("bulk.html", status, **context)

    # -- a run -------------------------------------------------------------------------------

    def run_page(
        self,
        run_id: str,
        session: Session,
        *,
        notice: str | None = None,
        error: str | None = None,
        status: int = 200,
        form: Mapping[str, str] | None = None,
    ) -> HTMLResponse:
        try:
            run = self.service.get_run(run_id)
        except UnknownRunError:
            return self.page("missing.html", 404, session=session, run_id=run_id)
        pending = pending_view(self.service, run)
        transcript: list[dict[str, Any]] = []
        forms: dict[str, list[Field]] = {}
        try:
            state = self.service.pending(run)
        except StateError:
            state = None
        agent = self.agent(run)
        if state is not None:
            transcript = [message(m) for m in state.transcript]
            for call in state.pending_calls:
                forms[call.id] = fields_of(agent, call)
        asked = {"decision": "approve", **(form or {})}
        shown = self.summary(run, agent, state, asked, session) if state else None
        events = [event_view(e) for e in self.service.events(run.id)]
        if state is None:  # the checkpoint is the turn's; a run that moved on has its events
            transcript = story.transcript(events)
        mine = session.principal.key
        approved = any(a.identity == mine for a in self.service.approvals(run))
        return self.page(
            "run.html",
            status,
            session=session,
            run=run,
            pending=pending,
            approved=approved,
            transcript=transcript,
            forms=forms,
            events=story.timeline(events),
            notice=_notice(notice, run),
            error=error,
            form=form or {},
            summary=shown,
        )

    def preview(self, run_id: str, form: Mapping[str, str], session: Session) -> HTMLResponse:
        """The run page's "what will happen" for the decision its form holds now."""
        try:
            run = self.service.get_run(run_id)
            state = self.service.pending(run)
        except (UnknownRunError, StateError) as exc:
            return self.page("summary.html", summary=Summary(error=str(exc)))
        if state is None or run.turn_digest != form.get("turn_digest"):
            return self.page("summary.html", summary=Summary(error=STALE))
        shown = self.summary(run, self.agent(run), state, form, session)
        return self.page("summary.html", summary=shown)

    def summary(
        self,
        run: Run,
        agent: Agent | None,
        state: SuspendedRunState,
        form: Mapping[str, str],
        session: Session,
    ) -> Summary:
        """What ``form`` would do, as the signed-in approver may make it."""
        forms = {c.id: fields_of(agent, c) for c in state.pending_calls}

        def judge(body: DecisionBody) -> Authority:
            return self.service.judge_decision(run.id, body, session.principal).authority

        return summary(agent, state, form, forms, judge=judge)

    def decide(self, run_id: str, form: Mapping[str, str], session: Session) -> Response:
        try:
            run = self.service.get_run(run_id)
            state = self.service.pending(run)
        except UnknownRunError:
            return self.page("missing.html", 404, session=session, run_id=run_id)
        except StateError as exc:
            return self.run_page(run_id, session, error=str(exc), status=409)
        if state is None or run.turn_digest != form.get("turn_digest"):
            return self.run_page(run_id, session, error=STALE, status=409)
        if form.get("check"):  # without script: the page again, saying what this form does
            return self.run_page(run_id, session, form=form)
        agent = self.agent(run)
        forms = {c.id: fields_of(agent, c) for c in state.pending_calls}
        try:
            body = decision_of(form, list(state.pending_calls), forms)
            result = self.service.record_decision(
                run_id, body, session.principal, sign_in=session.id
            )
        except (FormError, DecisionError) as exc:
            return self.run_page(run_id, session, error=str(exc), status=422, form=form)
        except ForbiddenError as exc:
            return self.run_page(run_id, session, error=str(exc), status=403, form=form)
        except ConflictError as exc:
            return self.run_page(run_id, session, error=explained(exc), status=409)
        query = urlencode({"notice": result.result})
        return RedirectResponse(f"/inbox/runs/{run_id}?{query}", 303, headers=HEADERS)

    def agent(self, run: Run) -> Agent | None:
        registry = self.service.registry
        return registry.get(run.agent) if run.agent in registry else None


def _notice(notice: str | None, run: Run) -> str | None:
    """A decision's notice, as true of the run now: one that finished since does not
    "resume"."""
    if notice == "recorded" and run.status.terminal:
        return f"Decision recorded. The run has since finished: {STATUS_WORDS[run.status.value]}."
    if notice == "recorded" and run.status is RunStatus.WAITING_FOR_APPROVAL:
        return "Decision recorded. The run went on and waits for a decision again."
    return NOTICES.get(notice or "")


def _verified(tokens: TokenVerifier, token: str) -> Proved:
    """A token of the issuer, verified; one that does not verify proves no one."""
    try:
        return tokens.verify(token)
    except ProblemError as exc:
        if exc.status == 401:
            raise SignInFailedError(exc.detail) from exc
        raise  # the issuer's keys cannot be had: no one's failure


def _operator(name: str) -> Principal:
    """Signed in with the API token (or to an open API): an operator, every role."""
    return Principal(id=check_name(name, "your name"), method="inbox", every_role=True)
