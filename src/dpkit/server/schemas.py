"""The request and answer bodies of the HTTP contract (/work/prompts/service_api.md, served
as ``/openapi.json``). Requests refuse unknown fields (a typo must not silently become a
default) and carry bounds that keep absurd values out before the curator sees them; the
curator checks every value again with its own texts."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dpkit.engine.load import MAX_TEXT_LENGTH

__all__ = [
    "AnalystIn", "AnalystOut", "AnalystsOut", "BudgetIn", "BudgetOut", "CdfIn", "ColumnOut",
    "HistoryItemOut", "HistoryOut", "MarginalsIn", "MeOut", "PreviewIn", "PreviewOut",
    "QuantilesIn", "QueryIn", "ResultOut", "SyntheticIn", "TableIn", "TableOut", "TablesOut",
]

MAX_SQL = 20_000
Eps = Field(default=None, gt=0, le=1e6, allow_inf_nan=False)
Noise = Literal["laplace", "gaussian"]
Name = Field(min_length=1, max_length=128)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PreviewIn(_In):
    sql: str = Field(min_length=1, max_length=MAX_SQL)
    epsilon: float | None = Eps
    accuracy: float | None = Eps
    delta: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    noise: Noise | None = None
    level: float = Field(default=0.95, gt=0, lt=1)
    weights: dict[str, float] | None = None
    diagnostics: bool = Field(
        default=True,
        description="measure the rows dropped and the values clamped by bounding with a share "
                    "of the budget (false: the outputs get all of it); part of the planned "
                    "request, so a preview prices the query as it will run")
    # with "accuracy" for AVG / VAR / quantiles, whose error depends on a group's size: the
    # fewest rows of a group the target is for (the refusal without it named Python's spelling)
    accuracy_rows: float | None = Field(default=None, gt=0, le=1e15, allow_inf_nan=False)


class QueryIn(PreviewIn):
    """A query as its preview was priced: the same fields."""


class _ReleaseIn(_In):
    table: str = Name
    epsilon: float | None = Eps
    accuracy: float | None = Eps
    level: float = Field(default=0.95, gt=0, lt=1)
    where: str | None = Field(default=None, max_length=MAX_SQL)
    bins: int | None = Field(default=None, ge=2, le=1 << 20)
    diagnostics: bool = True  # rows dropped / outside the bounds, from 5% of the budget


class CdfIn(_ReleaseIn):
    column: str = Name
    # the grid's cells: equal, log-scale (long tails), or log-scale when the bounds span four
    # orders of magnitude (a rule on the declared bounds: public)
    grid: Literal["linear", "log", "auto"] = "linear"


class QuantilesIn(CdfIn):
    probabilities: list[float] = Field(min_length=1, max_length=1000)


class MarginalsIn(_ReleaseIn):
    columns: list[str | list[str]] = Field(min_length=1, max_length=64)
    k: int | None = Field(default=None, ge=1, le=8)


class SyntheticIn(_In):
    table: str = Name
    columns: list[str] = Field(min_length=1, max_length=64)
    epsilon: float = Field(gt=0, le=1e6, allow_inf_nan=False)
    rows: int | None = Field(default=None, ge=1, le=1_000_000)
    method: Literal["auto", "factorization", "mwem", "mst"] = "auto"
    where: str | None = Field(default=None, max_length=MAX_SQL)
    diagnostics: bool = True


class AnalystIn(_In):
    name: str = Name
    epsilon: float | None = Eps
    delta: float | None = Field(
        default=None, ge=0, le=1, allow_inf_nan=False,
        description="the analyst's delta cap beside epsilon (default on an 'approx' project: "
                    "the project's delta in the same proportion as epsilon)")
    expires_days: float | None = Field(default=None, gt=0, le=36_600, allow_inf_nan=False)


class TableIn(_In):
    name: str = Name
    source: str = Field(min_length=1, max_length=4096,
                        description="a CSV/Parquet/JSON/DuckDB file, or a folder of CSV/"
                                    "Parquet/JSON files (a dataset, its name ending in its "
                                    "format: `visits.parquet/`), under the service's data "
                                    "root (`dpkit serve --data-root`; relative: from there)")
    privacy_unit: str | None = Field(default=None, max_length=128)
    max_rows_per_unit: Annotated[int, Field(ge=1, le=1_000_000)] | Literal["auto"] | None = Field(
        default=None,
        description="rows one unit may contribute, or \"auto\": chosen privately, charged "
                    "epsilon 0.1 to the owner (docs/curator.md)")
    bounds: dict[str, tuple[float, float]] | None = None
    domains: dict[str, list[str | int | float | bool]] | None = None
    types: dict[str, Annotated[str, Field(max_length=64)]] | Literal["infer"] | None = Field(
        default=None,
        description="how a CSV/JSON source's columns are read, as DuckDB types ({\"code\": "
                    "\"VARCHAR\"}); a private table's other columns: DOUBLE with bounds, "
                    "the domain keys' type, else VARCHAR. \"infer\": DuckDB's sniffer, whose "
                    "types follow the rows and are shown to analysts")
    not_null: list[str] | None = Field(
        default=None, max_length=4096,
        description="columns that hold no NULL/NaN, checked at load (AVG of one shares "
                    "COUNT(*)); a replace keeps none it does not name again")
    public: bool = False
    replace: bool = False
    description: str = Field(default="", max_length=2000)
    max_text_length: int | None = Field(
        default=MAX_TEXT_LENGTH, ge=1, le=1_000_000_000,
        description="text values of a private table are cut to this many characters at load "
                    "(null: not cut)")
    drop_privacy_unit: bool = Field(
        default=False, description="with replace: make a table declared with a privacy unit "
                                   "record level on purpose")


class BudgetIn(_In):
    epsilon: float | None = Field(gt=0, le=1e6, allow_inf_nan=False)
    delta: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)


# ---------------------------------------------------------------------- answers


class MeOut(BaseModel):
    name: str
    role: Literal["analyst", "owner"]


class ColumnOut(BaseModel):
    name: str
    type: str
    bounds: list[float] | None = None
    domain: list[Any] | None = None


class TableOut(BaseModel):
    name: str
    privacy_unit: str | None
    max_rows_per_unit: int | None
    not_null: list[str] = []
    rows_public: bool = False
    public: bool = False
    description: str = ""
    max_text_length: int | None = None
    columns: list[ColumnOut]


class TablesOut(BaseModel):
    tables: list[TableOut]


class PreviewOut(BaseModel):
    epsilon: float
    cost: float
    delta: float
    remaining: float
    affordable: bool
    expected_error: dict[str, float | None]
    notes: list[str] = []
    text: str


class BudgetOut(BaseModel):
    analyst: str
    spent_epsilon: float
    spent_delta: float
    cap_epsilon: float | None
    remaining_epsilon: float
    project_remaining_epsilon: float
    project_epsilon: float
    accountant: str
    timing_delta: float | None = Field(
        default=None,
        description="the project runs with constant work (a query's running time does not "
                    "depend on the data) and each release's delta includes this timing term; "
                    "null: it runs without constant work")


class ChargeOut(BaseModel):
    epsilon: float
    delta: float


class ResultOut(BaseModel):
    columns: list[str]
    kinds: dict[str, str] = {}  # column -> "group" (a released key) or its value kind
    rows: list[list[Any]]
    intervals: dict[str, list[list[float | None]]]
    level: float
    warnings: list[str]
    notes: list[str] = []
    insecure: bool = False
    ledger_seq: int | None = None  # the ledger row that charged this answer
    charge: ChargeOut
    budget: BudgetOut


class HistoryItemOut(BaseModel):
    time: str
    sql: str | None
    kind: str
    description: str | None = None  # a fit: model, label and N̂; otherwise the query's text
    epsilon: float
    delta: float


class HistoryOut(BaseModel):
    items: list[HistoryItemOut]


class AnalystOut(BaseModel):
    name: str
    status: Literal["active", "revoked"]
    cap_epsilon: float | None
    cap_delta: float | None = None
    spent_epsilon: float
    expires: str | None = None  # when its token stops opening the project (ISO-8601 UTC)


class AnalystsOut(BaseModel):
    analysts: list[AnalystOut]


class NewAnalystOut(BaseModel):
    name: str
    token: str
    expires: str | None = None
