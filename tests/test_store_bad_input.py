"""Bad input gets a clear RecallError (or LangGraph's InvalidNamespaceError) and loses nothing
already recorded: every test reopens the store afterwards and checks the earlier records.
(A corrupt SQLite file is covered in test_store_schema.py.)"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import math
import pickle
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fix_tools import build_graph, call, reply
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.store.base import InvalidNamespaceError

from langgraph_recall import DurableToolNode, RecallError
from langgraph_recall._errors import InvalidValue
from langgraph_recall.store import RecallStore


@pytest.fixture
def seeded(store_target: str) -> Iterator[RecallStore]:
    """A store that already holds records, checked intact when the test ends (after a reopen)."""
    with RecallStore.open(store_target) as s:
        s.put(("docs",), "kept", {"text": "kept"})
        s.record("ag", [HumanMessage("recorded before", id="m0")])
        s.update_working_state("ag", goal="survive bad input")
    store = RecallStore.open(store_target)
    try:
        yield store
    finally:
        store.close()
    with RecallStore.open(store_target) as again:
        assert again.get(("docs",), "kept").value == {"text": "kept"}
        assert again.turns("ag")[0].message.content == "recorded before"
        assert again.working_state("ag")["goal"] == "survive bad input"


def _invalid(exc: BaseException) -> str:
    assert isinstance(exc, RecallError), exc
    assert exc.code == "invalid_value"
    return str(exc)


NOT_JSON: dict[str, Any] = {
    "bytes": b"raw",
    "set": {1, 2},
    "object": object(),
    "int_over_64_bits": 2**70,
    "non_string_key": {1: "x"},
    "nan": float("nan"),
    "infinity": float("-inf"),
    "lone_surrogate": "\ud800",
    "nul_in_text": "a\x00b",
}


@pytest.mark.parametrize("name", list(NOT_JSON))
def test_values_json_cannot_hold_are_refused_clearly(seeded: RecallStore, name: str) -> None:
    with pytest.raises(RecallError) as err:
        seeded.put(("docs",), "bad", {"nested": {"v": NOT_JSON[name]}})
    text = _invalid(err.value)
    assert "docs" in text and "bad" in text, "the message names the item"
    assert seeded.get(("docs",), "bad") is None
    with pytest.raises(RecallError) as err:
        seeded.update_working_state("ag", plan=NOT_JSON[name])
    _invalid(err.value)
    assert seeded.working_state("ag") == {"goal": "survive bad input"}


def test_types_json_can_encode_are_stored_as_their_json_form(seeded: RecallStore) -> None:
    """Items are JSON: a datetime becomes its ISO text (records keep types; items do not)."""
    seeded.put(("docs",), "when", {"at": dt.datetime(2024, 1, 2, 3, 4, 5)})
    assert seeded.get(("docs",), "when").value == {"at": "2024-01-02T03:04:05"}


def test_values_must_be_dicts(seeded: RecallStore) -> None:
    with pytest.raises(RecallError) as err:
        seeded.put(("docs",), "bad", ["a", "list"])  # type: ignore[arg-type]
    assert "must be a dict" in _invalid(err.value)


def test_nul_bytes(seeded: RecallStore) -> None:
    with pytest.raises(InvalidNamespaceError):
        seeded.put(("do\x00cs",), "k", {"v": 1})
    with pytest.raises(RecallError) as err:
        seeded.put(("docs",), "k\x00", {"v": 1})
    _invalid(err.value)
    with pytest.raises(RecallError) as err:
        seeded.get(("docs",), "k\x00")
    _invalid(err.value)
    with pytest.raises(RecallError) as err:
        seeded.record("a\x00g", [HumanMessage("x", id="1")])
    _invalid(err.value)
    # Records are stored as bytes: NUL inside a message or an output is kept exactly.
    seeded.record("ag", [HumanMessage("before\x00after", id="nul")])
    assert seeded.turns("ag", last=1)[0].message.content == "before\x00after"
    ref = seeded.put_output("ag", "x\x00y" * 5000)
    assert seeded.fetch_output(ref, 0, 3) == "x\x00y"
    long_turn = AIMessage("\x00" + "binary-ish tool output " * 1000, id="long-nul")
    assert seeded.record("ag", [long_turn]) == 1
    assert seeded.turns("ag", last=1)[0].message.content == long_turn.content


def test_outputs_keep_lone_surrogates(seeded: RecallStore) -> None:
    text = "\ud800 half a pair " * 1000
    assert seeded.fetch_output(seeded.put_output("ag", text)) == text


def test_a_ten_megabyte_item_round_trips(seeded: RecallStore) -> None:
    big = {"blob": "z" * (10 * 1024 * 1024), "n": 1}
    seeded.put(("docs",), "huge", big)
    assert seeded.get(("docs",), "huge").value == big
    assert [i.key for i in seeded.search(("docs",), filter={"n": 1})] == ["huge"]


def test_a_filter_on_an_integer_beyond_64_bits_is_answered(seeded: RecallStore) -> None:
    # SQLite raised a raw OverflowError (the int cannot be bound), not a RecallError.
    seeded.put(("docs",), "big", {"big": 12345678901234567890})
    assert [i.key for i in seeded.search(("docs",), filter={"big": 12345678901234567890})] == [
        "big"
    ]
    assert [i.key for i in seeded.search(("docs",), filter={"big": {"$gt": 2**63}})] == ["big"]
    assert seeded.search(("docs",), filter={"big": 2**63 + 1}) == []


UNICODE_NAMESPACES = [
    ("ユーザー", "設定"),
    ("😀", "🚀"),
    ("עברית",),
    ("é",),  # precomposed
    ("e\u0301",),  # e + combining accent: a different label
    ("Ω", "ω"),
    ("tab\tand space",),
]


def test_unicode_namespaces(seeded: RecallStore) -> None:
    for i, ns in enumerate(UNICODE_NAMESPACES):
        seeded.put(ns, f"k{i}", {"i": i})
    for i, ns in enumerate(UNICODE_NAMESPACES):
        assert seeded.get(ns, f"k{i}").value == {"i": i}
        assert [item.key for item in seeded.search(ns[:1])] == [f"k{i}"]
    assert seeded.list_namespaces(prefix=("é",)) == [("é",)]
    assert seeded.list_namespaces(prefix=("e\u0301",)) == [("e\u0301",)]
    assert seeded.list_namespaces(suffix=("🚀",)) == [("😀", "🚀")]
    assert set(seeded.list_namespaces()) == {
        *UNICODE_NAMESPACES,
        ("docs",),
        ("recall", "ag", "state"),
    }
    seeded.delete(("😀", "🚀"), "k1")
    assert seeded.get(("😀", "🚀"), "k1") is None


def test_a_result_that_cannot_be_recorded_leaves_the_action_open(seeded: RecallStore) -> None:
    seeded.claim("ag", "act-1", tool="t", args={"n": 1}, args_digest="d")
    with pytest.raises(RecallError) as err:
        seeded.end("act-1", 1, "done", result=object())
    assert "dataclass" in _invalid(err.value), "the message says what can be returned"
    assert seeded.action("act-1").status == "open", "nothing claims it happened or not"
    assert seeded.end("act-1", 1, "done", result={"ok": True})
    assert seeded.action("act-1").result == {"ok": True}


def test_arguments_that_cannot_be_recorded_claim_nothing(seeded: RecallStore) -> None:
    with pytest.raises(RecallError) as err:
        seeded.claim("ag", "act-1", tool="t", args={"f": lambda: 1}, args_digest="d")
    _invalid(err.value)
    assert seeded.actions("ag") == []
    assert seeded.claim("ag", "act-1", tool="t", args={"f": "ok"}, args_digest="d").claimed


def test_a_batch_of_messages_is_recorded_whole_or_not_at_all(seeded: RecallStore) -> None:
    good = HumanMessage("fine", id="good")
    bad = AIMessage("broken", id="bad", additional_kwargs={"handle": object()})
    with pytest.raises(RecallError) as err:
        seeded.record("ag", [good, bad])
    _invalid(err.value)
    assert [t.msg_id for t in seeded.turns("ag")] == ["m0"]
    assert seeded.record("ag", [good]) == 1


def test_wrong_kinds_of_values_in_the_records_api(seeded: RecallStore) -> None:
    with pytest.raises(RecallError) as err:
        seeded.put_output("ag", b"bytes")  # type: ignore[arg-type]
    _invalid(err.value)
    with pytest.raises(RecallError) as err:
        seeded.record(None, [HumanMessage("x", id="1")])  # type: ignore[arg-type]
    _invalid(err.value)
    with pytest.raises(RecallError) as err:
        seeded.end("act-none", 1, "done")
    assert err.value.code == "unknown_action"


@pytest.mark.parametrize("last", [-1, "3", 2.0, True])
def test_turns_last_must_be_a_count(seeded: RecallStore, last: Any) -> None:
    # SQLite took -1 as "no limit" and PostgreSQL refused it with advice about NUL characters.
    with pytest.raises(RecallError) as err:
        seeded.turns("ag", last=last)
    assert "last must be a non-negative int" in _invalid(err.value)
    assert [t.message.content for t in seeded.turns("ag", last=1)] == ["recorded before"]
    assert seeded.turns("ag", last=0) == []


@pytest.mark.parametrize("action_id", [5, None, ""])
def test_an_action_id_must_be_a_string(seeded: RecallStore, action_id: Any) -> None:
    with pytest.raises(RecallError) as err:
        seeded.resolve(action_id, "done")
    assert "action_id must be a" in _invalid(err.value)


@pytest.mark.parametrize(
    "option, value",
    [
        ("lease_ttl", "60"),
        ("lease_ttl", None),
        ("lease_ttl", float("nan")),
        ("lease_ttl", float("inf")),
        ("lease_ttl", 0),
        ("wait", -1),
        ("wait", float("nan")),
        ("wait", float("inf")),
        ("wait", "5"),
    ],
)
def test_lease_settings_must_be_seconds(seeded: RecallStore, option: str, value: Any) -> None:
    # nan and inf were taken, then every run failed (a NOT NULL refusal, an OverflowError in
    # the renewer); a string failed with a TypeError.
    with pytest.raises(RecallError) as err:
        seeded.checkpointer(**{option: value})
    assert option in _invalid(err.value)
    saver = seeded.checkpointer()
    with pytest.raises(RecallError) as err:
        saver.wait = float("nan")
    _invalid(err.value)
    saver.close()


_BAD_PAGES: list[tuple[str, Any, str]] = [
    ("search", {"limit": -1}, "limit"),
    ("search", {"limit": "5"}, "limit"),
    ("search", {"limit": 2.5}, "limit"),
    ("search", {"limit": True}, "limit"),
    ("search", {"limit": 2**70}, "limit"),
    ("search", {"offset": -1}, "offset"),
    ("search", {"offset": "1"}, "offset"),
    ("search", {"query": "kept", "limit": -1}, "limit"),
    ("list_namespaces", {"limit": -1}, "limit"),
    ("list_namespaces", {"limit": "2"}, "limit"),
    ("list_namespaces", {"offset": -1}, "offset"),
]


@pytest.mark.parametrize("method, kwargs, name", _BAD_PAGES)
def test_a_search_limit_or_offset_must_be_a_count(
    seeded: RecallStore, method: str, kwargs: dict[str, Any], name: str
) -> None:
    # SQLite read a limit of -1 as "no limit" and skipped a negative offset; PostgreSQL refused
    # them with advice about NUL characters; a string or a float was a raw TypeError or a
    # driver error on one engine and taken on the other.
    args = [("docs",)] if method == "search" else []
    for method_call in (getattr(seeded, method), getattr(seeded, "a" + method)):
        with pytest.raises(RecallError) as err:
            got = method_call(*args, **kwargs)
            if asyncio.iscoroutine(got):
                asyncio.run(got)
        assert f"{name} must be a whole number from 0" in _invalid(err.value)
    assert [i.key for i in seeded.search(("docs",), limit=1, offset=0)] == ["kept"]


@pytest.mark.parametrize(
    "ttl", ["5", -1, 0, float("nan"), float("inf"), True, pytest.param(10**400, id="huge")]
)
def test_a_ttl_must_be_a_positive_number_of_minutes(seeded: RecallStore, ttl: Any) -> None:
    # A string was a raw TypeError; a negative, zero, NaN or infinite one was stored.
    for put in (seeded.put, seeded.aput):
        with pytest.raises(RecallError) as err:
            got = put(("docs",), "bad", {"text": "x"}, ttl=ttl)
            if asyncio.iscoroutine(got):
                asyncio.run(got)
        assert "ttl must be a positive, finite number of minutes" in _invalid(err.value)
    assert seeded.get(("docs",), "bad") is None, "nothing was written"
    seeded.put(("docs",), "good", {"text": "x"}, ttl=0.5)
    assert seeded.get(("docs",), "good") is not None


def test_a_ttl_config_is_checked_before_the_database_is_opened(tmp_path: Any) -> None:
    path = tmp_path / "recall.db"
    for ttl in ({"default_ttl": -5}, {"sweep_interval_minutes": "1"}, 60):
        with pytest.raises(RecallError) as err:
            RecallStore.open(str(path), ttl=ttl)  # type: ignore[arg-type]
        assert "ttl" in _invalid(err.value)
    assert list(tmp_path.iterdir()) == [], "nothing was created"


def test_ids_postgresql_cannot_hold_are_refused_on_both_engines(seeded: RecallStore) -> None:
    # SQLite kept NUL in an action id or a tool name; PostgreSQL refused them: the same call
    # did or did not record an intent depending on the database.
    for kwargs in ({"action_id": "act\x00nul"}, {"tool": "t\x00"}):
        call = {"action_id": "act-1", "tool": "t", **kwargs}
        with pytest.raises(RecallError) as err:
            seeded.claim("ag", call.pop("action_id"), args={}, args_digest="d", **call)
        assert "NUL" in _invalid(err.value)
        assert ("action_id" if "action_id" in kwargs else "tool") in str(err.value)
    assert seeded.actions("ag") == []


@pytest.mark.parametrize(
    "messages", [HumanMessage("one", id="x1"), {"role": "user"}, "hi", None, 5]
)
def test_record_takes_a_list_of_messages(seeded: RecallStore, messages: Any) -> None:
    # A lone message was read as its fields ("got tuple"), None raised a raw TypeError.
    with pytest.raises(RecallError) as err:
        seeded.record("ag", messages)
    assert "record() takes a list of LangChain messages" in _invalid(err.value)
    assert len(seeded.turns("ag")) == 1


def test_a_pointer_target_must_be_text(seeded: RecallStore) -> None:
    with pytest.raises(RecallError) as err:
        seeded.set_pointer("ag", "x", 5)  # type: ignore[arg-type]
    assert "got int 5" in _invalid(err.value)


def test_a_bool_is_not_a_token_budget(seeded: RecallStore) -> None:
    with pytest.raises(RecallError) as err:
        seeded.briefing("ag", token_budget=True)  # type: ignore[arg-type]
    assert "token_budget must be a positive int" in _invalid(err.value)


def test_checkpointer_and_node_options_are_checked_where_they_are_given(
    seeded: RecallStore,
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_recall import DurableToolNode, RecallCheckpointer

    bad: list[Any] = [
        lambda: RecallCheckpointer(InMemorySaver(), store="/tmp/x.db"),  # type: ignore[arg-type]
        lambda: RecallCheckpointer(None, store=seeded),  # type: ignore[arg-type]
        lambda: DurableToolNode([], classes=["x"]),  # type: ignore[arg-type]
        lambda: DurableToolNode([], resolver=5),  # type: ignore[arg-type]
        lambda: DurableToolNode([], undo={"t": 5}),  # type: ignore[dict-item]
        lambda: DurableToolNode([], undo=[("t", print)]),  # type: ignore[arg-type]
    ]
    for make in bad:
        with pytest.raises(RecallError) as err:
            make()
        _invalid(err.value)


def test_a_url_for_another_engine_is_refused_by_name(tmp_path: Any) -> None:
    # "mysql://u@h/db" was taken for a path: "the folder .../mysql:/u@h does not exist".
    with pytest.raises(RecallError) as err:
        RecallStore.open("mysql://u@h/db")
    assert "mysql:// databases are not supported" in _invalid(err.value)


@pytest.mark.parametrize("agent_id", ["   ", "\t\n", ""])
def test_an_agent_id_of_only_whitespace_names_nobody(seeded: RecallStore, agent_id: str) -> None:
    # "   " was accepted: records filed under blanks, found again only by pasting them exactly.
    writes: list[Any] = [
        lambda: seeded.record(agent_id, [HumanMessage("x", id="ws")]),
        lambda: seeded.update_working_state(agent_id, goal="g"),
        lambda: seeded.milestone(agent_id, "m"),
        lambda: seeded.set_pointer(agent_id, "repo", "git@x"),
        lambda: seeded.acquire_lease(agent_id, "holder", 30.0),
    ]
    for write in writes:
        with pytest.raises(RecallError) as err:
            write()
        assert "not only whitespace" in _invalid(err.value)
    assert [a.agent_id for a in seeded.agents()] == ["ag"]


def test_a_run_for_a_blank_agent_id_is_refused_before_it_starts(seeded: RecallStore) -> None:
    from langgraph.graph import START, MessagesState, StateGraph

    ran: list[str] = []

    def node(state: MessagesState) -> dict[str, Any]:
        ran.append("node")
        return {"messages": [AIMessage("hi", id="a1")]}

    builder = StateGraph(MessagesState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    graph = builder.compile(checkpointer=seeded.checkpointer(), store=seeded)
    with pytest.raises(RecallError) as err:
        graph.invoke(
            {"messages": [HumanMessage("go", id="h1")]},
            {"configurable": {"thread_id": "t-1", "agent_id": "  "}},
        )
    assert "not only whitespace" in _invalid(err.value)
    assert ran == [] and [a.agent_id for a in seeded.agents()] == ["ag"]


def test_a_namespace_the_store_cannot_take_is_a_recall_error_too(seeded: RecallStore) -> None:
    # They were LangGraph's InvalidNamespaceError only, outside "catch RecallError"; a string
    # namespace was taken letter by letter: put("docs", ...) wrote under ("d", "o", "c", "s").
    attempts: list[Any] = [
        lambda: seeded.put((), "k", {"v": 1}),
        lambda: seeded.put(("a.b",), "k", {"v": 1}),
        lambda: seeded.put(("a", ""), "k", {"v": 1}),
        lambda: seeded.put(("langgraph",), "k", {"v": 1}),
        lambda: seeded.put("docs", "k", {"v": 1}),  # type: ignore[arg-type]
        lambda: seeded.get("docs", "kept"),  # type: ignore[arg-type]
        lambda: seeded.search("docs"),  # type: ignore[arg-type]
        lambda: seeded.list_namespaces(prefix="docs"),  # type: ignore[arg-type]
        lambda: asyncio.run(seeded.aput(("a.b",), "k", {"v": 1})),
    ]
    for attempt in attempts:
        with pytest.raises(RecallError) as err:
            attempt()
        assert isinstance(err.value, InvalidNamespaceError)
        assert err.value.code == "invalid_namespace"
    with pytest.raises(RecallError) as err:
        seeded.put("docs", "k", {"v": 1})  # type: ignore[arg-type]
    assert "write ('docs',)" in str(err.value)
    assert seeded.list_namespaces(prefix=("d",)) == []  # nothing under ("d", "o", "c", "s")


def test_a_secret_must_be_text_or_bytes(store_target: str) -> None:
    with pytest.raises(RecallError) as err:
        RecallStore.open(store_target, secret=5)  # type: ignore[arg-type]
    assert "str or bytes" in _invalid(err.value)


# --- one rule for identifiers (store/_ids.py, docs/identifiers.md) ---------------------------


def _incompressible(size: int) -> str:
    """ASCII text PostgreSQL cannot compress into a smaller index entry."""
    return secrets.token_urlsafe(size)[:size]


def _id_uses(seeded: RecallStore) -> dict[str, Callable[[str], Any]]:
    """Every way an identifier reaches the store, by the argument's name."""
    return {
        "agent_id": lambda v: seeded.record(v, [HumanMessage("x", id="id-test")]),
        "pointer name": lambda v: seeded.set_pointer("ag", v, "git@x"),
        "action_id": lambda v: seeded.claim("ag", v, tool="t", args={}, args_digest="d"),
        "thread_id": lambda v: seeded.claim(
            "ag", "act-t", tool="t", args={}, args_digest="d", thread_id=v
        ),
        "key": lambda v: seeded.put(("docs",), v, {"v": 1}),
        "lease agent_id": lambda v: seeded.acquire_lease(v, "holder", 30.0),
    }


BAD_IDS = {
    "lone_surrogate": ("ab\ud800cd", "lone surrogate"),
    "nul": ("ab\x00cd", "NUL"),
    "over_512_bytes": ("x" * 513, "at most 512 bytes"),
    "over_512_bytes_of_emoji": ("😀" * 129, "is 516 bytes in UTF-8"),
}


@pytest.mark.parametrize("bad", list(BAD_IDS))
def test_every_identifier_is_refused_the_same_way_on_both_engines(
    seeded: RecallStore, bad: str
) -> None:
    # A lone surrogate was a UnicodeEncodeError naming nothing; a 10 KB id ran on SQLite and
    # failed PostgreSQL's index ("index row requires 10256 bytes"); NUL was kept by SQLite.
    value, problem = BAD_IDS[bad]
    for name, use in _id_uses(seeded).items():
        with pytest.raises(RecallError) as err:
            use(value)
        text = _invalid(err.value)
        assert name.split()[-1] in text and problem in text, (name, text)
        assert isinstance(err.value, ValueError), "invalid_value is also a ValueError"
    assert seeded.actions("ag") == [] and seeded.pointers("ag") == {}
    assert [a.agent_id for a in seeded.agents()] == ["ag"]


def test_the_longest_identifiers_fit_postgresqls_index(seeded: RecallStore) -> None:
    """512 incompressible bytes per identifier, 1600 per namespace: taken by both engines
    (the widest index entry is an item's namespace and key together)."""
    agent, key = _incompressible(512), _incompressible(512)
    emoji = "😀" * 128  # 512 bytes in UTF-8
    assert seeded.record(agent, [HumanMessage("long", id=_incompressible(200))]) == 1
    seeded.set_pointer(agent, emoji, "git@x")
    seeded.claim(agent, _incompressible(512), tool=_incompressible(512), args={}, args_digest="d")
    namespace = tuple(_incompressible(199) for _ in range(8))  # 8 * 199 + 7 = 1599 bytes
    seeded.put(namespace, key, {"v": 1})
    assert seeded.get(namespace, key).value == {"v": 1}
    assert seeded.pointers(agent)[emoji].target == "git@x"
    with pytest.raises(InvalidNamespaceError) as err:
        seeded.put((*namespace[:-1], _incompressible(201)), key, {"v": 1})
    assert "at most 1600 bytes" in str(err.value)


def test_reads_refuse_only_what_no_write_could_have_stored(seeded: RecallStore) -> None:
    # An id over the limit may have been written before the rule: reading it just finds none.
    assert seeded.turns("x" * 600) == []
    assert seeded.get(("docs",), "k" * 600) is None
    for read in (
        lambda: seeded.turns("a\ud800"),
        lambda: seeded.working_state(""),
        lambda: seeded.get(("docs",), "k\ud800"),
        lambda: seeded.action("act\ud800"),
        lambda: seeded.fetch_output("out-\x00"),
    ):
        with pytest.raises(RecallError) as err:
            read()
        _invalid(err.value)


def test_the_briefing_of_an_empty_agent_id_is_an_invalid_value(seeded: RecallStore) -> None:
    # It was LangGraph's InvalidNamespaceError about the namespace ("recall", "", "memories").
    for agent in ("", "a\ud800"):
        with pytest.raises(RecallError) as err:
            seeded.briefing(agent)
        assert "agent_id" in _invalid(err.value)
        assert not isinstance(err.value, InvalidNamespaceError)


def test_an_invalid_value_is_a_value_error_however_it_is_raised() -> None:
    err = RecallError("no", code="invalid_value")
    assert isinstance(err, InvalidValue) and isinstance(err, ValueError)
    assert RecallError.for_code("invalid_value") is InvalidValue
    assert type(pickle.loads(pickle.dumps(err))) is InvalidValue
    assert not isinstance(RecallError("no", code="unknown_agent"), ValueError)


# --- search filters: one behaviour on both engines -------------------------------------------


@pytest.mark.parametrize(
    "flt",
    [
        {"n": float("nan")},
        {"n": {"$ne": float("nan")}},
        {"n": {"$gt": float("nan")}},
        {"n": float("inf")},
    ],
)
def test_a_filter_no_item_can_match_is_refused_on_both_engines(
    seeded: RecallStore, flt: dict[str, Any]
) -> None:
    # A NaN filter returned [] on SQLite and invalid_value on PostgreSQL (which orders NaN
    # above every number, so {"$gt": nan} would have matched nothing there either way).
    seeded.put(("docs",), "num", {"n": 1})
    with pytest.raises(RecallError) as err:
        seeded.search(("docs",), filter=flt)
    text = _invalid(err.value)
    assert "'n'" in text and ("which no item holds" in text or "not NaN" in text)


def test_a_filter_key_that_is_not_text_the_driver_can_send_is_named(seeded: RecallStore) -> None:
    # A lone surrogate in a filter key was a UnicodeEncodeError from the driver.
    for flt in ({"a\ud800": 1}, {"outer": {"in\x00ner": 1}}):
        with pytest.raises(RecallError) as err:
            seeded.search(("docs",), filter=flt)
        assert "filter key" in _invalid(err.value)


def test_range_filters_beyond_any_float_are_answered(seeded: RecallStore) -> None:
    # float(10**400) was a raw OverflowError on both engines.
    seeded.put(("docs",), "num", {"n": 1})
    assert seeded.search(("docs",), filter={"n": {"$gt": 10**400}}) == []
    assert [i.key for i in seeded.search(("docs",), filter={"n": {"$lt": 10**400}})] == ["num"]
    assert [i.key for i in seeded.search(("docs",), filter={"n": {"$gt": -math.inf}})] == ["num"]


# --- runs and tool calls ---------------------------------------------------------------------


def _graph(store: RecallStore, node: Any, script: list[dict[str, Any]]) -> tuple[Any, Any]:
    saver = store.checkpointer()
    return build_graph(node, script, store=store, checkpointer=saver), saver


def _paying(store: RecallStore, n: Any) -> tuple[Any, Any, list[Any]]:
    """A graph whose model calls the external tool pay(n) once; what pay ran with."""
    ran: list[Any] = []

    @tool
    def pay(n: Any) -> str:
        """Pay n."""
        ran.append(n)
        return "paid"

    node = DurableToolNode([pay], classes={"pay": "external"})
    graph, saver = _graph(store, node, [reply("", call("pay", n=n)), reply("done")])
    return graph, saver, ran


@pytest.mark.parametrize("agent_id", ["", "x" * 10_000, "a\ud800"])
def test_a_run_for_an_agent_id_that_is_not_one_is_refused_before_the_lease(
    seeded: RecallStore, agent_id: str
) -> None:
    # "" fell back to the thread id ("   " was refused); 10 KB ran, and the briefing then
    # blamed the token budget.
    graph, saver, ran = _paying(seeded, 1)
    try:
        with pytest.raises(RecallError) as err:
            graph.invoke(
                {"messages": [HumanMessage("go")]},
                {"configurable": {"thread_id": "t-1", "agent_id": agent_id}},
            )
        assert "agent_id" in _invalid(err.value)
        assert ran == [] and [a.agent_id for a in seeded.agents()] == ["ag"]
        assert seeded.lease("t-1") is None
        # Absent (or None), the agent is the thread, as the DESIGN says.
        graph.invoke(
            {"messages": [HumanMessage("go")]},
            {"configurable": {"thread_id": "t-2", "agent_id": None}},
        )
        assert ran == [1] and [a.status for a in seeded.actions("t-2")] == ["done"]
    finally:
        saver.close()


def test_a_turn_id_that_is_not_one_is_refused_before_the_run(seeded: RecallStore) -> None:
    graph, saver = _graph(seeded, DurableToolNode([]), [reply("hi")])
    try:
        for turn_id in ("", "t\ud800", "t" * 600):
            with pytest.raises(RecallError) as err:
                graph.invoke(
                    {"messages": [HumanMessage("go")]},
                    {"configurable": {"thread_id": "t-1", "agent_id": "ag", "turn_id": turn_id}},
                )
            assert "turn_id" in _invalid(err.value)
        assert [t.msg_id for t in seeded.turns("ag")] == ["m0"]
    finally:
        saver.close()


UNSTORABLE_ARGS: dict[str, tuple[Any, str]] = {
    "int_over_64_bits": (10**400, "['n'] is an int beyond 64 bits"),
    "lone_surrogate": ("to \ud800 x", "lone surrogate"),
    "nested_too_deep": (functools.reduce(lambda v, _: [v], range(3000), []), "levels deep"),
}


@pytest.mark.parametrize("name", list(UNSTORABLE_ARGS))
def test_arguments_that_cannot_be_recorded_are_refused_before_the_tool_runs(
    seeded: RecallStore, name: str
) -> None:
    # 10**400 gave msgpack's "Type is not msgpack serializable: AIMessage"; a lone surrogate
    # was recorded as "?" (the call resumed with other arguments than it was asked with).
    value, said = UNSTORABLE_ARGS[name]
    graph, saver, ran = _paying(seeded, value)
    try:
        with pytest.raises(RecallError) as err:
            graph.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-a"}})
        assert said in _invalid(err.value)
        assert ran == [] and seeded.actions("t-a") == []
    finally:
        saver.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_result_langchain_cannot_render_is_recorded_done_with_a_stand_in(
    seeded: RecallStore, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    # The tool returned; BaseTool.run's json.dumps/str() of 100,000 nested lists then raised
    # RecursionError, and the call was recorded "failed" although its effect happened.
    effects: list[int] = []

    @tool
    def deep(n: int) -> Any:
        """Return something nested very deep."""
        effects.append(n)
        return functools.reduce(lambda v, _: [v], range(100_000), [])

    node = DurableToolNode([deep], classes={"deep": "external"})
    graph, saver = _graph(seeded, node, [reply("", call("deep", n=1)), reply("done")])
    try:
        inputs = {"messages": [HumanMessage("go")]}
        config = {"configurable": {"thread_id": "t-d"}}
        with caplog.at_level(logging.WARNING, logger="langgraph_recall"):
            if mode == "sync":
                out = graph.invoke(inputs, config)
            else:
                out = asyncio.run(graph.ainvoke(inputs, config))
        [action] = seeded.actions("t-d")
        assert effects == [1] and action.status == "done"
        assert "RecursionError" in action.result.additional_kwargs["recall_stand_in"]
        assert "deep ran, but its result could not be stored" in out["messages"][2].content
        assert any("recorded done with a stand-in" in r.message for r in caplog.records)
    finally:
        saver.close()


@pytest.mark.parametrize("calls", [1, 2], ids=["end_with_the_task_write", "end_on_its_own"])
def test_an_answer_that_cannot_be_stored_is_recorded_done_with_a_stand_in(
    seeded: RecallStore, calls: int
) -> None:
    # The end failed to pack (an artifact holding an int beyond 64 bits): the effect had
    # happened and the call stayed open, in doubt; with one call the unpacked end even failed
    # the run.
    effects: list[int] = []

    @tool(response_format="content_and_artifact")
    def charge(n: int) -> tuple[str, Any]:
        """Charge n."""
        effects.append(n)
        return f"charged {n}", {"receipt": 10**30}

    node = DurableToolNode([charge], classes={"charge": "external"})
    script = [reply("", *[call("charge", n=i) for i in range(calls)]), reply("done")]
    graph, saver = _graph(seeded, node, script)
    try:
        out = graph.invoke(
            {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t-c"}}
        )
        actions = seeded.actions("t-c")
        assert sorted(effects) == list(range(calls)) and len(actions) == calls
        assert {a.status for a in actions} == {"done"}
        for a in actions:
            assert a.result.content.startswith("charged")
            assert "int beyond 64 bits" in a.result.additional_kwargs["recall_stand_in"]
        assert [m.content for m in out["messages"]][-1] == "done"
        # A repeat answers from the record: nothing runs again.
        graph.invoke(None, {"configurable": {"thread_id": "t-c"}})
        assert sorted(effects) == list(range(calls))
    finally:
        saver.close()
