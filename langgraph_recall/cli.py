"""The ``langgraph-recall`` command (placeholder until the full CLI lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from langchain_core.messages import AIMessage, HumanMessage

    from .store import RecallStore

    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["demo"]:
        print("usage: langgraph-recall demo", file=sys.stderr)
        return 2
    with RecallStore.open() as store:
        n = store.record("demo", [HumanMessage("hello", id="demo-1"), AIMessage("hi!", id="demo-2")])
        print(f"recorded {n} new turns for agent 'demo' in {store.target}")
        print("turns:", [t.message.content for t in store.turns("demo")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
