"""BaseStore operations (get, put, search, list_namespaces, TTL) as SQL over ``recall_items``.

Namespaces are stored as their labels joined by ``.`` (labels cannot contain one), so a
namespace prefix is the byte range ``[p + ".", p + "/")``: an index range scan, no LIKE escaping.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import (
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
    get_text_at_path,
    tokenize_path,
)

from .._errors import RecallError
from ._codec import dump_json, load_json
from ._db import Tx
from ._ids import check_id
from ._schema import SEARCH_BODY_MAX, SEARCH_SEPARATORS

_COLS = "i.prefix, i.key, i.value, i.created_at, i.updated_at, i.ttl_minutes"
_LIVE = "(i.expires_at IS NULL OR i.expires_at > {now})"


def encode_ns(namespace: Sequence[str]) -> str:
    return ".".join(namespace)


def decode_ns(prefix: str) -> tuple[str, ...]:
    return tuple(prefix.split("."))


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def ns_condition(
    namespace_prefix: Sequence[str], column: str = "i.prefix"
) -> tuple[str, list[Any]]:
    """SQL matching every namespace that starts with ``namespace_prefix``."""
    if not namespace_prefix:
        return "1=1", []
    p = encode_ns(namespace_prefix)
    return f"({column} = ? OR ({column} >= ? AND {column} < ?))", [p, p + ".", p + "/"]


def _row_item(row: Sequence[Any]) -> Item:
    return Item(
        value=load_json(row[2]),
        key=row[1],
        namespace=decode_ns(row[0]),
        created_at=_ts(row[3]),
        updated_at=_ts(row[4]),
    )


def _row_search_item(row: Sequence[Any], score: float | None) -> SearchItem:
    return SearchItem(
        namespace=decode_ns(row[0]),
        key=row[1],
        value=load_json(row[2]),
        created_at=_ts(row[3]),
        updated_at=_ts(row[4]),
        score=score,
    )


def _refresh(tx: Tx, rows: Iterable[Sequence[Any]]) -> None:
    keyed = [(r[5] * 60.0, r[0], r[1]) for r in rows if r[5] is not None]
    for ttl_seconds, prefix, key in keyed:
        tx.run_write(
            "UPDATE recall_items SET expires_at = {now} + ? WHERE prefix = ? AND key = ?",
            (ttl_seconds, prefix, key),
        )


# --- get -------------------------------------------------------------------------------------


def get(tx: Tx, op: GetOp, refresh_default: bool) -> Item | None:
    row = tx.one(
        f"SELECT {_COLS} FROM recall_items i WHERE i.prefix = ? AND i.key = ? AND {_LIVE}",
        (encode_ns(op.namespace), op.key),
    )
    if row is None:
        return None
    if _wants_refresh(op.refresh_ttl, refresh_default):
        _refresh(tx, [row])
    return _row_item(row)


def _wants_refresh(flag: bool | None, default: bool) -> bool:
    return default if flag is None else bool(flag)


# --- put -------------------------------------------------------------------------------------


def body_text(value: dict[str, Any], fields: Sequence[str] | None) -> str:
    """The text a `query` searches: the given fields, or every string in the value."""
    if fields:
        parts: list[str] = []
        for field in fields:
            parts += [t for t in get_text_at_path(value, tokenize_path(field)) if t]
        return " ".join(parts)
    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return " ".join(out)


_SEPARATORS = re.compile(SEARCH_SEPARATORS + "+")


def search_body(text: str, dialect: str) -> str:
    """What the full-text index holds of ``text``. PostgreSQL: ASCII punctuation turned into
    spaces and the first ``SEARCH_BODY_MAX`` characters (see ``_schema.SEARCH_SEPARATORS``), so
    its words are those SQLite's FTS5 finds, and a long value still fits in a tsvector. SQLite:
    the text itself, whole."""
    if dialect != "postgres":
        return text
    return _SEPARATORS.sub(" ", text)[:SEARCH_BODY_MAX]


def index_texts(
    value: dict[str, Any], op_index: Any, config: IndexConfig | None
) -> list[tuple[str, str]]:
    """(field, text) pairs to embed for one put; empty when no index applies."""
    if config is None or op_index is False:
        return []
    fields = op_index if isinstance(op_index, list) else list(config.get("fields") or ["$"])
    out: list[tuple[str, str]] = []
    for field in fields:
        if field == "$":
            out.append(("$", dump_json(value)))
            continue
        texts = get_text_at_path(value, tokenize_path(field))
        for i, text in enumerate(texts):
            out.append((f"{field}#{i}" if len(texts) > 1 else field, text))
    return out


def put(
    tx: Tx,
    op: PutOp,
    *,
    body_fields: Sequence[str] | None,
    vectors: list[tuple[str, list[float]]] | None,
) -> None:
    prefix = encode_ns(op.namespace)
    if op.value is None:
        tx.run("DELETE FROM recall_items WHERE prefix = ? AND key = ?", (prefix, op.key))
        tx.run("DELETE FROM recall_vectors WHERE prefix = ? AND key = ?", (prefix, op.key))
        return
    if not isinstance(op.value, dict):
        raise RecallError(
            f"a store value must be a dict, got {type(op.value).__name__}; wrap it, e.g. "
            '{"value": ...}',
            code="invalid_value",
        )
    text = dump_json(op.value, what=f"value for {op.namespace}/{op.key}")
    fields = op.index if isinstance(op.index, list) else body_fields
    body = "" if op.index is False else search_body(body_text(op.value, fields), tx.dialect)
    ttl = op.ttl
    tx.run(
        "INSERT INTO recall_items (prefix, key, value, body, created_at, updated_at, expires_at, "
        "ttl_minutes) VALUES (?, ?, ?, ?, {now}, {now}, "
        "{now} + CAST(? AS DOUBLE PRECISION), CAST(? AS DOUBLE PRECISION)) "
        "ON CONFLICT (prefix, key) DO UPDATE SET value = excluded.value, body = excluded.body, "
        "updated_at = excluded.updated_at, expires_at = excluded.expires_at, "
        "ttl_minutes = excluded.ttl_minutes",
        (prefix, op.key, text, body, None if ttl is None else ttl * 60.0, ttl),
    )
    if vectors is not None:
        tx.run("DELETE FROM recall_vectors WHERE prefix = ? AND key = ?", (prefix, op.key))
        tx.many(
            "INSERT INTO recall_vectors (prefix, key, field, vector) VALUES (?, ?, ?, ?)",
            [(prefix, op.key, field, dump_json(vec)) for field, vec in vectors],
        )


# --- search ----------------------------------------------------------------------------------


def _json_path_sqlite(path: Sequence[str]) -> str:
    parts = []
    for label in path:
        if '"' in label or "\\" in label:
            raise RecallError(f"filter key {label!r} cannot contain quotes", code="invalid_value")
        parts.append(f'"{label}"')
    return "$." + ".".join(parts)


def _bound_number(path: Sequence[str], op: str, value: Any) -> float:
    """A range filter's bound as the float both engines compare with. NaN is refused: it
    orders above every number on PostgreSQL and matches nothing on SQLite, and no item can
    hold it anyway; an infinity is a plain bound."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            bound = float(value)
        except OverflowError:  # an int past any float: beyond every number an item holds
            bound = math.inf if value > 0 else -math.inf
        if not math.isnan(bound):
            return bound
    raise RecallError(
        f"filter {op} for {'.'.join(path)!r} needs a number, got {value!r}; compare with an "
        "int or a float (not NaN)",
        code="invalid_value",
    )


def filter_sql(tx: Tx, flt: dict[str, Any] | None) -> tuple[str, list[Any]]:
    """Compile a BaseStore filter (``$eq $ne $gt $gte $lt $lte`` and nested dicts) to SQL."""
    if not flt:
        return "1=1", []
    clauses: list[str] = []
    params: list[Any] = []
    pg = tx.dialect == "postgres"

    def extract(path: Sequence[str]) -> tuple[str, list[Any]]:
        if pg:
            return "(i.value #> ?::text[])", [list(path)]
        return "json_extract(i.value, ?)", [_json_path_sqlite(path)]

    def literal(value: Any, text: str) -> tuple[str, list[Any]]:
        if pg:
            return "?::jsonb", [text]
        if isinstance(value, (dict, list)):
            return "json(?)", [text]
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and not _INT64[0] <= value <= _INT64[1]
        ):
            # SQLite's JSON keeps an integer beyond 64 bits as a REAL (json_extract gives a
            # float), and a Python int that large cannot be bound at all (OverflowError).
            return "?", [float(value)]
        return "?", [value]

    def compare(path: Sequence[str], op: str, value: Any) -> None:
        col, cp = extract(path)
        if op in ("$eq", "$ne"):
            # What no item can hold (NaN, an infinity, an int beyond 64 bits, NUL) is refused
            # on both engines, as a put refuses it: SQLite matched nothing, PostgreSQL refused.
            if isinstance(value, float) and not math.isfinite(value):
                raise RecallError(
                    f"filter value for {'.'.join(path)!r} is {value!r}, which no item holds (a "
                    "put refuses NaN and infinities: JSON has none); filter on a finite number, "
                    "a string or None",
                    code="invalid_value",
                )
            text = dump_json(value, what=f"filter value for {'.'.join(path)!r}")
            lit, lp = literal(value, text)
            if value is None:
                if pg:
                    # #> gives SQL NULL for a missing key but jsonb 'null' for a stored null;
                    # both count as None, as json_extract and InMemoryStore treat them.
                    eq = "=" if op == "$eq" else "<>"
                    clauses.append(f"COALESCE({col}, 'null'::jsonb) {eq} 'null'::jsonb")
                else:
                    clauses.append(f"{col} IS {'NOT ' if op == '$ne' else ''}NULL")
                params.extend(cp)
                return
            if pg:
                sql_op = "IS DISTINCT FROM" if op == "$ne" else "="
            else:
                sql_op = "IS NOT" if op == "$ne" else "="
            clauses.append(f"{col} {sql_op} {lit}")
            params.extend(cp + lp)
            return
        sym = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}.get(op)
        if sym is None:
            raise RecallError(
                f"unsupported filter operator {op!r}; use $eq, $ne, $gt, $gte, $lt or $lte",
                code="invalid_value",
            )
        bound = _bound_number(path, op, value)
        if pg:
            num = "(CASE WHEN jsonb_typeof(i.value #> ?::text[]) = 'number' THEN (i.value #>> ?::text[])::double precision END)"
            clauses.append(f"{num} {sym} ?")
            params.extend([list(path), list(path), bound])
        else:
            num = "(CASE WHEN json_type(i.value, ?) IN ('integer', 'real') THEN json_extract(i.value, ?) END)"
            p = _json_path_sqlite(path)
            clauses.append(f"{num} {sym} ?")
            params.extend([p, p, bound])

    def walk(path: list[str], fv: Any) -> None:
        check_id("filter key", path[-1], write=False, blank_ok=True, hint="filter on text keys")
        if isinstance(fv, dict):
            if any(k.startswith("$") for k in fv):
                for op, v in fv.items():
                    compare(path, op, v)
            else:
                for k, v in fv.items():
                    walk([*path, k], v)
        else:
            compare(path, "$eq", fv)

    for key, fv in flt.items():
        walk([key], fv)
    return " AND ".join(clauses), params


_INT64 = (-(2**63), 2**63 - 1)

_TOKEN = re.compile(r"\w+", re.UNICODE)


def query_tokens(query: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(query)]


def search_text(tx: Tx, op: SearchOp, refresh_default: bool) -> list[SearchItem]:
    """Full-text ranked search: FTS5 BM25 on SQLite, ts_rank_cd on PostgreSQL (any token matches)."""
    tokens = query_tokens(op.query or "")
    if not tokens:
        return search_plain(tx, op, refresh_default)
    ns_sql, ns_params = ns_condition(op.namespace_prefix)
    f_sql, f_params = filter_sql(tx, op.filter)
    if tx.dialect == "sqlite":
        match = " OR ".join(f'"{t}"' for t in tokens)
        rows = tx.all(
            f"SELECT {_COLS}, -bm25(recall_items_fts) AS score FROM recall_items_fts "
            "JOIN recall_items i ON i.rowid = recall_items_fts.rowid "
            f"WHERE recall_items_fts MATCH ? AND {ns_sql} AND {f_sql} AND {_LIVE} "
            "ORDER BY bm25(recall_items_fts), i.prefix, i.key LIMIT ? OFFSET ?",
            [match, *ns_params, *f_params, op.limit, op.offset],
        )
    else:
        tsq = " | ".join(tokens)
        rows = tx.all(
            f"SELECT {_COLS}, ts_rank_cd(to_tsvector('simple', coalesce(i.body, '')), q) AS score "
            "FROM recall_items i, to_tsquery('simple', ?) q "
            f"WHERE to_tsvector('simple', coalesce(i.body, '')) @@ q AND {ns_sql} AND {f_sql} "
            f"AND {_LIVE} ORDER BY score DESC, i.prefix, i.key LIMIT ? OFFSET ?",
            [tsq, *ns_params, *f_params, op.limit, op.offset],
        )
    if _wants_refresh(op.refresh_ttl, refresh_default):
        _refresh(tx, rows)
    return [_row_search_item(r, float(r[6])) for r in rows]


def search_plain(tx: Tx, op: SearchOp, refresh_default: bool) -> list[SearchItem]:
    """Filter-only search, most recently updated first."""
    ns_sql, ns_params = ns_condition(op.namespace_prefix)
    f_sql, f_params = filter_sql(tx, op.filter)
    rows = tx.all(
        f"SELECT {_COLS} FROM recall_items i WHERE {ns_sql} AND {f_sql} AND {_LIVE} "
        "ORDER BY i.updated_at DESC, i.prefix, i.key LIMIT ? OFFSET ?",
        [*ns_params, *f_params, op.limit, op.offset],
    )
    if _wants_refresh(op.refresh_ttl, refresh_default):
        _refresh(tx, rows)
    return [_row_search_item(r, None) for r in rows]


def search_vector(
    tx: Tx, op: SearchOp, query_vector: list[float], refresh_default: bool
) -> list[SearchItem]:
    """Cosine similarity over the stored vectors of the matching items (max over fields).

    Items without a vector follow the scored ones, as in LangGraph's InMemoryStore.
    """
    ns_sql, ns_params = ns_condition(op.namespace_prefix)
    f_sql, f_params = filter_sql(tx, op.filter)
    rows = tx.all(
        f"SELECT {_COLS}, v.vector FROM recall_items i LEFT JOIN recall_vectors v "
        f"ON v.prefix = i.prefix AND v.key = i.key WHERE {ns_sql} AND {f_sql} AND {_LIVE}",
        [*ns_params, *f_params],
    )
    best: dict[tuple[str, str], tuple[float | None, Sequence[Any]]] = {}
    for r in rows:
        score = None if r[6] is None else _cosine(query_vector, load_json(r[6]))
        k = (r[0], r[1])
        prev = best.get(k)
        if prev is None or (score is not None and (prev[0] is None or score > prev[0])):
            best[k] = (score, r)
    ranked = sorted(
        best.values(), key=lambda sr: (sr[0] is None, -(sr[0] or 0.0), sr[1][0], sr[1][1])
    )
    page = ranked[op.offset : op.offset + op.limit]
    if _wants_refresh(op.refresh_ttl, refresh_default):
        _refresh(tx, [r for _, r in page])
    return [_row_search_item(r, s) for s, r in page]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


# --- list_namespaces -------------------------------------------------------------------------


def _matches(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(path) > len(ns):
        return False
    part = ns[: len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=False))


def list_namespaces(tx: Tx, op: ListNamespacesOp) -> list[tuple[str, ...]]:
    conds = tuple(op.match_conditions or ())
    where: str = "1=1"
    params: list[Any] = []
    for cond in conds:
        if cond.match_type == "prefix" and cond.path and "*" not in cond.path:
            where, params = ns_condition(tuple(cond.path))
            break
    rows = tx.all(f"SELECT DISTINCT i.prefix FROM recall_items i WHERE {where} AND {_LIVE}", params)
    found: set[tuple[str, ...]] = set()
    for (prefix,) in rows:
        ns = decode_ns(prefix)
        if all(_matches(c, ns) for c in conds):
            found.add(ns[: op.max_depth] if op.max_depth is not None else ns)
    return sorted(found)[op.offset : op.offset + op.limit]


def sweep(tx: Tx) -> int:
    """Delete expired items (and their vectors); returns how many."""
    tx.run(
        "DELETE FROM recall_vectors WHERE EXISTS (SELECT 1 FROM recall_items i WHERE "
        "i.prefix = recall_vectors.prefix AND i.key = recall_vectors.key AND "
        "i.expires_at IS NOT NULL AND i.expires_at <= {now})"
    )
    return tx.run("DELETE FROM recall_items WHERE expires_at IS NOT NULL AND expires_at <= {now}")


EmbedFn = Callable[[list[str]], list[list[float]]]
