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
