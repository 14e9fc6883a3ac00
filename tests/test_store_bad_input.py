"""Bad input gets a clear RecallError (or LangGraph's InvalidNamespaceError) and loses nothing
already recorded: every test reopens the store afterwards and checks the earlier records.
(A corrupt SQLite file is covered in test_store_schema.py.)"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.store.base import InvalidNamespaceError

from langgraph_recall import RecallError
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
    for call in (getattr(seeded, method), getattr(seeded, "a" + method)):
        with pytest.raises(RecallError) as err:
            got = call(*args, **kwargs)
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
