"""RFC 9457 problem details: every error the service gives, with the curator's own text.

:func:`problem_of` maps the library's exceptions to statuses: a refused query (its SQL, or
the budget) or value is 409, a missing right 403, a ledger or database that cannot be
used 503 (nothing charged: the charge is the ledger's transaction). 422 is for a body that
does not match the endpoint's schema; a schema-valid body the curator refuses is a 409.
Nothing a client sends reaches the generic 500: that would be a bug, and says so.

:func:`for_analyst` is what an analyst (or a caller not yet authenticated) sees of a problem:
no server path and no exception text. A 5xx gets a fixed text and a reference to the
service's log, where the detail is; a refusal keeps the curator's text with any filesystem
path replaced. The owner sees every detail (their own endpoints, their own machine).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["HTTP_DIAGNOSTICS_OFF", "PROBLEM_TYPE", "Problem", "for_analyst", "http_text",
           "problem_body", "problem_of", "problem_title"]

PROBLEM_TYPE = "https://dpkit.dev/problems/"
MEDIA_TYPE = "application/problem+json"

_TITLES = {
    400: "Bad request",
    401: "Not authenticated",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Request refused",  # what was refused: _REFUSED, then the endpoint's (_ROUTES)
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Invalid request",
    429: "Too many requests",
    500: "Internal error",
    503: "Service unavailable",
    504: "Request timed out",  # a query, a release, a fit
}
# a refusal (409) titled by its cause, then by what its endpoint does: every 409 was titled
# "Query refused", a table registration's and an analyst's too (the second first-hour walk)
_REFUSED = {"over-budget": "Over budget", "outside-data-root": "Source outside the data root",
            "busy": "Project data in use"}
_ROUTES = (("/v1/tables", "Table not registered"), ("/v1/query", "Query refused"),
           ("/v1/preview", "Query refused"), ("/v1/release", "Release refused"),
           ("/v1/fit", "Fit refused"), ("/v1/analysts", "Analyst change refused"))
_OTHERS = {"outcome-unknown": "Charge outcome unknown"}


def problem_title(status: int, slug: str, path: str = "") -> str:
    """The ``title`` of a problem: its cause's, else, for a refusal, its endpoint's (``path``,
    the request's), else its status's."""
    if slug in _OTHERS:
        return _OTHERS[slug]
    if status == 409:
        if slug in _REFUSED:
            return _REFUSED[slug]
        for prefix, title in _ROUTES:
            if path == prefix or path.startswith(prefix + "/"):
                return title
    return _TITLES.get(status, "Error")


@dataclass(eq=False)
class Problem(Exception):  # noqa: N818 - an answer (RFC 9457), raised to end a request
    """An error answer: ``status``, a short ``slug`` (the type's last part) and the detail."""

    status: int
    slug: str
    detail: str
    headers: dict[str, str] | None = None
    extra: dict[str, Any] | None = None

    def __str__(self) -> str:
        return self.detail

    def body(self, path: str = "") -> dict[str, Any]:
        """The problem+json body; ``path``: the request's, which a refusal's title names."""
        return problem_body(self.status, self.slug, self.detail, self.extra, path)


def problem_body(status: int, slug: str, detail: str,
                 extra: dict[str, Any] | None = None, path: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"type": PROBLEM_TYPE + slug,
                            "title": problem_title(status, slug, path),
                            "status": status, "detail": detail}
    if extra:
        body.update(extra)
    return body


#: How a request turns the answer diagnostics off: the field of its body (the console's own
#: front end shows its checkbox's name instead, static/js/views.js ``consoleText``).
HTTP_DIAGNOSTICS_OFF = '"diagnostics": false'


def http_text(text: str) -> str:
    """A curator's text (a note, a refusal) as an HTTP user acts on it: the request field,
    where the Python API's keyword was named (:func:`dpkit.engine.spec.respell`)."""
    from dpkit.engine.spec import DROP_UNIT_ON, REPLACE_ON, respell

    return respell(text, HTTP_DIAGNOSTICS_OFF, {REPLACE_ON: '"replace": true',
                                                DROP_UNIT_ON: '"drop_privacy_unit": true'})


def problem_of(exc: BaseException) -> Problem:
    """The problem an exception raised by the curator (or the service) stands for."""
    from dpkit.accounting import BudgetExceeded
    from dpkit.engine.ledger_rows import ChargeOutcomeUnknown, LedgerError
    from dpkit.engine.spec import QueryError

    if isinstance(exc, Problem):
        return exc
    text = http_text(str(exc)) or type(exc).__name__
    if isinstance(exc, BudgetExceeded):
        return Problem(409, "over-budget", text)
    if isinstance(exc, QueryError):
        return Problem(409, "refused-query", text)
    if isinstance(exc, PermissionError):
        return Problem(403, "forbidden", text)
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return Problem(409, "refused", text)  # a source file named by the owner
    if isinstance(exc, RuntimeError) and not isinstance(exc, LedgerError) and "lock" in text:
        # DuckDB refused the data file's write lock (a load while others read it)
        return Problem(409, "busy",
                       f"{text}. Another process has the project's data open: stop the "
                       f"other service processes (or run the service with --workers 1) to "
                       f"register a table; nothing was changed")
    if isinstance(exc, ChargeOutcomeUnknown):  # the COMMIT's answer was lost: never "not"
        return Problem(503, "outcome-unknown", f"{text}. {OUTCOME_UNKNOWN}")
    driver = type(exc).__module__.split(".")[0] in ("psycopg", "psycopg2", "psycopg_pool")
    if isinstance(exc, (LedgerError, sqlite3.Error, OSError)) or driver:
        return Problem(503, "unavailable",
                       f"the project's ledger or data cannot be used now ({text}); nothing "
                       f"was charged by this request. Try again later or tell the owner")
    if isinstance(exc, RuntimeError) and "cannot open the project's data" in text:
        return Problem(503, "unavailable", text)
    if isinstance(exc, (ValueError, TypeError, KeyError, LookupError, ImportError)):
        # a body that matches the schema but that the curator refuses (an epsilon above
        # the project's, a name already taken ...): refused, like a query; 422 is kept for
        # bodies that do not match the schema at all
        return Problem(409, "refused", text)
    return Problem(500, "internal", f"internal error ({type(exc).__name__}); it was logged")


OUTCOME_UNKNOWN = ("Whether this request was charged is unknown: nothing was released, and the "
                   "charge may stand. Look for it in GET /v1/history before you send it again "
                   "(a retry is charged again)")
_FIXED = {
    503: "the project's ledger or data cannot be used now; nothing was charged by this "
         "request. Try again later, or tell the owner (the service logged the cause under this "
         "answer's 'instance')",
    500: "internal error; it was logged under this answer's 'instance'. Nothing was released",
}
# an absolute (or ~ / ./ ../) filesystem path; the API's own routes are not paths
_PATH = re.compile(r"(?<![\w/.:~)\]-])(?:~|\.{1,2})?/(?!v1/|v1\b|openapi\.json|docs\b)"
                   r"[^\s'\"`,;()<>]*[^\s'\"`,;()<>.:]")


def for_analyst(problem: Problem, ref: str, exc: BaseException | None = None) -> Problem:
    """``problem`` as an analyst may see it. Made from an exception ``exc``, a 5xx (a ledger or
    database error, a bug) says a fixed text, its ``instance`` names ``ref`` (log the detail
    under it), and a
    refusal caused by the machine's files (a missing file, a lock) says only that the data
    cannot be read; any other detail (the curator's refusals, the service's own answers)
    keeps its text with each filesystem path replaced by ``<path>``."""
    if problem.slug == "outcome-unknown":
        detail = f"the ledger's answer to this request's charge was lost. {OUTCOME_UNKNOWN}"
    elif problem.status >= 500 and exc is not None:
        detail = _FIXED.get(problem.status, _FIXED[500])
    elif isinstance(exc, OSError) or (problem.status == 409 and problem.slug == "busy"):
        detail = ("the project's data cannot be read now; nothing was charged by this request. "
                  "Tell the owner (the service logged the cause under this answer's 'instance')")
    else:
        detail = _PATH.sub("<path>", problem.detail)
    if detail == problem.detail:
        return problem
    # the reference goes in RFC 9457's 'instance', not in the detail: a detail stays a function
    # of public things (the side-channel fuzzer compares it between neighbouring datasets)
    return replace(problem, detail=detail,
                   extra={**(problem.extra or {}), "instance": f"urn:dpkit:log:{ref}"})
