from langchain_core.messages import HumanMessage


def test_store_round_trip(store):
    store.put(("docs",), "a", {"text": "hello"})
    assert store.get(("docs",), "a").value == {"text": "hello"}
    assert store.record("agent", [HumanMessage("hi", id="m1")]) == 1
    assert store.record("agent", [HumanMessage("hi", id="m1")]) == 0
