"""The fast path of the canonical tree (dicts with plain str keys) gives the very tree, hence the
very digest, of the general path: an approval or a resume recorded before it still matches."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from langgraph_recall.tools import _canonical


def _general_tree(value: Any) -> Any:
    """The general path for every dict (the order the digest has always used)."""
    if isinstance(value, dict):
        items = [[_canonical._tree(k), _general_tree(v)] for k, v in value.items()]
        items.sort(key=lambda kv: _canonical._text(kv[0]))
        return ["d", items]
    if isinstance(value, list):
        return ["l", [_general_tree(v) for v in value]]
    return _canonical._tree(value)


# Keys that sort differently as raw strings and as JSON text: a prefix followed by a space or
# "!" (below the closing quote), escaped quotes and backslashes, control and non-ASCII
# characters, lone surrogates.
_TRICKY = ["ab", "ab ", "ab!", "ab#", 'a"b', "a\\b", "a\nb", "a\x01", "é", "\u00ff", "\ud800", ""]
_keys = st.one_of(st.sampled_from(_TRICKY), st.text(max_size=6))
_leaves = st.one_of(st.none(), st.integers(), st.text(max_size=4), st.booleans())
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=5)),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=8))
def test_str_keyed_dicts_give_the_general_tree(args: dict[str, Any]) -> None:
    assert _canonical._tree(args) == _general_tree(args)
    assert _canonical.canonical_bytes(args) == _canonical._text(_general_tree(args)).encode()


def test_keys_whose_raw_and_json_orders_differ_keep_the_json_order() -> None:
    args = {"ab": 1, "ab ": 2, "ab!": 3, 'a"b': 4, "a\\b": 5}
    assert _canonical._tree(args) == _general_tree(args)
    # The digest of two calls that differ only in key order is the same.
    assert _canonical.args_digest("t", args) == _canonical.args_digest(
        "t", dict(reversed(args.items()))
    )


def test_digests_and_keys_are_the_ones_earlier_versions_recorded() -> None:
    # Pinned values: an approval, an intent's digest and its action key recorded by an earlier
    # version must still match after an upgrade, however the encoding is computed inside.
    import datetime as dt
    import uuid
    from decimal import Decimal

    pinned = [
        (
            "pay",
            {"amount": Decimal("10.00"), "to": "alice"},
            "5f567ed78655400f6fc9494a252853a8aabfbe9677d1116de19c3a636f76dde8",
        ),
        (
            "send_email",
            {"to": ["a@x.io", "b@x.io"], "subject": "hi \u00e9\ud800", "cc": None, "urgent": True},
            "59299ffb60a6af74dcebcca90e3c1bc9adb179c9c175997dd5e39f6734232fa7",
        ),
        (
            "book",
            {
                "when": dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc),
                "seats": {3, 1, 2},
                "price": 9.5,
                "ref": uuid.UUID(int=7),
                "opts": {2: "b", 1: "a"},
            },
            "a6287fec9dd4c0675b41f0025ca92948d6c493a2ce1aff036ec0f8ba16fd80a8",
        ),
    ]
    for tool, args, digest in pinned:
        assert _canonical.args_digest(tool, args) == digest, tool
    key = _canonical.action_key("billing-migrator", "ai-msg-1", "call_0", "pay")
    assert key == "37beea01599be0cffa67a85bbf7ede0b"
