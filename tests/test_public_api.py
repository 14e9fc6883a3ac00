"""The public surface is exactly what the README documents, and the DESIGN contract is in it."""

from __future__ import annotations

import inspect
import pathlib
import re

import langgraph_recall

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"

# Fixed by DESIGN.md's "Public contract": tests outside the project import these.
CONTRACT = {
    "RecallStore",
    "RecallCheckpointer",
    "DurableToolNode",
    "RecallMiddleware",
    "ActionEnd",
    "recall_tools",
    "pre_model_hook",
    "post_model_hook",
    "with_briefing",
    "record_node",
    "briefing_node",
    "RecallError",
}


def documented_names() -> list[str]:
    text = README.read_text()
    section = text.split("## API overview", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([A-Za-z_]+)` \|", section, flags=re.MULTILINE)


def test_all_equals_the_documented_names() -> None:
    documented = documented_names()
    assert len(documented) == len(set(documented))
    assert sorted(langgraph_recall.__all__) == sorted(documented)


def test_all_is_sorted_and_importable() -> None:
    assert langgraph_recall.__all__ == sorted(langgraph_recall.__all__)
    for name in langgraph_recall.__all__:
        assert getattr(langgraph_recall, name) is not None, name


def test_design_contract_names_are_public() -> None:
    assert CONTRACT <= set(langgraph_recall.__all__)


def test_error_codes_are_stable() -> None:
    from langgraph_recall import RecallError

    codes = {
        "lease_held",
        "lease_lost",
        "in_doubt",
        "approval_required",
        "approval_mismatch",
        "approval_denied",
        "unclassified_tool",
        "records_missing",
    }
    for code in codes:
        cls = RecallError.for_code(code)
        err = cls("x") if cls is not RecallError else RecallError("x", code=code)
        assert err.code == code and isinstance(err, RecallError)


def test_every_public_method_of_the_store_has_a_docstring() -> None:
    # DESIGN: a docstring on every public name. The async twins had none: help(store.aturns)
    # and an IDE's hover showed nothing, not even which sync method they mirror.
    from langgraph_recall import RecallStore

    missing = [
        name
        for name in dir(RecallStore)
        if not name.startswith("_")
        and callable(getattr(RecallStore, name))
        and not inspect.getdoc(getattr(RecallStore, name))
    ]
    assert missing == []
