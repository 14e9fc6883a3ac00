"""``langgraph-recall demo`` (placeholder: a store round trip until the full demo lands)."""

from __future__ import annotations

import click
from langchain_core.messages import AIMessage, HumanMessage

from ..store import RecallStore


def run_demo(db: str, *, quick: bool = False) -> None:
    with RecallStore.open(db) as store:
        n = store.record(
            "demo", [HumanMessage("hello", id="demo-1"), AIMessage("hi!", id="demo-2")]
        )
        click.echo(f"recorded {n} new turns for agent 'demo' in {store.target}")
