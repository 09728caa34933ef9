"""The owner's endpoints: analysts, their tokens and budgets. Only the owner's credential
reaches them (403 for an analyst's); each change is a ledger row, as from the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from dpkit.engine.curator import Curator
from dpkit.engine.roles import token_expiry
from dpkit.server import schemas as s
from dpkit.server.paths import confine, opened
from dpkit.server.problems import Problem
from dpkit.server.routes import PROBLEMS
from dpkit.server.service import OwnerCall
from dpkit.server.views import clean, table_json

__all__ = ["router"]

router = APIRouter(prefix="/v1")


def _analysts(cur: Curator) -> dict[str, Any]:
    b = cur.budget()
    rows = []
    for name, info in cur.analysts().items():
        spent = b.per_analyst.get(name, {}).get("spent")
        ends = token_expiry(cur.ledger, name)
        rows.append({"name": name, "status": "active" if info["active"] else "revoked",
                     "cap_epsilon": info["epsilon"], "cap_delta": info.get("delta"),
                     "spent_epsilon": float(spent) if spent is not None
                     else float(cur.budget(name).spent),
                     "expires": None if ends is None else ends.isoformat()})
    return {"analysts": clean(rows)}


@router.get("/analysts", response_model=s.AnalystsOut, responses=PROBLEMS)
def list_analysts(c: OwnerCall) -> Any:
    """Every analyst, active or revoked, with its cap and what it spent."""
    return c.run(_analysts)


@router.post("/analysts", status_code=201, response_model=s.NewAnalystOut,
             responses=PROBLEMS)
def add_analyst(body: s.AnalystIn, c: OwnerCall) -> Any:
    """Add an analyst; its token is in this answer only (the ledger keeps its hash)."""
    def call(cur: Curator) -> dict[str, Any]:
        token = cur.add_analyst(body.name, epsilon=body.epsilon, delta=body.delta,
                                expires_days=body.expires_days)
        ends = token_expiry(cur.ledger, body.name)
        return {"name": body.name, "token": token,
                "expires": None if ends is None else ends.isoformat()}

    return c.run(call)


@router.delete("/analysts/{name}", status_code=204, response_class=Response,
               responses=PROBLEMS)
def revoke_analyst(name: str, c: OwnerCall) -> Response:
    """Revoke an analyst's token (its history stays): 404 for no such analyst, 409 if it was
    revoked already."""
    def call(cur: Curator) -> None:
        _known(cur, name)
        try:
            cur.revoke_analyst(name)
        except ValueError as exc:
            raise Problem(409, "refused", str(exc)) from None

    c.run(call)
    return Response(status_code=204)


@router.put("/analysts/{name}/budget", response_model=s.AnalystsOut, responses=PROBLEMS)
def set_budget(name: str, body: s.BudgetIn, c: OwnerCall) -> Any:
    """Set (or, with null, remove) an analyst's own epsilon cap and the delta cap beside it;
    answers the analysts."""
    def call(cur: Curator) -> Any:
        _known(cur, name)
        cur.set_analyst_budget(name, body.epsilon, body.delta)
        return _analysts(cur)

    return c.run(call)


def _known(cur: Curator, name: str) -> None:
    if name not in cur.analysts():
        raise Problem(404, "not-found", f"no analyst {name!r}; the analysts are "
                                        f"{sorted(cur.analysts())} (add one with POST "
                                        f"/v1/analysts)")


@router.post("/tables", status_code=201, response_model=s.TableOut, responses=PROBLEMS)
def register_table(body: s.TableIn, c: OwnerCall) -> Any:
    """Register (or, with ``replace``, load again) a table from a file under the service's
    data root (``dpkit serve --data-root``; 409 outside it); answers its public declarations.
    Spends nothing. The load needs the data file to itself: with several service processes it
    is refused (409) until the others stop."""
    config = c.service.config
    root, project = config.data_root_path, Path(config.project)
    checked = confine(body.source, root, project)

    def call(cur: Curator) -> Any:
        bounds = {k: tuple(v) for k, v in body.bounds.items()} if body.bounds else None
        # the load reads the files opened here, never the name checked above (paths.opened)
        with opened(checked, root, project) as source:
            meta = cur.add_table(body.name, source, privacy_unit=body.privacy_unit,
                                 max_rows_per_unit=body.max_rows_per_unit, bounds=bounds,
                                 domains=body.domains, not_null=body.not_null,
                                 public=body.public,
                                 replace=body.replace, description=body.description,
                                 max_text_length=body.max_text_length,
                                 drop_privacy_unit=body.drop_privacy_unit,
                                 types=body.types)
        return table_json(meta)

    return c.run(call, exclusive=True)
