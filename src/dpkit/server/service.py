"""One process's service state: the curator pool, the authenticator, the limits, the audit
log; and :func:`caller`, the dependency every protected route starts with."""

from __future__ import annotations

import datetime as _dt
import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from dpkit.noise import token_hex
from dpkit.server.answers import Answer
from dpkit.server.answers_pg import open_answers
from dpkit.server.auth import Authenticator, Identity
from dpkit.server.config import ServerConfig
from dpkit.server.limits import AuditLog, RateLimiter
from dpkit.server.pool import Pool
from dpkit.server.problems import Problem, for_analyst, problem_of

__all__ = ["AnalystCall", "Caller", "OwnerCall", "Service", "caller", "owner_caller"]

log = logging.getLogger("dpkit.server")
bearer = HTTPBearer(auto_error=False, description="an analyst token (`dpkit analyst add`), "
                    "the owner token (`dpkit owner-token`) or, where configured, an OIDC JWT")


class Service:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        answers = open_answers(config.project, store=config.answers_store,
                               dsn=config.answers_dsn, count=config.answers_kept,
                               max_age=config.answers_max_age)
        self.pool = Pool(config.project, timeout=config.timeout, answers=answers)
        self.auth = Authenticator(self.pool.owner.ledger, config.owner_token_sha256,
                                  config.oidc)
        self.limiter = RateLimiter(config.rate, config.burst)
        self.audit = AuditLog(config.audit_path)
        self.pacing = config.pacing()  # answers that touched rows leave at timing classes

    def close(self) -> None:
        self.pool.close()
        self.audit.close()


@dataclass(frozen=True)
class Caller:
    """The authenticated caller and the service, for one request."""

    who: Identity
    token: str
    service: Service
    request: Request

    def run(self, call: Any, *, timeout: float | None = None, exclusive: bool = False,
            render: Any = None, reads_rows: bool = False) -> Any:
        """``call(curator)`` as this caller, under the service's timeout (``exclusive``: the
        owner's curator alone, no timeout: :meth:`Pool.exclusive`). Past the timeout its
        answer is kept as this request would have sent it (``render``: the call's result to
        the response; a failure as the problem this caller would have seen). ``reads_rows``:
        the call may read rows (a query, a release, a fit), so its answer, whatever it is,
        leaves at its timing class (:mod:`dpkit.server.pacing`): a failure after the charge
        too."""
        pool = self.service.pool
        if reads_rows:  # its top class: the timeout this call runs under
            self.request.state.paced = timeout if timeout is not None else pool.timeout

        def finish(future: Future[Any]) -> Answer:  # a late answer's, once its work ends
            exc = future.exception()
            if exc is None:
                out = future.result()
                answer = Answer.of(render(out) if render is not None else out)
            else:
                cause = (exc if isinstance(exc, Exception) and not isinstance(exc, Problem)
                         else None)
                answer = Answer.of(self.answer(problem_of(exc), cause))
            self._audit_late(answer.status)
            return answer

        try:
            if exclusive:
                return pool.exclusive(call)
            return pool.run(self.who, self.token, call, timeout=timeout, finish=finish,
                            let_go=self._let_go(timeout) if reads_rows else None)
        except Problem as problem:
            raise self.answer(problem, None) from None
        except Exception as exc:  # the curator's refusals, with their own texts
            raise self.answer(problem_of(exc), exc) from exc

    def _let_go(self, timeout: float | None) -> Any:
        """When a call that read rows lets its curator go: at its answer's class boundary (a
        late one's at its late class), not when its work ended. The caller's next request
        waits for that lock, and a free one (its budget) would time the work to the
        millisecond (FINDINGS.md L1)."""
        pacing, arrived = self.service.pacing, getattr(self.request.state, "arrived", None)
        if arrived is None or not pacing.on:
            return None
        top, keep = timeout or self.service.pool.timeout, self.service.pool.answers.max_age

        def let_go(release: Any) -> None:
            pacing.defer(pacing.left(arrived, top, keep), release)

        return let_go

    def _audit_late(self, status: int) -> None:
        """The audit line of a request that was answered 504 and went on: its charge, made
        after the 504's own line was written, and the status its kept answer has."""
        state = self.request.state
        self.service.audit.write({
            "time": _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds"),
            "analyst": getattr(state, "analyst", None), "role": getattr(state, "role", None),
            "method": self.request.method, "endpoint": self.request.url.path, "late": True,
            "status": status, "charge": getattr(state, "charge", None)})

    def answer(self, problem: Problem, exc: Exception | None) -> Problem:
        """The problem this caller sees: the owner every detail, an analyst no server path
        (:func:`~dpkit.server.problems.for_analyst`; the detail goes to the log)."""
        return shown(problem, exc, owner=self.who.owner, who=self.who.name)

    def charged(self, epsilon: float, delta: float) -> None:
        self.request.state.charge = {"epsilon": epsilon, "delta": delta}
        if not getattr(self.request.state, "paced", None):  # a charged answer read rows,
            self.request.state.paced = True  # whatever its route


def caller(request: Request,
           creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Caller:
    """Authenticate (401), then rate-limit (429) the credential."""
    service: Service = request.app.state.service
    header = request.headers.get("authorization")
    if creds is None and header:
        raise Problem(401, "unauthenticated",
                      "the Authorization header must be 'Bearer <token>'",
                      {"WWW-Authenticate": 'Bearer realm="dpkit"'})
    token = creds.credentials if creds is not None else ""
    try:
        who = service.auth(token)
    except Problem as problem:  # not authenticated: shown as to an analyst
        raise shown(problem, None, owner=False, who="?") from None
    except Exception as exc:  # the ledger could not be read: 503, not a 500
        raise shown(problem_of(exc), exc, owner=False, who="?") from exc
    request.state.analyst, request.state.role = who.name, who.role
    # one bucket per analyst, not per credential: an identity provider mints a fresh JWT
    # at each sign-in, and each was a fresh burst (FINDINGS.md J5)
    service.limiter.take(f"{who.role}:{who.name}")
    return Caller(who, token.strip(), service, request)


def shown(problem: Problem, exc: Exception | None, *, owner: bool, who: str) -> Problem:
    """``problem`` as the caller may see it; what an analyst is not shown is logged under a
    reference that its answer names (the owner finds the cause in the service's log)."""
    ref = "ref-" + token_hex(16)[:8]
    out = problem if owner else for_analyst(problem, ref, exc)
    if (problem.status >= 500 and exc is not None) or out is not problem:
        log.log(logging.ERROR if problem.status >= 500 else logging.WARNING,
                "%s: %s %s answered %d for %s: %s", ref,
                type(exc).__name__ if exc else "Problem", problem.slug, problem.status, who,
                problem.detail, exc_info=exc if problem.status >= 500 else None)
    return out


def owner_caller(c: Annotated[Caller, Depends(caller)]) -> Caller:
    """Only the owner's credential passes (403 for an analyst's)."""
    if not c.who.owner:
        raise Problem(403, "forbidden",
                      f"this needs the owner's credential; analyst {c.who.name!r} cannot do "
                      f"it. Nothing was changed")
    return c


AnalystCall = Annotated[Caller, Depends(caller)]  # any valid credential
OwnerCall = Annotated[Caller, Depends(owner_caller)]  # the owner's only
