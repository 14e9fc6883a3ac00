"""Text search finds the same words on both backends, for any size of value, and survives the
ways a database is moved about (an upgrade, a ``.dump`` restore).

Every test runs on SQLite and on the real PostgreSQL server unless it names one.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import string
import subprocess
from typing import Any

import pytest

from langgraph_recall.store import RecallStore, _db
from langgraph_recall.store._schema import MIGRATIONS, SEARCH_BODY_MAX

NOTES = {
    "email": ("mail alice@example.com about the invoice", "alice"),
    "url": ("PR is at https://github.com/acme/billing/pull/42", "github"),
    "host": ("deployed to staging.acme.io today", "staging"),
    "path": ("the bug is in /srv/app/ledger.py line 3", "ledger"),
    "version": ("upgrade to version 1.5 next week", "1.5"),
    "ticket": ("see ticket JIRA-1234 for details", "1234"),
    "hyphen": ("a well-known issue", "known"),
    "snake": ("call retry_payment again", "payment"),
}


def _found(store: RecallStore, query: str) -> list[str]:
    return [i.key for i in store.search(("notes",), query=query)]


def test_a_word_inside_an_email_url_path_or_ticket_is_found(store: RecallStore) -> None:
    # PostgreSQL's parser kept each of these as one compound lexeme: found on SQLite only.
    for key, (text, _) in NOTES.items():
        store.put(("notes",), key, {"text": text})
    for key, (_, query) in NOTES.items():
        assert key in _found(store, query), (key, query)
    assert _found(store, "alice@example.com")[0] == "email", "any word matches; all rank first"
    assert set(_found(store, "acme")) == {"url", "host"}


def test_working_state_words_inside_a_url_are_found(store: RecallStore) -> None:
    store.update_working_state("ag", goal="close https://tickets.example.com/BILL-7")
    hits = store.search(("recall",), query="tickets")
    assert [(i.namespace[-1], i.key) for i in hits] == [("state", "current")]


def _varied_text(words: int, seed: int) -> str:
    rnd = random.Random(seed)
    return " ".join("".join(rnd.choices(string.ascii_lowercase, k=10)) for _ in range(words))


def test_a_large_varied_value_is_kept_whole_and_searchable(store: RecallStore) -> None:
    """A tsvector holds at most 1 MB: PostgreSQL refused such a put ("string is too long
    for tsvector"). Its searchable text is capped there; the value is kept whole."""
    text = _varied_text(150_000, seed=0)  # 1.65 MB, all different words
    assert len(text) > 10 * SEARCH_BODY_MAX
    store.put(("notes",), "log", {"text": text})
    assert store.get(("notes",), "log").value == {"text": text}
    assert _found(store, text[:10]) == ["log"], "a word near the start is found"
    store.update_working_state("ag", notes=text)  # the records' own items too
    assert store.working_state("ag")["notes"] == text
    last = text[-10:]
    # Beyond the cap, PostgreSQL does not find it (README); SQLite indexes all of it.
    assert _found(store, last) == ([] if store.dialect == "postgres" else ["log"])


@pytest.mark.postgres
def test_postgres_items_written_before_v5_are_found_after_the_upgrade(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as old_code:
        old_code.setattr(_db, "MIGRATIONS", MIGRATIONS[:4])
        old_code.setattr(_db, "SCHEMA_VERSION", 4)
        with RecallStore.open(pg_dsn) as old:
            with old._db.tx(write=True) as tx:  # as v4 wrote them: the text itself, whole
                for key, (text, _) in NOTES.items():
                    tx.run(
                        "INSERT INTO recall_items (prefix, key, value, body, created_at, "
                        "updated_at) VALUES ('notes', ?, '{}', ?, 1.0, 1.0)",
                        (key, text),
                    )
            assert _found(old, "alice") == []
    with RecallStore.open(pg_dsn) as new:
        for key, (_, query) in NOTES.items():
            assert key in _found(new, query), (key, query)


# --- an async-only embedding function ---------------------------------------------------------

_VOCAB = ["apple", "banana", "cherry"]


async def _aembed(texts: list[str]) -> list[list[float]]:
    return [[float(t.count(w)) + 0.01 for w in _VOCAB] for t in texts]


def test_an_async_only_embedding_works_with_the_async_methods(store_target: str) -> None:
    """LangGraph's IndexConfig takes an async ``embed``; abatch ran the sync batch in a
    thread, which called the missing sync twin ("initialized with an async function")."""
    from langchain_core.messages import HumanMessage

    from langgraph_recall.store._records import agent_ns

    async def run() -> None:
        async with RecallStore.open(store_target, index={"dims": 3, "embed": _aembed}) as s:
            await s.aput(("d",), "a", {"text": "apple pie"})
            await s.aput(("d",), "b", {"text": "banana"})
            hits = await s.asearch(("d",), query="apple")
            assert [i.key for i in hits] == ["a", "b"]
            assert hits[0].score is not None and hits[0].score > hits[1].score
            # A search inside another async twin's thread (the briefing's memories).
            await s.arecord("ag", [HumanMessage("what about cherry?", id="m1")])
            await s.aput(agent_ns("ag", "memories"), "m", {"text": "cherry is the favourite"})
            assert "cherry is the favourite" in (await s.abriefing("ag")).text

    asyncio.run(run())


# --- a SQLite backup made with `sqlite3 recall.db .dump` ---------------------------------------


def _dump_and_restore(path: str, into: str) -> None:
    """What an operator does with the sqlite3 shell: ``.dump`` to SQL, read into a new file."""
    sqlite3_shell = shutil.which("sqlite3")
    if sqlite3_shell is None:  # pragma: no cover - depends on the machine
        pytest.skip("the sqlite3 shell is not installed")
    dump = subprocess.run(
        [sqlite3_shell, path, ".dump"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    subprocess.run([sqlite3_shell, into], input=dump, text=True, check=True, timeout=120)
    shutil.copy(path + ".secret", into + ".secret")


def _some_deleted(store: RecallStore) -> None:
    for i in range(20):
        store.put(("notes",), f"k{i:02d}", {"text": f"word{i}"})
    for i in range(0, 20, 2):  # gaps in the rowids, which a restore closes up
        store.delete(("notes",), f"k{i:02d}")


def _assert_text_search_right(store: RecallStore) -> None:
    assert _found(store, "word11") == ["k11"]
    assert sorted(_found(store, "word1 word3 word5")) == ["k01", "k03", "k05"]
    assert _found(store, "word4") == []


def test_text_search_is_right_after_a_dump_and_restore(tmp_path: Any) -> None:
    """The FTS5 index followed the implicit rowid, which a dump leaves out and a restore
    renumbers: "word11" found nothing, "word1 word3 word5" found word3, word7 and word11."""
    path, restored = str(tmp_path / "recall.db"), str(tmp_path / "restored.db")
    with RecallStore.open(path) as s:
        _some_deleted(s)
        _assert_text_search_right(s)
    _dump_and_restore(path, restored)
    with RecallStore.open(restored) as s:
        _assert_text_search_right(s)
        s.put(("notes",), "k20", {"text": "word20"})
        s.delete(("notes",), "k11")
        assert _found(s, "word20 word11") == ["k20"]


def test_an_index_a_restore_broke_before_v6_is_mended_by_the_upgrade(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, restored = str(tmp_path / "recall.db"), str(tmp_path / "restored.db")
    with monkeypatch.context() as old_code:
        old_code.setattr(_db, "MIGRATIONS", MIGRATIONS[:5])
        old_code.setattr(_db, "SCHEMA_VERSION", 5)
        with RecallStore.open(path) as s:
            _some_deleted(s)
        _dump_and_restore(path, restored)
        with RecallStore.open(restored) as s:
            assert _found(s, "word11") == [], "broken, as v5 left it"
    with RecallStore.open(restored) as s:
        _assert_text_search_right(s)
        assert s.get(("notes",), "k11").value == {"text": "word11"}
