"""Reports as JSON lines, so clients and the aggregator can run in different processes.

File layout: the first line is a header naming the mechanism, its public configuration, the
per-client privacy event, and how each field is encoded; every further line is one user's
report. Example (GRR)::

    {"dpkit_local": 1, "kind": "grr", "config": {"kind": "grr", "domain_size": 4,
     "epsilon": 1.0}, "event": {"RandomizedResponse": {"epsilon": 1.0, "categories": 4}},
     "fields": {"y": {"dtype": "uint16", "shape": []}}, "insecure": false}
    {"y": 3}
    {"y": 0}

Packed bit fields (unary encoding, RAPPOR, CMS) are written as hex strings. ``insecure`` is true
when the reports came from ``dpkit.noise.seeded`` (not private). A client that randomizes its
own single value writes one line with :func:`report_line`; the aggregator reads any number of
files with :func:`read_jsonl` (or streams them, chunk by chunk, with :func:`aggregate_jsonl`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from fractions import Fraction
from typing import IO, Any

import numpy as np

from dpkit.events import Event, from_dict
from dpkit.noise import Source

from ._hashing import TabulationHash, tables_from_text
from .base import Reports, Tally
from .grr import GeneralizedRR
from .hadamard import HadamardResponse
from .hashing import BinaryLocalHashing, LocalHashing, OptimizedLocalHashing
from .numeric import LocalLaplace
from .ranges import HaarRanges, HierarchicalRanges
from .rappor import Rappor
from .sketches import CountMeanSketch, HadamardCountMeanSketch
from .unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding, UnaryEncoding

__all__ = ["aggregate_jsonl", "from_config", "header", "read_jsonl", "report_line",
           "write_jsonl"]

VERSION = 1


def _field_spec(name: str, a: np.ndarray) -> dict[str, Any]:
    spec: dict[str, Any] = {"dtype": a.dtype.str.lstrip("<>|="), "shape": list(a.shape[1:])}
    if a.ndim == 2 and a.dtype == np.uint8 and name == "bits":
        spec["encoding"] = "hex"
    return spec


def header(mechanism: Any, reports: Reports) -> dict[str, Any]:
    """The header line for ``reports`` made by ``mechanism`` (anything with config/event)."""
    return {
        "dpkit_local": VERSION,
        "kind": reports.kind,
        "config": mechanism.config(),
        "event": mechanism.event.to_dict(),
        "fields": {k: _field_spec(k, np.asarray(v)) for k, v in reports.arrays.items()},
        "insecure": bool(reports.insecure),
    }


def _encode(value: np.ndarray, spec: dict[str, Any]) -> Any:
    if spec.get("encoding") == "hex":
        return value.tobytes().hex()
    return value.tolist()


def _lines(reports: Reports, fields: dict[str, Any]) -> Iterator[str]:
    names = list(reports.arrays)
    arrays = [np.asarray(reports.arrays[k]) for k in names]
    for i in range(len(reports)):
        yield json.dumps({k: _encode(a[i], fields[k]) for k, a in zip(names, arrays,
                                                                      strict=True)})


def write_jsonl(fp: IO[str], mechanism: Any, reports: Reports) -> int:
    """Write a header and one line per report; returns the number of reports written."""
    head = header(mechanism, reports)
    fp.write(json.dumps(head) + "\n")
    count = 0
    for line in _lines(reports, head["fields"]):
        fp.write(line + "\n")
        count += 1
    return count


def report_line(mechanism: Any, value: Any, *, source: Source | None = None) -> str:
    """A single client's report of its own ``value``, as one JSON line (no header)."""
    reports = mechanism.randomize(np.asarray([value]), source=source)
    head = header(mechanism, reports)
    return next(_lines(reports, head["fields"]))


def _decode_chunk(rows: list[dict[str, Any]], fields: dict[str, Any]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, spec in fields.items():
        dtype = np.dtype(spec["dtype"])
        if spec.get("encoding") == "hex":
            buf = bytes.fromhex("".join(r[name] for r in rows))
            out[name] = np.frombuffer(buf, dtype=np.uint8).reshape(len(rows), *spec["shape"])
        else:
            out[name] = np.asarray([r[name] for r in rows], dtype=dtype).reshape(
                len(rows), *spec["shape"])
    return out


def _read_header(line: str) -> dict[str, Any]:
    head = json.loads(line)
    if not isinstance(head, dict) or head.get("dpkit_local") != VERSION:
        raise ValueError("not a dpkit local-reports file: the first line must be a header "
                         f'with "dpkit_local": {VERSION}')
    return head


def _iter_chunks(lines: Iterable[str], fields: dict[str, Any], chunk: int,
                 kind: str) -> Iterator[Reports]:
    rows: list[dict[str, Any]] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        rec = json.loads(line)
        if "dpkit_local" in rec:
            raise ValueError("found a second header inside a reports file; concatenate files "
                             "without their headers or read them separately")
        rows.append(rec)
        if len(rows) >= chunk:
            yield Reports(kind, _decode_chunk(rows, fields))
            rows = []
    if rows:
        yield Reports(kind, _decode_chunk(rows, fields))


def read_jsonl(fp: IO[str]) -> tuple[dict[str, Any], Reports]:
    """Read a header and all reports of one file."""
    it = iter(fp)
    head = _read_header(next(it))
    parts = list(_iter_chunks(it, head["fields"], 1 << 16, head["kind"]))
    if not parts:
        empty = {k: np.zeros((0, *s["shape"]), dtype=s["dtype"]) for k, s in head["fields"].items()}
        return head, Reports(head["kind"], empty, head["insecure"])
    reports = Reports.concat(parts)
    return head, Reports(reports.kind, reports.arrays, bool(head["insecure"]))


def aggregate_jsonl(fp: IO[str], mechanism: Any, *, chunk: int = 1 << 16) -> Tally:
    """Stream a reports file into ``mechanism.aggregate`` chunk by chunk (additive tallies).

    The header must match the mechanism's configuration, so reports made for another domain,
    ε or hash seed are refused rather than silently mis-decoded.
    """
    it = iter(fp)
    head = _read_header(next(it))
    if head["config"] != mechanism.config():
        raise ValueError(f"reports were made with {head['config']}, not {mechanism.config()}")
    total: Tally | None = None
    for part in _iter_chunks(it, head["fields"], chunk, head["kind"]):
        t = mechanism.aggregate(part)
        total = t if total is None else total + t
    if total is None:
        raise ValueError("the reports file holds no reports")
    return total


def event_of(head: dict[str, Any]) -> Event:
    """The per-client privacy event stated in a header."""
    return from_dict(head["event"])


def from_config(config: dict[str, Any]) -> Any:
    """Rebuild a mechanism from its public configuration (the header's ``config``)."""
    cfg = dict(config)
    kind = cfg.pop("kind", None)
    simple = {"grr": GeneralizedRR, "oue": OptimizedUnaryEncoding, "sue": SymmetricUnaryEncoding,
              "ue": UnaryEncoding, "blh": BinaryLocalHashing, "olh": OptimizedLocalHashing,
              "lh": LocalHashing, "hr": HadamardResponse, "hier": HierarchicalRanges,
              "haar": HaarRanges, "laplace": LocalLaplace}
    if kind in ("rappor", "cms", "hcms"):
        return _sketch_from_config(kind, cfg)
    if kind not in simple:
        raise ValueError(f"unknown local mechanism kind {kind!r}; known: {sorted(simple)}")
    cls = simple[kind]
    if "domain_size" in cfg:
        d = cfg.pop("domain_size")
        return cls(d, **cfg)
    return cls(**cfg)


def _sketch_from_config(kind: str, cfg: dict[str, Any]) -> Any:
    if kind == "rappor":
        k = cfg["num_cohorts"] * cfg["num_hashes"]
        hashes = TabulationHash(tables_from_text(cfg.pop("tables"), k), cfg["num_bits"])
        for key in ("f", "p", "q"):
            cfg[key] = Fraction(cfg[key])
        return Rappor(hashes=hashes, **cfg)
    hashes = TabulationHash(tables_from_text(cfg.pop("tables"), cfg["num_hashes"]), cfg["width"])
    cls = CountMeanSketch if kind == "cms" else HadamardCountMeanSketch
    return cls(hashes=hashes, **cfg)
