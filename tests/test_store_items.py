"""RecallStore is a complete LangGraph BaseStore, on SQLite and on PostgreSQL.

Every test runs on both backends (the ``store`` / ``store_target`` fixtures). Where LangGraph's
own ``InMemoryStore`` has the same semantics, the same cases run on both and must agree; the
intended differences are pinned down in ``test_intended_differences_from_inmemorystore``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from conftest import with_schema
from fix_store import (
    BagOfWordsEmbeddings,
    cosine,
    queued_at_write_lock,
    wait_db_clock_past,
    wait_until,
)
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from langgraph_recall import RecallError
from langgraph_recall.store import RecallStore

# --- batch ---------------------------------------------------------------------------------


def _ordered_ops() -> list[Any]:
    ns = ("docs",)
    return [
        GetOp(ns, "k"),
        PutOp(ns, "k", {"v": 1}),
        GetOp(ns, "k"),
        PutOp(ns, "k", {"v": 2}),
        GetOp(ns, "k"),
        SearchOp(ns, filter={"v": 2}),
        ListNamespacesOp(),
        PutOp(ns, "k", None),
        GetOp(ns, "k"),
        ListNamespacesOp(),
    ]


def _check_ordered(results: list[Any]) -> None:
    assert results[0] is None
    assert results[1] is None and results[3] is None and results[7] is None
    assert results[2].value == {"v": 1}
    assert results[4].value == {"v": 2}
    assert [i.key for i in results[5]] == ["k"]
    assert results[6] == [("docs",)]
    assert results[8] is None
    assert results[9] == []


def test_batch_applies_ops_in_the_order_given(store: RecallStore) -> None:
    _check_ordered(store.batch(_ordered_ops()))


async def test_abatch_applies_ops_in_the_order_given(store: RecallStore) -> None:
    _check_ordered(await store.abatch(_ordered_ops()))


def test_batch_is_one_transaction(store: RecallStore) -> None:
    store.put(("docs",), "before", {"v": 0})
    with pytest.raises(RecallError) as err:
        store.batch([PutOp(("docs",), "a", {"v": 1}), PutOp(("docs",), "b", {"v": object()})])
    assert err.value.code == "invalid_value"
    assert store.get(("docs",), "a") is None, "the first put of a failed batch must not land"
    assert store.get(("docs",), "before").value == {"v": 0}


def test_put_get_delete_and_timestamps(store: RecallStore) -> None:
    store.put(("a", "b"), "k", {"x": 1})
    first = store.get(("a", "b"), "k")
    assert first is not None and first.value == {"x": 1}
    assert first.namespace == ("a", "b") and first.key == "k"
    # Item timestamps are rounded to microseconds and SQLite's clock ticks in milliseconds.
    wait_db_clock_past(store, first.updated_at.timestamp() + 0.002)
    store.put(("a", "b"), "k", {"x": 2})
    second = store.get(("a", "b"), "k")
    assert second is not None and second.value == {"x": 2}
    assert second.created_at == first.created_at, "an update keeps created_at"
    assert second.updated_at > first.updated_at
    store.delete(("a", "b"), "k")
    assert store.get(("a", "b"), "k") is None
    store.delete(("a", "b"), "never-existed")  # deleting nothing is fine


# --- namespace rules -----------------------------------------------------------------------

BAD_NAMESPACES = [(), ("",), ("a.b",), ("a", "x\x00y"), ("langgraph", "x"), ("ok", 7)]


@pytest.mark.parametrize("namespace", BAD_NAMESPACES, ids=repr)
def test_namespace_rules_match_langgraph_for_put(store: RecallStore, namespace: Any) -> None:
    reference = InMemoryStore()
    with pytest.raises(InvalidNamespaceError):
        reference.put(namespace, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(namespace, "k", {"v": 1})])
    assert store.list_namespaces() == []


@pytest.mark.parametrize("namespace", [("",), ("a.b",), ("a", "x\x00y"), ("ok", 7)], ids=repr)
def test_invalid_labels_are_refused_by_every_op_in_batch(
    store: RecallStore, namespace: Any
) -> None:
    """Labels are joined with '.', so a label like "a.b" must never address ("a", "b")."""
    store.put(("a", "b"), "k", {"v": 1})
    for op in (
        GetOp(namespace, "k"),
        SearchOp(namespace),
        PutOp(namespace, "k", None),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", namespace),)),
    ):
        with pytest.raises(InvalidNamespaceError):
            store.batch([op])
    assert store.get(("a", "b"), "k") is not None


def test_reading_and_deleting_under_the_langgraph_root_is_allowed_like_langgraph(
    store: RecallStore,
) -> None:
    # LangGraph refuses the "langgraph" root only for writes; reads and deletes find nothing.
    for s in (InMemoryStore(), store):
        assert s.get(("langgraph", "x"), "k") is None
        assert s.search(("langgraph",)) == []
        s.delete(("langgraph", "x"), "k")


# --- search with filters, compared with InMemoryStore --------------------------------------

DATA: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (
        ("users", "alice", "prefs"),
        "theme",
        {"color": "dark", "size": 12, "tags": ["a", "b"], "meta": {"lang": "en", "level": 3}},
    ),
    (
        ("users", "alice", "prefs"),
        "font",
        {"color": "light", "size": 10, "meta": {"lang": "fr", "level": 1}},
    ),
    (
        ("users", "bob", "prefs"),
        "theme",
        {"color": "dark", "size": 14, "meta": {"lang": "en", "level": 5}},
    ),
    (("users", "bob", "notes"), "n1", {"text": "hello", "size": 3.5, "flag": True}),
    (("docs",), "d1", {"color": None, "size": 0}),
    (("docs", "drafts", "2024"), "d2", {"size": -1, "nested": {"a": {"b": 2}}}),
    (("ユーザー", "😀"), "k", {"size": 7, "名前": "値"}),
]

FILTER_CASES: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    ((), {"color": "dark"}),
    ((), {"color": {"$eq": "dark"}}),
    ((), {"color": {"$ne": "dark"}}),
    ((), {"color": None}),
    ((), {"size": {"$gt": 10}}),
    ((), {"size": {"$gte": 12}}),
    ((), {"size": {"$lt": 3.5}}),
    ((), {"size": {"$lte": 3.5}}),
    ((), {"size": {"$gt": 0, "$lt": 13}}),
    ((), {"size": 12.0}),
    ((), {"meta": {"lang": "en"}}),
    ((), {"meta": {"level": {"$gte": 3}}}),
    ((), {"meta": {"lang": "en", "level": {"$lt": 5}}}),
    ((), {"nested": {"a": {"b": 2}}}),
    ((), {"tags": ["a", "b"]}),
    ((), {"flag": True}),
    ((), {"color": "dark", "size": 14}),
    ((), {"名前": "値"}),
    (("users",), {"color": "dark"}),
    (("users", "alice"), {"size": {"$ne": 12}}),
    (("ユーザー",), {}),
    (("docs",), {}),
    (("nothing",), {}),
]


def _load(s: BaseStore) -> None:
    for ns, key, value in DATA:
        s.put(ns, key, value)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def loaded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RecallStore, InMemoryStore]]:
    """One loaded store per backend for the read-only comparison cases (setting up a store
    per case would dominate the run)."""
    if request.param == "postgres":
        database = request.getfixturevalue("pg_database")
        schema = "shared_" + secrets.token_hex(4)
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        target = with_schema(database, schema)
    else:
        target = str(tmp_path_factory.mktemp("shared") / "recall.db")
    reference = InMemoryStore()
    _load(reference)
    with RecallStore.open(target) as store:
        _load(store)
        yield store, reference


def _keys(items: list[Any]) -> set[tuple[tuple[str, ...], str]]:
    return {(tuple(i.namespace), i.key) for i in items}


@pytest.mark.parametrize("prefix,flt", FILTER_CASES, ids=[repr(c) for c in FILTER_CASES])
def test_search_filters_agree_with_inmemorystore(
    loaded: tuple[RecallStore, InMemoryStore], prefix: tuple[str, ...], flt: dict[str, Any]
) -> None:
    store, reference = loaded
    expected = _keys(reference.search(prefix, filter=flt, limit=100))
    got = store.search(prefix, filter=flt, limit=100)
    assert _keys(got) == expected
    for item in got:
        assert reference.get(item.namespace, item.key).value == item.value


def test_filter_cases_are_not_trivial() -> None:
    """Guard against a case list where everything or nothing matches."""
    reference = InMemoryStore()
    _load(reference)
    sizes = {len(reference.search(p, filter=f, limit=100)) for p, f in FILTER_CASES}
    assert 0 in sizes and len(sizes) >= 4


def test_search_pages_with_limit_and_offset(loaded: tuple[RecallStore, InMemoryStore]) -> None:
    store, _ = loaded
    everything = store.search((), limit=100)
    assert len(everything) == len(DATA)
    pages = [store.search((), limit=3, offset=o) for o in (0, 3, 6)]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [i.key for p in pages for i in p] == [i.key for i in everything]


def test_unsupported_filter_operator_is_a_clear_error(store: RecallStore) -> None:
    store.put(("a",), "k", {"n": 1})
    with pytest.raises(RecallError) as err:
        store.search(("a",), filter={"n": {"$in": [1]}})
    assert err.value.code == "invalid_value" and "$eq" in str(err.value)


# --- list_namespaces, compared with InMemoryStore ------------------------------------------

LIST_CASES: list[dict[str, Any]] = [
    {},
    {"prefix": ("users",)},
    {"prefix": ("users", "alice")},
    {"prefix": ("users", "*", "prefs")},
    {"suffix": ("prefs",)},
    {"suffix": ("*", "prefs")},
    {"suffix": ("bob", "*")},
    {"prefix": ("users",), "suffix": ("notes",)},
    {"max_depth": 1},
    {"max_depth": 2},
    {"prefix": ("users",), "max_depth": 2},
    {"limit": 2},
    {"limit": 2, "offset": 2},
    {"offset": 5},
    {"prefix": ("ユーザー",)},
    {"prefix": ("nothing",)},
    {"prefix": ("docs",)},
]


@pytest.mark.parametrize("kwargs", LIST_CASES, ids=[repr(c) for c in LIST_CASES])
def test_list_namespaces_agrees_with_inmemorystore(
    loaded: tuple[RecallStore, InMemoryStore], kwargs: dict[str, Any]
) -> None:
    store, reference = loaded
    assert store.list_namespaces(**kwargs) == reference.list_namespaces(**kwargs)


def test_namespace_prefix_is_label_exact(store: RecallStore) -> None:
    """("user",) is not a prefix of ("users",): labels match whole, not as text."""
    store.put(("users", "a"), "k", {"v": 1})
    store.put(("user",), "k", {"v": 2})
    store.put(("user", "x"), "k", {"v": 3})
    assert store.list_namespaces(prefix=("user",)) == [("user",), ("user", "x")]
    assert {i.value["v"] for i in store.search(("user",))} == {2, 3}


def test_intended_differences_from_inmemorystore(store: RecallStore) -> None:
    reference = InMemoryStore()
    for s in (reference, store):
        s.put(("docs",), "k", {"v": 1, "text": "apples and pears"})
        s.put(("docs",), "other", {"v": 9, "text": "nothing to see"})
    ops = [PutOp(("docs",), "k", {"v": 2, "text": "apples and pears"}), GetOp(("docs",), "k")]
    # 1. Batch order: InMemoryStore (like SqliteStore/PostgresStore) runs gets before puts.
    assert reference.batch(ops)[1].value == {"v": 1, "text": "apples and pears"}
    assert store.batch(ops)[1].value == {"v": 2, "text": "apples and pears"}
    # 2. A text query without an embedding index: InMemoryStore ignores it; we rank by text.
    assert _keys(reference.search(("docs",), query="apples")) == {
        (("docs",), "k"),
        (("docs",), "other"),
    }
    assert [i.key for i in store.search(("docs",), query="apples")] == ["k"]
    # 3. InMemoryStore lists a namespace after its last item is deleted (or after a get on
    #    it); we list only namespaces that hold items, like LangGraph's SQL stores.
    for s in (reference, store):
        s.delete(("docs",), "k")
        s.delete(("docs",), "other")
        s.get(("ghost",), "k")
    assert reference.list_namespaces() == [("docs",), ("ghost",)]
    assert store.list_namespaces() == []


# --- text query ----------------------------------------------------------------------------


def test_text_query_ranks_better_matches_first(store: RecallStore) -> None:
    store.put(("notes",), "once", {"text": "the fox met a dog by the river in the evening light"})
    store.put(("notes",), "thrice", {"text": "fox fox fox"})
    store.put(("notes",), "none", {"text": "a quiet lake"})
    found = store.search(("notes",), query="fox")
    assert [i.key for i in found] == ["thrice", "once"]
    assert all(i.score is not None for i in found)
    assert found[0].score > found[1].score


def test_text_query_matches_any_word_within_prefix_and_filter(store: RecallStore) -> None:
    store.put(("a",), "1", {"text": "quick brown fox", "lang": "en"})
    store.put(("a",), "2", {"text": "lazy dog", "lang": "en"})
    store.put(("a",), "3", {"text": "lazy cat", "lang": "de"})
    store.put(("b",), "4", {"text": "quick dog", "lang": "en"})
    assert {i.key for i in store.search(("a",), query="quick dog")} == {"1", "2"}
    assert {i.key for i in store.search(("a",), query="lazy", filter={"lang": "en"})} == {"2"}
    assert {i.key for i in store.search((), query="QUICK")} == {"1", "4"}
    pages = [store.search((), query="quick lazy dog", limit=2, offset=o) for o in (0, 2)]
    assert sorted(i.key for p in pages for i in p) == ["1", "2", "3", "4"]


def test_text_query_searches_nested_strings_and_honours_index(store: RecallStore) -> None:
    store.put(("a",), "nested", {"doc": {"title": "zebra crossing", "tags": ["stripes"]}})
    store.put(("a",), "hidden", {"text": "zebra"}, index=False)
    store.put(("a",), "title_only", {"title": "giraffe", "body": "zebra"}, index=["title"])
    assert {i.key for i in store.search(("a",), query="zebra")} == {"nested"}
    assert {i.key for i in store.search(("a",), query="stripes")} == {"nested"}
    assert {i.key for i in store.search(("a",), query="giraffe")} == {"title_only"}
    assert store.get(("a",), "hidden").value == {"text": "zebra"}


@pytest.mark.parametrize(
    "query", ['"', "a AND b", "NEAR(x y)", "*", "-x", "col:val", "(", "'; DROP"]
)
def test_text_query_with_operator_characters_is_plain_text(store: RecallStore, query: str) -> None:
    """Search syntax (FTS5 operators, tsquery symbols, quotes) is never interpreted."""
    store.put(("a",), "1", {"text": "x y val b"})
    store.put(("a",), "2", {"text": "unrelated"})
    found = store.search(("a",), query=query)
    if any(ch.isalnum() for ch in query):
        assert {i.key for i in found} <= {"1"}
    else:  # no word at all: the same as no query
        assert _keys(found) == _keys(store.search(("a",)))


def test_text_query_matches_unicode_words(store: RecallStore) -> None:
    store.put(("a",), "1", {"text": "Grüße aus München"})
    store.put(("a",), "2", {"text": "東京 タワー"})
    assert [i.key for i in store.search(("a",), query="münchen")] == ["1"]
    assert [i.key for i in store.search(("a",), query="東京")] == ["2"]


# --- vector search -------------------------------------------------------------------------

VECTOR_DOCS = [
    ("1", {"text": "red apples and green pears", "kind": "fruit"}),
    ("2", {"text": "apples apples apples", "kind": "fruit"}),
    ("3", {"text": "a red car on a road", "kind": "car"}),
    ("4", {"text": "green fields", "kind": "place"}),
]


def _index(fields: list[str] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {"dims": 64, "embed": BagOfWordsEmbeddings()}
    if fields is not None:
        cfg["fields"] = fields
    return cfg


@pytest.mark.parametrize("fields", [["text"], None], ids=["fields=text", "fields=$"])
@pytest.mark.parametrize(
    "query,flt", [("apples", None), ("red", None), ("green road", None), ("red", {"kind": "fruit"})]
)
def test_vector_search_agrees_with_inmemorystore(
    store_target: str, fields: list[str] | None, query: str, flt: dict[str, Any] | None
) -> None:
    reference = InMemoryStore(index=_index(fields))  # type: ignore[arg-type]
    with RecallStore.open(store_target, index=_index(fields)) as store:  # type: ignore[arg-type]
        for key, value in VECTOR_DOCS:
            reference.put(("docs",), key, value)
            store.put(("docs",), key, value)
        want = reference.search(("docs",), query=query, filter=flt)
        got = store.search(("docs",), query=query, filter=flt)
    assert [i.key for i in got] == [i.key for i in want]
    assert [round(i.score, 6) for i in got] == [round(i.score, 6) for i in want]
    emb = BagOfWordsEmbeddings()
    best = max(
        (v for _, v in VECTOR_DOCS if not flt or all(v[k] == x for k, x in flt.items())),
        key=lambda v: cosine(emb.embed_query(query), emb.embed_query(v["text"])),
    )
    assert got[0].value == best


def test_vector_search_scores_each_field_and_keeps_unindexed_items_last(store_target: str) -> None:
    with RecallStore.open(store_target, index=_index(["title", "body"])) as store:  # type: ignore[arg-type]
        store.put(("d",), "title_hit", {"title": "solar panels", "body": "unrelated words here"})
        store.put(("d",), "body_hit", {"title": "misc", "body": "solar power and solar panels"})
        store.put(("d",), "plain", {"title": "solar panels"}, index=False)
        store.put(("d",), "miss", {"title": "pasta", "body": "recipes"})
        found = store.search(("d",), query="solar panels")
        assert [i.key for i in found][:2] == ["title_hit", "body_hit"]
        assert found[-1].key == "plain" and found[-1].score is None
        assert all(i.score is not None for i in found[:-1])
        page = store.search(("d",), query="solar panels", limit=1, offset=1)
        assert [i.key for i in page] == ["body_hit"]


def test_vector_index_follows_updates_and_deletes(store_target: str) -> None:
    with RecallStore.open(store_target, index=_index(["text"])) as store:  # type: ignore[arg-type]
        store.put(("d",), "a", {"text": "bananas"})
        store.put(("d",), "b", {"text": "cherries"})
        assert store.search(("d",), query="bananas")[0].key == "a"
        store.put(("d",), "a", {"text": "cherries"})
        store.put(("d",), "b", {"text": "bananas"})
        assert store.search(("d",), query="bananas")[0].key == "b"
        store.delete(("d",), "b")
        assert [i.key for i in store.search(("d",), query="bananas")] == ["a"]


# --- TTL -----------------------------------------------------------------------------------


def _expires_at(store: RecallStore, ns: tuple[str, ...], key: str) -> float | None:
    with store._db.tx() as tx:
        row = tx.one(
            "SELECT expires_at FROM recall_items WHERE prefix = ? AND key = ?", (".".join(ns), key)
        )
    assert row is not None, f"{ns}/{key} is not stored"
    return None if row[0] is None else float(row[0])


def _stored_rows(store: RecallStore) -> int:
    with store._db.tx() as tx:
        row = tx.one("SELECT COUNT(*) FROM recall_items")
    assert row is not None
    return int(row[0])


def test_store_supports_ttl(store: RecallStore) -> None:
    assert store.supports_ttl is True
    store.put(("t",), "k", {"v": 1}, ttl=5)
    expires = _expires_at(store, ("t",), "k")
    assert expires is not None and expires > store.get(("t",), "k").created_at.timestamp()


def test_expired_items_are_never_returned_even_before_a_sweep(store: RecallStore) -> None:
    store.put(("ttl", "x"), "gone", {"text": "ephemeral words"}, ttl=10)
    store.put(("keep",), "stays", {"text": "ephemeral words too"})
    assert store.get(("ttl", "x"), "gone") is not None
    # Its time runs out now, whatever the clock: a short ttl would race the read above.
    with store._db.tx(write=True) as tx:
        tx.run("UPDATE recall_items SET expires_at = {now} - 1 WHERE key = 'gone'")
    wait_db_clock_past(store, _expires_at(store, ("ttl", "x"), "gone") or 0.0)
    assert store.get(("ttl", "x"), "gone") is None
    assert store.search(("ttl",)) == []
    assert [i.key for i in store.search((), query="ephemeral")] == ["stays"]
    assert store.list_namespaces() == [("keep",)]
    assert _stored_rows(store) == 2, "not swept yet: the reads themselves must filter expiry"
    assert store.sweep_ttl() == 1
    assert _stored_rows(store) == 1


def test_expired_items_are_not_found_by_vector_search(store_target: str) -> None:
    with RecallStore.open(store_target, index=_index(["text"])) as store:  # type: ignore[arg-type]
        store.put(("d",), "gone", {"text": "apples"}, ttl=0.01)
        store.put(("d",), "stays", {"text": "pears"})
        wait_db_clock_past(store, _expires_at(store, ("d",), "gone") or 0.0)
        assert [i.key for i in store.search(("d",), query="apples")] == ["stays"]


def test_reads_refresh_the_ttl_unless_told_not_to(store: RecallStore) -> None:
    store.put(("t",), "k", {"v": 1}, ttl=10)
    e0 = _expires_at(store, ("t",), "k") or 0.0
    wait_db_clock_past(store, e0 - 600 + 0.01)
    store.get(("t",), "k", refresh_ttl=False)
    assert _expires_at(store, ("t",), "k") == e0
    store.search(("t",), refresh_ttl=False)
    assert _expires_at(store, ("t",), "k") == e0
    store.get(("t",), "k")
    e1 = _expires_at(store, ("t",), "k") or 0.0
    assert e1 > e0
    wait_db_clock_past(store, e1 - 600 + 0.01)
    store.search(("t",))
    assert (_expires_at(store, ("t",), "k") or 0.0) > e1


@pytest.mark.parametrize("read", ["get", "search"])
def test_a_ttl_refresh_on_sqlite_queues_at_the_stores_write_lock(tmp_path: Any, read: str) -> None:
    # The refresh is a write: run on the read's pooled connection it met this process's
    # writers inside SQLite, whose busy handler sleeps milliseconds between tries. It runs
    # after the read instead, in a write transaction that waits for the write in progress.
    with RecallStore.open(str(tmp_path / "r.db")) as store:
        store.put(("t",), "k", {"v": 1}, ttl=10)
        e0 = _expires_at(store, ("t",), "k") or 0.0
        wait_db_clock_past(store, e0 - 600 + 0.01)
        found = queued_at_write_lock(
            store, lambda: store.get(("t",), "k") if read == "get" else store.search(("t",))
        )
        assert found, "the read answers once the refresh is in"
        assert (_expires_at(store, ("t",), "k") or 0.0) > e0


def test_ttl_config_default_ttl_and_refresh_on_read(store_target: str) -> None:
    cfg = {"default_ttl": 5.0, "refresh_on_read": False}
    with RecallStore.open(store_target, ttl=cfg) as store:  # type: ignore[arg-type]
        store.put(("t",), "default", {"v": 1})
        store.put(("t",), "forever", {"v": 1}, ttl=None)
        e0 = _expires_at(store, ("t",), "default")
        assert e0 is not None and abs(e0 - _updated_at(store, "default") - 300.0) < 1.0
        assert _expires_at(store, ("t",), "forever") is None
        wait_db_clock_past(store, e0 - 300 + 0.01)
        store.get(("t",), "default")
        assert _expires_at(store, ("t",), "default") == e0, "refresh_on_read=False"
        store.get(("t",), "default", refresh_ttl=True)
        assert (_expires_at(store, ("t",), "default") or 0.0) > e0


def _updated_at(store: RecallStore, key: str) -> float:
    item = store.get(("t",), key, refresh_ttl=False)
    assert item is not None
    return item.updated_at.timestamp()


def test_background_sweeper_deletes_expired_items(store_target: str) -> None:
    cfg = {"sweep_interval_minutes": 0.001}
    with RecallStore.open(store_target, ttl=cfg) as store:  # type: ignore[arg-type]
        store.put(("t",), "gone", {"v": 1}, ttl=0.001)
        store.put(("t",), "stays", {"v": 1})
        wait_until(lambda: _stored_rows(store) == 1, what="the sweeper to delete the expired item")
        assert store.get(("t",), "stays") is not None
        assert store.stop_ttl_sweeper(timeout=30) is True
