"""Properties of canonical arguments, digests and action keys (hypothesis)."""

from __future__ import annotations

import datetime as dt
import os
import pickle
import subprocess
import sys
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langgraph_recall import RecallError
from langgraph_recall.tools._canonical import action_key, args_digest, canonical_bytes

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.dates(),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones())),
    st.uuids(),
)
hashable = st.one_of(
    st.booleans(), st.integers(), st.text(max_size=6), st.decimals(allow_nan=False)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
        st.frozensets(hashable, max_size=4),
        st.sets(hashable, max_size=4),
    ),
    max_leaves=12,
)
arguments = st.dictionaries(st.text(max_size=6), values, max_size=5)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(arguments, st.randoms())
def test_digest_ignores_the_order_of_keys_and_set_members(args: dict[str, Any], rnd: Any) -> None:
    def shuffled(value: Any) -> Any:
        if isinstance(value, dict):
            items = [(k, shuffled(v)) for k, v in value.items()]
            rnd.shuffle(items)
            return dict(items)
        if isinstance(value, (set, frozenset)):
            members = list(value)
            rnd.shuffle(members)
            return type(value)(members)
        if isinstance(value, list):
            return [shuffled(v) for v in value]
        if isinstance(value, tuple):
            return tuple(shuffled(v) for v in value)
        return value

    assert args_digest("t", args) == args_digest("t", shuffled(args))


@FAST
@given(values)
def test_equal_values_of_one_type_have_one_encoding(value: Any) -> None:
    assert canonical_bytes(value) == canonical_bytes(pickle.loads(pickle.dumps(value)))


@FAST
@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_numbers_of_different_types_never_share_a_digest(n: int) -> None:
    forms = [n, float(n), Decimal(n), str(n), [n], (n,), {n}, frozenset({n})]
    if n in (0, 1):
        forms.append(bool(n))
    digests = {args_digest("pay", {"amount": f}) for f in forms}
    assert len(digests) == len(forms)


@FAST
@given(st.decimals(allow_nan=False, allow_infinity=False), st.integers(min_value=0, max_value=6))
def test_the_same_amount_written_differently_is_one_amount(amount: Decimal, zeros: int) -> None:
    padded = Decimal(f"{amount:f}" + ("" if "." in f"{amount:f}" else ".") + "0" * zeros)
    assert padded == amount
    assert canonical_bytes(padded) == canonical_bytes(amount)


@FAST
@given(arguments, arguments)
def test_different_arguments_have_different_digests(a: dict[str, Any], b: dict[str, Any]) -> None:
    if canonical_bytes(a) != canonical_bytes(b):
        assert args_digest("t", a) != args_digest("t", b)


parts = st.text(min_size=0, max_size=6, alphabet=st.sampled_from("ab|\x1f:0"))


@FAST
@given(st.tuples(parts, parts, parts, parts), st.tuples(parts, parts, parts, parts))
def test_action_keys_are_stable_and_never_shared_by_two_calls(
    x: tuple[str, ...], y: tuple[str, ...]
) -> None:
    assert action_key(*x) == action_key(*x)
    if x != y:
        assert action_key(*x) != action_key(*y)


def test_values_without_a_stable_form_are_refused() -> None:
    class Opaque:
        pass

    with pytest.raises(RecallError) as err:
        canonical_bytes({"x": Opaque()})
    assert err.value.code == "invalid_value"


_SAMPLES: list[Any] = [
    {"to": {"a", "b", "c", "dd", "eee"}, "amount": Decimal("10.50")},
    {"when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), "id": uuid.UUID(int=7)},
    {"tags": frozenset({"x", "y", "z"}), "nested": {"b": [1, 2.5, "3"], "a": (True, None)}},
]


def test_digests_and_keys_are_the_same_in_another_interpreter() -> None:
    """Set iteration order depends on PYTHONHASHSEED: a new process must still agree."""
    here = [args_digest("t", s) for s in _SAMPLES] + [action_key("agent", "ai-1", "call_1", "t")]
    code = (
        "import pickle, sys\n"
        "from langgraph_recall.tools._canonical import action_key, args_digest\n"
        "samples = pickle.loads(sys.stdin.buffer.read())\n"
        "print('\\n'.join([args_digest('t', s) for s in samples]"
        " + [action_key('agent', 'ai-1', 'call_1', 't')]))\n"
    )
    for seed in ("12345",):  # this process runs under another (random) seed
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=pickle.dumps(_SAMPLES),
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        assert out.stdout.decode().split() == here
