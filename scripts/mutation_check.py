#!/usr/bin/env python
"""Remove each guard in turn (tools, leases, fencing, recording) and show that a test fails.

For every guard below, the check copies the package and its tests to a temporary folder (the
working tree is never touched: other people may be running it), replaces one exact piece of
source with a version that lacks the guard, runs the tests that specify that guard, and
expects them to FAIL. A guard whose removal no test notices is reported as SURVIVED, and the
script exits 1. The tests first run unmodified and must pass.

    python scripts/mutation_check.py            # all guards
    python scripts/mutation_check.py --only digest
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    guard: str
    path: str  # relative to the repository
    find: str  # must occur exactly once
    replace: str
    tests: tuple[str, ...]  # pytest node ids, or "file::-k::expression"


MUTATIONS = [
    Mutation(
        "claim",
        "claim uniqueness: a call that ran (or is running) is never claimed again",
        "langgraph_recall/store/_actions.py",
        '        return Claim("in_doubt", prev) if prev.started else None\n'
        '    if prev.status in ("done", "failed"):\n'
        "        return Claim(prev.status, prev)\n",
        "        pass  # every claim inserts a new attempt\n",
        (
            "tests/test_tools_calls.py::test_replaying_a_finished_call_returns_its_result_without_running",
            "tests/test_tools_parallel.py::test_finished_sibling_runs_once_when_another_call_interrupts",
        ),
    ),
    Mutation(
        "in_doubt",
        "in-doubt refusal: an external call left open by a crash is not run again",
        "langgraph_recall/tools/_durable.py",
        '            elif klass == "external" or action.args_digest != digest:\n',
        "            elif False:\n",
        (
            "tests/test_tools_calls.py::test_in_doubt_external_call_is_not_run_and_the_model_is_told",
        ),
    ),
    Mutation(
        "in_doubt_reported_resolved",
        "a tool that raises InDoubt is shown to the resolver in the same run, not only on resume",
        "langgraph_recall/tools/_durable.py",
        '                resolve=self.resolver if klass == "external" and round_ == 0 else None,\n',
        "                resolve=None,\n",
        ("tests/test_tools_in_doubt.py::-k::shown_to_the_resolver_in_the_same_run",),
    ),
    Mutation(
        "in_doubt_passes_tool_errors",
        "a tool's InDoubt reaches the durable wrapper under handle_tool_errors=True (not failed)",
        "langgraph_recall/tools/_bound.py",
        "        setattr(error, _INVALID_RESUME, True)\n",
        "        pass\n",
        ("tests/test_tools_in_doubt.py::-k::with_handle_tool_errors",),
    ),
    Mutation(
        "undo_tool_args_checked",
        "a LangChain tool given as an undo is checked against the original arguments first",
        "langgraph_recall/tools/_undo.py",
        "        _check_tool_args(fn, name, action, args, keys)\n",
        "        pass\n",
        ("tests/test_tools_undo.py::-k::bad_undo_function_is_refused",),
    ),
    Mutation(
        "undo_frees_stale_run",
        "undo right after a run LangGraph refused (its lease taken) gives that lease back first",
        "langgraph_recall/tools/_undo.py",
        "        checkpointer._free_stale(agent_id, entry)\n",
        "        pass\n",
        ("tests/test_tools_undo.py::-k::langgraph_refused",),
    ),
    Mutation(
        "undo_held_here_named",
        "undo refused by a run of this very process says so, and what to do (not 'another')",
        "langgraph_recall/tools/_undo.py",
        "            cp.holder == holder and cp._shared.keeper.is_busy(agent_id)\n",
        "            False\n",
        ("tests/test_tools_undo.py::-k::says_the_run_here_holds_it",),
    ),
    Mutation(
        "async_resolver_under_invoke",
        "an async resolver is run to its end under invoke, not refused (failing the whole run)",
        "langgraph_recall/tools/_drive.py",
        "            if inspect.iscoroutine(found):\n",
        "            if False:\n",
        ("tests/test_tools_in_doubt.py::-k::async_resolver_settles",),
    ),
    Mutation(
        "undo_tool_gets_key",
        "a LangChain tool given as an undo gets the undo's idempotency key in its key parameters",
        "langgraph_recall/tools/_undo.py",
        "        given = {**call.args, **dict.fromkeys(call.extras, IdempotencyKey(key))}\n",
        "        given = dict(call.args)\n",
        ("tests/test_tools_undo.py::-k::undos_idempotency_key",),
    ),
    Mutation(
        "diff_unknown_agent",
        "diff of an agent with no records raises unknown_agent, not an empty run that matches",
        "langgraph_recall/store/_records_api.py",
        "        if not self.has_agent(agent_id):\n",
        "        if False:\n",
        (
            "tests/test_replay_diff.py::-k::unknown_agent",
            "tests/test_tools_undo.py::-k::unknown_agent",
        ),
    ),
    Mutation(
        "digest",
        "digest comparison: an approval runs only the arguments it was given for",
        "langgraph_recall/store/_actions.py",
        '    if not hmac.compare_digest(a.args_digest or "", args_digest):\n',
        "    if False:\n",
        (
            "tests/test_tools_approval.py::test_edited_saved_call_is_refused_and_nothing_runs",
            "tests/test_tools_approval.py::test_approval_for_another_digest_is_refused",
        ),
    ),
    Mutation(
        "spend",
        "single spend: one approval is used by one execution",
        "langgraph_recall/store/_actions.py",
        "    if not spent:\n        raise ApprovalMismatch(_spent_by(",
        "    if False:\n        raise ApprovalMismatch(_spent_by(",
        ("tests/test_tools_approval.py::test_approval_is_spent_by_one_attempt",),
    ),
    Mutation(
        "durability",
        "durability wait: the AI message is saved before its call runs",
        "langgraph_recall/tools/_durable.py",
        "        target = _barrier.target_of(config, runtime, name)",
        "        target = None",
        (
            "tests/test_tools_calls.py::test_tool_waits_until_the_ai_message_that_asked_for_it_is_saved",
        ),
    ),
    # --- the checkpointer: leases, fencing, recording ------------------------------------
    Mutation(
        "lease_cas",
        "lease compare-and-set: a live lease of another holder is never taken",
        "langgraph_recall/store/_leases.py",
        '"WHERE recall_leases.expires_at <= {now} OR recall_leases.holder = excluded.holder "',
        '"WHERE 1 = 1 "',
        ("tests/test_checkpoint_lease.py::test_second_process_gets_lease_held_and_runs_nothing",),
    ),
    Mutation(
        "fence",
        "fencing trigger: the database refuses a checkpoint written under a stale epoch",
        "langgraph_recall/checkpoint/_fence.py",
        "    conn.execute(SQLITE_FENCE)\n",
        "    pass\n",
        (
            "tests/test_checkpoint_fencing.py::test_frozen_holder_cannot_land_a_checkpoint_after_takeover",
        ),
    ),
    Mutation(
        "turn_rewrite",
        "recording: a checkpointed message later removed in the same run is still recorded",
        "langgraph_recall/checkpoint/_recording.py",
        "        if latest is not None and not _extends(messages, latest):\n",
        "        if False:\n",
        ("tests/test_checkpoint_recording.py::-k::removed_in_the_same_run",),
    ),
    Mutation(
        "extends_all",
        "recording: a list is taken as appended-to only if every position holds the same message",
        "langgraph_recall/checkpoint/_recording.py",
        "    if isinstance(head, list) and isinstance(old, list) and head == old:\n"
        "        return True\n"
        "    return all(map(_same, head, old))\n",
        "    return not k or _same(new[k - 1], old[-1])\n",
        ("tests/test_checkpoint_recording.py::-k::summary_replacing_the_oldest",),
    ),
    Mutation(
        "hook_tail_ids",
        "hooks: the recorded part of a thread is known by all its ids, compared in order",
        "langgraph_recall/_hooks.py",
        "        if ids[: len(known)] == known:\n            return len(known)\n",
        "        return len(known)\n",
        ("tests/test_hooks.py::-k::put_in_the_middle",),
    ),
    Mutation(
        "hook_ids_bounded",
        "hooks: the message ids kept per store are bounded, and a forgotten thread is sent whole",
        "langgraph_recall/_hooks.py",
        "            if len(tails) >= MAX_THREADS or kept > MAX_IDS:\n",
        "            if len(tails) >= MAX_THREADS:\n",
        ("tests/test_hooks.py::-k::ids_the_hooks_keep_are_bounded",),
    ),
    Mutation(
        "briefing_block_above",
        "briefing: a block learned above the newest turn the input lacks never includes that turn",
        "langgraph_recall/_briefing_turns.py",
        "            blocks = [(self._high_view + 1, top)]\n",
        "            blocks = [(self._high_view, top)]\n",
        ("tests/test_briefing.py::-k::step_over_known_turns",),
    ),
    Mutation(
        "briefing_step_over_exact",
        "briefing: stepping over a known block lands on its first turn, not below it",
        "langgraph_recall/_briefing_turns.py",
        "                inside = min(limit, self.before - lo)\n",
        "                inside = min(limit, self.before - lo + 1)\n",
        ("tests/test_briefing.py::-k::step_over_known_turns",),
    ),
    Mutation(
        "briefing_step_over",
        "briefing: an agent's earlier thread does not make each briefing re-read the conversation",
        "langgraph_recall/_briefing_turns.py",
        "            if lo < self.before <= hi + 1:\n",
        "            if False:\n",
        ("tests/test_briefing.py::-k::earlier_thread_is_briefed_reading_only",),
    ),
    Mutation(
        "briefing_block_page_bounds",
        "briefing: stepping over a block keeps the full read's page bounds (where the scan cap cuts)",
        "langgraph_recall/_briefing_turns.py",
        "                limit -= inside  # the rest of the page, below the block\n",
        "",
        ("tests/test_briefing.py::-k::stops_its_scan_where_a_full_read_does",),
    ),
    Mutation(
        "briefing_block_kept",
        "briefing: a block stepped over is kept, so a turn of another thread above it costs no full reads",
        "langgraph_recall/_briefing_turns.py",
        "            blocks.append(self._block)\n",
        "            pass\n",
        ("tests/test_briefing.py::-k::does_not_bring_back_full_reads",),
    ),
    Mutation(
        "hook_idless_named",
        "hooks: an id-less channel is known by its messages' names, so only new ones are sent",
        "langgraph_recall/_hooks.py",
        "    if ids is not None and not all(ids):\n",
        "    if False:\n",
        ("tests/test_hooks.py::-k::id_less_messages_are_recorded_once",),
    ),
    Mutation(
        "hook_ids_as_text",
        "hooks: an id assigned unvalidated (not a str) is excluded as its text, as it is recorded",
        "langgraph_recall/_hooks.py",
        "    if not _all_text(seen):\n",
        "    if False:\n",
        ("tests/test_hooks.py::-k::id_assigned_after_the_message_was_made",),
    ),
    Mutation(
        "cursor_restored_ids",
        "recording: a run's restored messages are known by id, so a rewritten list hands over only new ones",
        "langgraph_recall/checkpoint/_recording.py",
        "            self._ids: set[str] = set(ids)\n",
        "            self._ids: set[str] = set()\n",
        ("tests/test_checkpoint_recording.py::-k::rewritten_list",),
    ),
    Mutation(
        "header_budget_named",
        "briefing: a budget too small for the header is refused naming the budget the header needs",
        "langgraph_recall/_briefing.py",
        "        raise _header_refused(token_budget, meter.budget_for(cost))\n",
        "        raise _header_refused(token_budget, 100)\n",
        ("tests/test_briefing.py::-k::names_the_budget_it_needs",),
    ),
    Mutation(
        "briefing_skipped_page",
        "briefing: a page of turns all in the input is not the end of the history",
        "langgraph_recall/_briefing_turns.py",
        "            if page or self.done:\n                return page\n",
        "            return page\n",
        (
            "tests/test_briefing.py::-k::longer_than_a_page",
            "tests/test_briefing.py::-k::reads_only_the_turns_recorded_since_the_last",
        ),
    ),
    Mutation(
        "block_outputs",
        "recording: a long tool result given as content blocks is stored as an output",
        "langgraph_recall/store/_transcript.py",
        "    text = content_text(content)\n    return text if len(text) > output_threshold else None\n",
        "    return None\n",
        ("tests/test_briefing.py::-k::content_block_results",),
    ),
    Mutation(
        "idless_key",
        "recording: an id-less message is named by its content, thread and channel position",
        "langgraph_recall/store/_transcript.py",
        "    where = f\"{thread_id or ''}\\0{position}\\0\".encode()\n",
        '    where = b""\n',
        ("tests/test_checkpoint_recording.py::-k::id_less_messages",),
    ),
    Mutation(
        "doubts_shortened",
        "briefing: calls in doubt over budget are shortened, each keeping its line and action id",
        "langgraph_recall/_briefing.py",
        "            action_line(a, cut(c, max(n, MIN_PIECE)))\n",
        "            action_line(a)\n",
        ("tests/test_briefing.py::-k::in_doubt_calls_over_budget",),
    ),
    Mutation(
        "doubts_budget",
        "briefing: a budget too small for the calls in doubt is refused, naming one that fits",
        "langgraph_recall/_briefing.py",
        "            fit = max(meter.budget_for(need), budget + 1)\n",
        "            fit = budget + 1\n",
        ("tests/test_briefing.py::-k::calls_in_doubt_is_refused",),
    ),
    Mutation(
        "doubts_counted",
        "briefing: calls in doubt over the default budget are listed as fit and counted",
        "langgraph_recall/_briefing.py",
        "        if not fits(lines) and not refuse:\n",
        "        if False:\n",
        ("tests/test_briefing.py::-k::counted_not_refused",),
    ),
    Mutation(
        "hooks_count_doubts",
        "hooks: a running agent's briefing counts calls in doubt over budget, never refuses",
        "langgraph_recall/_hooks.py",
        '        "doubts_over_budget": "count",\n',
        "",
        ("tests/test_briefing.py::-k::counted_not_refused",),
    ),
    Mutation(
        "shortened_turn_ref",
        "briefing: a turn cut to fit the budget keeps the ref that reads it whole",
        "langgraph_recall/_briefing_turns.py",
        "        short = cut(body, chars) + ref\n",
        "        short = cut(line, chars)\n",
        ("tests/test_briefing_tools.py::-k::shortened_to_fit_the_budget",),
    ),
    Mutation(
        "turn_ref_calls",
        "fetch_output: a turn-<seq> ref reads an assistant turn with its calls",
        "langgraph_recall/_recall_tools.py",
        '    return "\\n".join([text, *lines] if text else lines)\n',
        "    return text\n",
        ("tests/test_briefing_tools.py::-k::shortened_to_fit_the_budget",),
    ),
    Mutation(
        "catch_up_prefix",
        "recording: a crash's rewritten list (a summary before the newest turn) is caught up whole",
        "langgraph_recall/checkpoint/_recording.py",
        "                if not store._all_recorded(agent_id, [str(m.id) for m in restored[:i]]):\n",
        "                if False:\n",
        ("tests/test_checkpoint_recording.py::-k::crash_left_unrecorded",),
    ),
    Mutation(
        "turn_ref_range",
        "fetch_output: a malformed turn ref is a tool error, never an exception out of the node",
        "langgraph_recall/_recall_tools.py",
        "    if not (seq.isascii() and seq.isdigit()) or not 0 < int(seq) < 2**62:\n",
        "    if not seq.isdigit() or int(seq) < 1:\n",
        ("tests/test_briefing_tools.py::-k::malformed_turn_ref",),
    ),
    Mutation(
        "store_turn_ref_hint",
        "store.fetch_output: a turn ref is told where it is read, not to copy it exactly",
        "langgraph_recall/store/_records.py",
        '        if ref.startswith("turn-"):\n',
        "        if False:\n",
        ("tests/test_briefing_tools.py::-k::read_whole",),
    ),
    Mutation(
        "finish_keeps_doubts",
        "briefing: the final trim for a non-additive counter never drops a call in doubt unsaid",
        "langgraph_recall/_briefing.py",
        '        if sec.name == "open_actions":\n',
        "        if False:\n",
        ("tests/test_briefing.py::-k::non_additive_counter_are",),
    ),
    Mutation(
        "block_outputs_text_only",
        "recording: a long block result with an image is kept whole, not as its text",
        "langgraph_recall/store/_transcript.py",
        '    if message.type != "tool" or not all(map(_plain_text_block, content)):\n',
        '    if message.type != "tool":\n',
        ("tests/test_briefing.py::-k::more_than_text",),
    ),
    Mutation(
        "middleware_count_doubts",
        "middleware: the briefing on each model call counts calls in doubt over budget, never refuses",
        "langgraph_recall/_middleware.py",
        '            **{"doubts_over_budget": "count", **self.briefing_options},\n',
        "            **self.briefing_options,\n",
        ("tests/test_middleware.py::-k::do_not_fail_the_run",),
    ),
    Mutation(
        "turn_shortened",
        "briefing: a turn over what is left of the budget is shortened, not dropped",
        "langgraph_recall/_briefing_turns.py",
        "                line = shortened(line, meter, whole_turn_ref(t.seq))\n",
        "                line = None\n",
        ("tests/test_briefing.py::-k::long_tool_call_turn",),
    ),
    Mutation(
        "approval_id_kept",
        "briefing: a long approval line is cut before its action id, never through it",
        "langgraph_recall/_briefing_lines.py",
        '    return f"- {cut(what, ITEM_CHARS - len(suffix) - 2)}{suffix}"\n',
        '    return cut(f"- {what}{suffix}", ITEM_CHARS)\n',
        ("tests/test_briefing.py::-k::approval_line_is_cut",),
    ),
    Mutation(
        "turn_ref",
        "briefing: a turn cut in the briefing names itself, and fetch_output reads it whole",
        "langgraph_recall/_briefing_lines.py",
        '    return f"{cut(text, TURN_CHARS)}{whole_turn_ref(turn.seq)}"\n',
        "    return cut(text, TURN_CHARS)\n",
        ("tests/test_briefing_tools.py::-k::read_whole",),
    ),
    Mutation(
        "run_end_turns",
        "recording: every message is recorded by the time invoke returns",
        "langgraph_recall/checkpoint/_runs.py",
        "                final = FinalWrite(self, run, run.turns.drain())\n",
        "                final = FinalWrite(self, run, [])\n",
        ("tests/test_checkpoint_recording.py::-k::recorded_once_in_order",),
    ),
    Mutation(
        "fenced_turns",
        "a run that lost its lease leaves its unrecorded messages and its planned calls to the "
        "next holder",
        "langgraph_recall/checkpoint/_runs.py",
        "            if run.lease.lost is None:\n",
        "            if True:\n",
        (
            "tests/test_checkpoint_recording.py::-k::fenced_out",
            "tests/test_tools_planned.py::-k::lost_its_lease",
        ),
    ),
    Mutation(
        "settle",
        "catch-up: what a crash left unrecorded is recorded before the next run's first node",
        "langgraph_recall/checkpoint/_runs.py",
        "        self.recorder.flush(run.agent_id, timeout=max(30.0, self.keeper.ttl))\n\n"
        "    async def asettle",
        "        pass\n\n    async def asettle",
        ("tests/test_checkpoint_recording.py::-k::before_the_next_runs_first_node",),
    ),
    # --- the store's order of actions, the tool node's ordering of gated calls ----------
    Mutation(
        "action_seq",
        "action order (SQLite): each new attempt is numbered after the agent's last",
        "langgraph_recall/store/_actions.py",
        '_SQLITE_NEXT_SEQ = "(SELECT coalesce(max(seq), 0) + 1 FROM recall_actions WHERE agent_id = ?)"',
        '_SQLITE_NEXT_SEQ = "(SELECT 1 WHERE ? IS NOT NULL)"',
        ("tests/test_store_order.py::test_actions_keep_claim_order_when_ids_sort_the_other_way",),
    ),
    Mutation(
        "big_output",
        "a large answer is kept whole in an output, the record keeps a reference",
        "langgraph_recall/tools/_steps.py",
        "    elif needs_output(store, out):\n",
        "    elif False:\n",
        (
            "tests/test_tools_calls.py::test_a_large_result_is_stored_whole_and_still_given_to_the_model",
        ),
    ),
    Mutation(
        "question_order",
        "the calls of one message ask their questions one at a time, in call order",
        "langgraph_recall/tools/_order.py",
        "        if not self.turns.ready(self.call_id):\n            raise Deferred()\n",
        "        if False:\n            raise Deferred()\n",
        ("tests/test_tools_parallel.py::-k::question",),
    ),
    Mutation(
        "barrier_wake",
        "durability barrier: a waiter is woken the moment the checkpoint's put returns",
        "langgraph_recall/checkpoint/_durable.py",
        "            if self._waiters:\n",
        "            if False:\n",
        (
            "tests/test_checkpoint_barrier_inflight.py::test_waiting_on_a_checkpoint_being_written_here_reads_nothing",
        ),
    ),
    Mutation(
        "wal_thread",
        "SQLite log: checkpoints run on the store's own thread (connections never do them)",
        "langgraph_recall/store/_wal.py",
        "            self._kick()\n",
        "            pass\n",
        ("tests/test_store_wal.py",),
    ),
    Mutation(
        "wal_restart",
        "SQLite log: past a bound, a pass under the write lock lets the next writer start it over",
        "langgraph_recall/store/_wal.py",
        "        if logged >= RESTART_AFTER_FRAMES and self._write_lock.acquire(timeout=1.0):\n",
        "        if False:\n",
        ("tests/test_store_wal.py::test_a_long_run_of_commits_keeps_the_log_small",),
    ),
    Mutation(
        "cursor_close",
        "SQLite: a transaction's cursor closes on exit, so no idle connection pins the log",
        "langgraph_recall/store/_sqlite.py",
        "            self._cur.close()\n",
        "            pass\n",
        (
            "tests/test_store_wal.py::test_a_finished_read_leaves_no_snapshot_that_stops_a_checkpoint",
        ),
    ),
    Mutation(
        "rowless",
        "schema v2: the action table is rebuilt without rowid, every record kept",
        "langgraph_recall/store/_schema.py",
        "    new = replace(table, without_rowid=True)\n",
        "    new = table\n",
        ("tests/test_store_schema.py::-k::upgraded",),
    ),
    Mutation(
        "pg_durability",
        "PostgreSQL durability: the chosen synchronous_commit reaches every connection of ours",
        "langgraph_recall/store/_postgres.py",
        "        if self.synchronous_commit is not None:\n",
        "        if False:\n",
        ("tests/test_store_durability.py::-k::reaches",),
    ),
    Mutation(
        "pg_idle_timeout",
        "PostgreSQL: a frozen process's transaction is ended, so a lease takeover goes through",
        "langgraph_recall/store/_postgres.py",
        '        conn.execute(\n            f"SET idle_in_transaction_session_timeout',
        '        0 and conn.execute(\n            f"SET idle_in_transaction_session_timeout',
        ("tests/test_store_concurrency.py::-k::frozen_process",),
    ),
    Mutation(
        "store_close",
        "store.close() closes its checkpointers first: leases released, connections closed",
        "langgraph_recall/store/_store.py",
        "        for checkpointer in list(self._checkpointers):\n",
        "        for checkpointer in []:\n",
        ("tests/test_store_contexts.py::-k::closes_its_checkpointers",),
    ),
    Mutation(
        "warm_read",
        "SQLite: a read on the hot path never waits for another thread's write in progress",
        "langgraph_recall/store/_sqlite.py",
        "            self._locked = db.write_lock.acquire(blocking=False)\n",
        "            self._locked = db.write_lock.acquire()\n",
        ("tests/test_store_writer.py::-k::does_not_wait",),
    ),
    Mutation(
        "pg_record_race",
        "PostgreSQL: a one-statement recording that loses a race writes nothing and retries",
        "langgraph_recall/store/_transcript.py",
        "    except psycopg.errors.UniqueViolation as exc:\n",
        "    except ZeroDivisionError as exc:\n",
        ("tests/test_store_concurrency.py::-k::same_messages",),
    ),
    Mutation(
        "pg_record_no_probe",
        "PostgreSQL: recording new messages reads no recorded turn (the unique index decides)",
        "langgraph_recall/store/_transcript.py",
        '_PG_ROWS = " AS i(msg_id, role, dtype, data, ord) CROSS JOIN ag RETURNING 1)"\n',
        '_PG_ROWS = " AS i(msg_id, role, dtype, data, ord) CROSS JOIN ag WHERE NOT EXISTS ("\n'
        '"SELECT 1 FROM recall_turns t WHERE t.agent_id = ag.turn_seq::text AND t.msg_id = "\n'
        '"i.msg_id) RETURNING 1)"\n',
        ("tests/test_store_records.py::-k::reads_no_recorded_turn",),
    ),
    Mutation(
        "pg_record_seq",
        "PostgreSQL: the one-statement recording numbers new turns after the agent's last",
        "langgraph_recall/store/_transcript.py",
        '"data, size, output_ref, created_at) SELECT ?, ag.turn_seq - ? + i.ord, i.msg_id, "',
        '"data, size, output_ref, created_at) SELECT ?, ag.turn_seq - ? + 1, i.msg_id, "',
        ("tests/test_store_concurrency.py::-k::gapless",),
    ),
    Mutation(
        "writer_rollback",
        "SQLite: a COMMIT that fails leaves no transaction open on the writers' connection",
        "langgraph_recall/store/_sqlite.py",
        "            if conn.in_transaction:  # a failed COMMIT: the next writer must start clean\n",
        "            if False:\n",
        ("tests/test_store_writer.py::-k::commit_that_fails",),
    ),
    Mutation(
        "end_once",
        "an attempt's end is written once: a second end changes nothing and says so",
        "langgraph_recall/store/_actions.py",
        '"WHERE action_id = ? AND attempt = ? AND outcome IS NULL",',
        '"WHERE action_id = ? AND attempt = ?",',
        (
            "tests/test_store_schema.py::-k::set_once or upgraded",
            "tests/test_store_records.py",
            "tests/test_store_concurrency.py::-k::exactly_one_end",
            "tests/test_tools_due_ends.py::-k::already_recorded_is_kept",
        ),
    ),
    Mutation(
        "agent_row",
        "SQLite: an action's first intent creates its agent's row (agents() lists it)",
        "langgraph_recall/store/_schema.py",
        '"BEGIN INSERT OR IGNORE INTO recall_agents',
        '"WHEN 0 BEGIN INSERT OR IGNORE INTO recall_agents',
        ("tests/test_store_schema.py::-k::upgraded", "tests/test_store_records.py::-k::agents"),
    ),
    Mutation(
        "list_reader",
        "SQLite: a half-read checkpoint listing holds up no other thread's writes",
        "langgraph_recall/checkpoint/_same_db.py",
        "        def list(\n",
        "        def _list_elsewhere(\n",
        ("tests/test_store_writer.py::-k::half_read",),
    ),
    Mutation(
        "one_hold",
        "SQLite: a new call's claim reads and inserts in one hold of the writers' connection",
        "langgraph_recall/store/_actions_api.py",
        "                if tx.promote():",
        "                if False:",
        ("tests/test_store_writer.py::-k::one_hold",),
    ),
    Mutation(
        "promote_pooled",
        "SQLite: a read served by a pooled connection is never promoted to a write",
        "langgraph_recall/store/_sqlite.py",
        "        if not self._write and self._locked:\n",
        "        if not self._write:\n",
        ("tests/test_store_writer.py::-k::found_a_write",),
    ),
    Mutation(
        "lone_call_inline",
        "DurableToolNode runs a lone call on the node's thread, not a new thread pool",
        "langgraph_recall/tools/_node.py",
        "        if len(calls) != 1 or _loop_running():\n",
        "        if True:\n",
        ("tests/test_tools_dispatch.py::-k::lone_call_runs",),
    ),
    Mutation(
        "inline_output_shape",
        "the inline call's answer takes the shape ToolNode gives it for the input it got",
        "langgraph_recall/tools/_node.py",
        "        return self._combine_tool_outputs([output], input_type)\n",
        '        return self._combine_tool_outputs([output], "list")\n',
        ("tests/test_tools_dispatch.py::-k::inline_answers",),
    ),
    Mutation(
        "inline_through_wrapper",
        "the inline call goes through the durable wrapper (kill -9 suite, real processes)",
        "langgraph_recall/tools/_node.py",
        "        output = self._run_one(calls[0], input_type, tool_runtime)\n",
        "        request = ToolCallRequest(\n"
        "            tool_call=calls[0],\n"
        '            tool=self.tools_by_name.get(calls[0]["name"]),\n'
        "            state=tool_runtime.state,\n"
        "            runtime=tool_runtime,\n"
        "        )\n"
        "        output = self._execute_tool_sync(request, input_type, cfg)\n",
        ("tests/test_tools_crash.py::-k::kill9_at_random",),
    ),
    Mutation(
        "lone_call_running_loop",
        "a lone call on a thread with a running event loop (Jupyter) keeps a pool thread",
        "langgraph_recall/tools/_node.py",
        "        if len(calls) != 1 or _loop_running():\n",
        "        if len(calls) != 1:\n",
        ("tests/test_tools_dispatch.py::-k::running_loop",),
    ),
    Mutation(
        "tool_runtime_fields",
        "the inline call's ToolRuntime carries every field ToolNode gives a tool",
        "langgraph_recall/tools/_node.py",
        "if f.init and f.name not in _OWN)\n",
        'if f.init and f.name not in _OWN and f.name != "execution_info")\n',
        ("tests/test_tools_dispatch.py::-k::tool_runtime",),
    ),
    Mutation(
        "open_index",
        "open actions are read from their partial index, not the agent's history",
        "langgraph_recall/store/_schema.py",
        '        Drop("recall_open_actions"),\n        ACTIONS_OPEN,\n',
        '        Drop("recall_open_actions"),\n',
        ("tests/test_store_records.py::-k::partial_index",),
    ),
    Mutation(
        "pg_lease_one_statement",
        "PostgreSQL: taking a lease is one autocommitted statement",
        "langgraph_recall/store/_actions_api.py",
        '        return self._db.tx(write=self._db.dialect == "sqlite")\n',
        "        return self._db.tx(write=True)\n",
        ("tests/test_store_records.py::-k::one_statement_without",),
    ),
    Mutation(
        "set_once_sqlite",
        "SQLite refuses any change to an action but filling its empty end, once",
        "langgraph_recall/store/_schema.py",
        'f"WHEN {refuse} OR {changed} "',
        'f"WHEN {refuse} "',
        ("tests/test_store_schema.py::-k::set_once",),
    ),
    Mutation(
        "set_once_pg",
        "PostgreSQL refuses any change to an action but filling its empty end, once",
        "langgraph_recall/store/_schema.py",
        'f"OR {changed} THEN RAISE',
        'f"OR FALSE THEN RAISE',
        ("tests/test_store_schema.py::-k::set_once",),
    ),
    Mutation(
        "prefetch_forget",
        "after a write, a learning transaction stops answering from what it read ahead",
        "langgraph_recall/store/_prefetch.py",
        '        """A statement ran that is not a read through ``take`` (``run``, ``many``)."""\n'
        "        self.answers.clear()\n",
        '        """A statement ran that is not a read through ``take`` (``run``, ``many``)."""\n',
        ("tests/test_store_prefetch.py::-k::write",),
    ),
    Mutation(
        "prefetch_reads_only",
        "only reads are learned: a write is never sent ahead of its transaction",
        "langgraph_recall/store/_prefetch.py",
        "        if not _is_read(sql):\n",
        "        if False:\n",
        ("tests/test_store_prefetch.py::-k::never_sent_ahead",),
    ),
    Mutation(
        "prefetch_fallback",
        "a read that cannot run ahead runs on its own instead of failing the transaction",
        "langgraph_recall/store/_postgres.py",
        "        except psycopg.Error:\n            # A read that cannot run now",
        "        except ZeroDivisionError:\n            # A read that cannot run now",
        ("tests/test_store_prefetch.py::-k::cannot_run_ahead",),
    ),
    Mutation(
        "prefetch_percent",
        "a read sent ahead without parameters keeps its literal '%' (the statement has others')",
        "langgraph_recall/store/_postgres.py",
        'self.sql(s) if ps else self.sql(s).replace("%", "%%")',
        "self.sql(s)",
        ("tests/test_store_prefetch.py::-k::exactly_the_reads_own",),
    ),
    Mutation(
        "prefetch_widths",
        "each read's width is learned, so the next transaction's reads go as one statement",
        "langgraph_recall/store/_db.py",
        "            self.learned.ran(self._db.width(cur))\n",
        "            self.learned.ran(0)\n",
        ("tests/test_store_prefetch.py::-k::one_statement",),
    ),
    Mutation(
        "briefing_prefetch",
        "the briefing's reads are learned, and sent together from the second briefing on",
        "langgraph_recall/_briefing.py",
        '    with store._db.tx(learn=("briefing", agent_id), land=False):\n',
        "    with store._db.tx(land=False):\n",
        ("tests/test_store_prefetch.py::-k::one_round_trip",),
    ),
    Mutation(
        "flush_later_commits",
        "a relaxed end is committed when the call returns (it survives its process killed)",
        "langgraph_recall/store/_sqlite.py",
        '                if et is None:\n                    conn.execute("COMMIT")\n',
        '                if et is None and not self._relaxed:\n                    conn.execute("COMMIT")\n',
        ("tests/test_store_durability.py::-k::survives_its_process",),
    ),
    Mutation(
        "prefetch_unhashable",
        "a read whose parameters cannot be a plan's key just runs",
        "langgraph_recall/store/_prefetch.py",
        "            hash(read)\n"
        "        except TypeError:  # a parameter psycopg takes but a dict cannot (a list): just run it\n"
        "            return None\n",
        "            hash(read)\n        except ZeroDivisionError:\n            return None\n",
        ("tests/test_store_prefetch.py::-k::list_parameter",),
    ),
    Mutation(
        "prefetch_bounded",
        "plans are kept for a bounded number of keys",
        "langgraph_recall/store/_prefetch.py",
        "            if len(plans) > MAX_PLANS:",
        "            if False:",
        ("tests/test_store_prefetch.py::-k::bounded",),
    ),
    Mutation(
        "flush_later_restore",
        "a relaxed commit's synchronous=NORMAL does not outlive it on the shared connection",
        "langgraph_recall/store/_sqlite.py",
        '                conn.execute(f"PRAGMA synchronous={self._db.synchronous}")\n',
        "                pass\n",
        ("tests/test_store_durability.py::-k::flushed_later_relaxes",),
    ),
    Mutation(
        "flush_later_pg_local",
        "PostgreSQL's relaxed commit sets synchronous_commit for its own transaction only",
        "langgraph_recall/store/_actions.py",
        "set_config('synchronous_commit', 'off', true)",
        "set_config('synchronous_commit', 'off', false)",
        ("tests/test_store_durability.py::-k::flushed_later_relaxes",),
    ),
    Mutation(
        "flush_later_gate",
        "a call's end skips its flush only when the same database's saver writes next",
        "langgraph_recall/tools/_durable.py",
        '            getattr(saver, "fenced", False) is True and getattr(saver, "store", None) is store\n',
        "            True\n",
        ("tests/test_store_durability.py::-k::same_database_saver",),
    ),
    Mutation(
        "plan_ahead",
        "a tool node that tells the checkpointer about itself (RecallMiddleware's, which the "
        "graph does not show) has its later calls' intents commit with their checkpoints",
        "langgraph_recall/checkpoint/_saver.py",
        "        self._shared.plans.register(planners, node, planner)\n",
        "        pass  # never plan\n",
        ("tests/test_tools_planned.py::-k::recall_middleware_claims",),
    ),
    Mutation(
        "plan_close_at_end",
        "a planned call the run never started is closed at the run's end, not left in doubt",
        "langgraph_recall/checkpoint/_runs.py",
        "                close_not_started(self.store, attempts_of(leftover))\n",
        "                pass  # planned calls left open\n",
        ("tests/test_tools_planned.py::-k::paused_before_the_tools",),
    ),
    Mutation(
        "plan_not_started_args",
        "a planned call that never started may run with arguments edited since",
        "langgraph_recall/store/_actions.py",
        "    if prev.resolved_by == NOT_STARTED:\n",
        "    if False:\n",
        ("tests/test_tools_planned.py::-k::edited_while_paused",),
    ),
    Mutation(
        "plan_digest",
        "a plan written for other arguments is closed, and the call claims anew",
        "langgraph_recall/tools/_durable.py",
        "        if planned is not None and planned.action.args_digest != digest:\n",
        "        if False:\n",
        ("tests/test_tools_planned.py::-k::other_arguments",),
    ),
    Mutation(
        "plan_atomic_sqlite",
        "SQLite: a checkpoint and the intents it carries commit together or not at all",
        "langgraph_recall/checkpoint/_same_db.py",
        "                    if self.conn.in_transaction:\n                        self.conn.rollback()\n",
        "                    self.conn.commit()  # as SqliteSaver's own cursor does\n",
        ("tests/test_tools_planned.py::-k::failed_intent and sqlite",),
    ),
    Mutation(
        "ride_lone",
        "a call among several ends on its own (its node's write waits for the slowest)",
        "langgraph_recall/tools/_durable.py",
        "            and len(asking.tool_calls) == 1\n",
        "",
        ("tests/test_tools_due_ends.py::-k::among_several",),
    ),
    Mutation(
        "ride_hook",
        "no transaction of the process reads a finished call whose end is due as open",
        "langgraph_recall/store/_db.py",
        "        if land and self.due.pending and not self.due.landing():\n",
        "        if False:\n",
        ("tests/test_tools_due_ends.py::-k::reads_a_due_end or lease_goes",),
    ),
    Mutation(
        "ride_in_write",
        "a due end commits in its task's own write (killed right after it: the call is done)",
        "langgraph_recall/store/_due.py",
        "        for end in self.ends:\n            cur.execute(self._render(end.sql), end.params)\n",
        "        pass  # the task's write carries nothing\n",
        ("tests/test_tools_due_ends.py::-k::right_after_the_tasks_write",),
    ),
    Mutation(
        "ride_close",
        "closing the store writes the ends still due",
        "langgraph_recall/store/_store.py",
        "        if self._db.due:  # ends of finished calls still riding (``_due``): written now\n"
        "            self._db.due.land(self._db)\n",
        "",
        ("tests/test_tools_due_ends.py::-k::closing_the_store",),
    ),
    Mutation(
        "plan_root_only",
        "only a root graph's durable node plans (a subgraph's does not answer for a root node)",
        "langgraph_recall/tools/_durable.py",
        '        if tool is not None and isinstance(node, str) and "|" not in ns:\n',
        "        if tool is not None and isinstance(node, str):\n",
        ("tests/test_tools_planned.py::-k::subgraphs_tool_node",),
    ),
    Mutation(
        "ride_wait",
        "a transaction waits for a task's write carrying ends instead of writing them again",
        "langgraph_recall/store/_due.py",
        "            self._cond.wait_for(lambda: self._riding == 0, timeout=wait)\n",
        "            pass\n",
        ("tests/test_tools_due_ends.py::-k::waits_for_the_write",),
    ),
    Mutation(
        "plan_never_fails_a_put",
        "planning ahead that raises costs no checkpoint: the node claims instead",
        "langgraph_recall/checkpoint/_put_steps.py",
        "        except Exception as exc:  # planning ahead must never cost a checkpoint: claim instead\n",
        "        except ZeroDivisionError as exc:\n",
        ("tests/test_tools_planned.py::-k::plan_that_fails",),
    ),
    Mutation(
        "plan_atomic_pg",
        "PostgreSQL: a checkpoint and what rides it commit together or not at all",
        "langgraph_recall/checkpoint/_same_db.py",
        "            with PostgresSaver._cursor(self, pipeline=True) as cur:\n                yield cur\n",
        "            with PostgresSaver._cursor(self, pipeline=True) as cur:\n                yield cur\n"
        "            with PostgresSaver._cursor(self, pipeline=True) as cur:  # a second transaction\n",
        ("tests/test_tools_planned.py::-k::failed_intent and postgres",),
    ),
    Mutation(
        "plan_take_once",
        "a planned claim is handed over once (a retried node does not run a failed call again)",
        "langgraph_recall/checkpoint/_plans.py",
        "    return run.planned.pop(action_id, None)\n",
        "    return run.planned.get(action_id)\n",
        ("tests/test_tools_planned.py::-k::handed_over_once",),
    ),
    Mutation(
        "canon_changed_args",
        "a plan's canonical arguments are reused only while the arguments are unchanged",
        "langgraph_recall/tools/_durable.py",
        "        if canon is not None and canon.tool is tool and canon.given is given and text == canon.text:\n",
        "        if canon is not None and canon.tool is tool and canon.given is given:\n",
        ("tests/test_tools_planned.py::-k::changed_after_their_plan",),
    ),
    Mutation(
        "canon_reused",
        "a planned call does not make its arguments canonical a second time",
        "langgraph_recall/tools/_durable.py",
        "        canon = self._canon.pop(action_id, None)\n",
        "        canon = None\n",
        ("tests/test_tools_planned.py::-k::reuses_the_canonical",),
    ),
    Mutation(
        "brief_due_filtered",
        "the briefing leaves calls whose end is still due out of the calls in doubt",
        "langgraph_recall/_briefing.py",
        "        if (a.action_id, a.attempt) not in finished\n",
        "        if True\n",
        ("tests/test_tools_due_ends.py::-k::briefing_leaves_due_ends_out",),
    ),
    Mutation(
        "brief_no_land",
        "the briefing does not write due ends itself (the task's write carries them)",
        "langgraph_recall/_briefing.py",
        '    with store._db.tx(learn=("briefing", agent_id), land=False):\n',
        '    with store._db.tx(learn=("briefing", agent_id)):\n',
        ("tests/test_tools_due_ends.py::-k::briefing_leaves_due_ends_out",),
    ),
    Mutation(
        "brief_due_before_reads",
        "the briefing takes the due ends before it reads the open actions",
        "langgraph_recall/_briefing.py",
        "        if (a.action_id, a.attempt) not in finished\n",
        "        if (a.action_id, a.attempt) not in store._db.due.finished()\n",
        ("tests/test_tools_due_ends.py::-k::due_ends_before_it_reads",),
    ),
    Mutation(
        "start_mark_once",
        "a planned attempt's start mark is set once: a second claimer may not run it",
        "langgraph_recall/store/_actions.py",
        '"AND outcome IS NULL AND started_at IS NULL AND planned IS NOT NULL"',
        '"AND outcome IS NULL AND planned IS NOT NULL"',
        ("tests/test_store_schema.py::-k::start_mark or planned_attempt",),
    ),
    Mutation(
        "start_mark_trigger",
        "the append-only guard lets an update set the start mark alone, nothing else with it",
        "langgraph_recall/store/_schema.py",
        'f"({rest}))) OR (NEW.{first} IS NOT NULL AND {differs.format(self.mark)})"',
        'f"FALSE)) OR (NEW.{first} IS NOT NULL AND {differs.format(self.mark)})"',
        ("tests/test_store_schema.py::-k::start_mark",),
    ),
    Mutation(
        "start_mark_written",
        "a planned call commits its start mark before its tool may begin",
        "langgraph_recall/tools/_durable.py",
        '            if claim.status == "claimed" and not action.started:\n',
        "            if False:\n",
        ("tests/test_tools_planned.py::-k::start_mark",),
    ),
    Mutation(
        "settle_leaves_pending",
        "the run-start settle leaves the calls of the run's pending tool task to that task",
        "langgraph_recall/tools/_durable.py",
        "            if undo or action.action_id in skip or (own and action.tool not in self._classes):\n",
        "            if undo or (own and action.tool not in self._classes):\n",
        ("tests/test_tools_settle_start.py::-k::runs_once_on_the_same_threads_resume",),
    ),
    Mutation(
        "settle_closes_never_started",
        "the run-start settle closes a planned call that never started as not done",
        "langgraph_recall/tools/_durable.py",
        "            if not action.started:\n",
        "            if False:\n",
        ("tests/test_tools_settle_start.py::-k::closed_on_a_new_thread",),
    ),
    Mutation(
        "settle_at_run_start",
        "every run settles the agent's open calls at its start, on any thread",
        "langgraph_recall/checkpoint/_saver.py",
        "                planner.settle_run(self.store, run.agent_id, pending)\n",
        "                pass\n",
        ("tests/test_tools_settle_start.py::-k::resolver_is_asked and node",),
    ),
    Mutation(
        "middleware_found",
        "create_agent's RecallMiddleware is found in the graph at a run's start",
        "langgraph_recall/checkpoint/_plans.py",
        "        if len(hooked) == 1 and len(tool_nodes) == 1:\n",
        "        if False:\n",
        ("tests/test_tools_planned.py::-k::create_agent",),
    ),
    Mutation(
        "plan_sends",
        "a node started by Send (create_agent's tool node) plans with the checkpoint too",
        "langgraph_recall/checkpoint/_plans.py",
        "                only = sent_calls(values.get(_SENDS), node)\n",
        "                only = set()\n",
        (
            "tests/test_tools_planned.py::-k::sent_to_the_tool_node or create_agent or "
            "killed_after_the_checkpoint",
        ),
    ),
    Mutation(
        "plan_only_sent",
        "only the calls the sends carry are planned",
        "langgraph_recall/tools/_durable.py",
        '            if only is not None and call.get("id") not in only:\n',
        "            if False:\n",
        ("tests/test_tools_planned.py::-k::sent_to_the_tool_node",),
    ),
    Mutation(
        "plan_expect",
        "a DurableToolNode plans the first call of each of its tools once it has registered",
        "langgraph_recall/tools/_node.py",
        "        durable.expect(self.tools_by_name)  # the objects ToolNode hands each call\n",
        "",
        ("tests/test_tools_planned.py::-k::first_call_of_another_tool",),
    ),
    Mutation(
        "barrier_own_checkpoint",
        "the barrier reads no saver for a checkpoint its own run made (async puts)",
        "langgraph_recall/checkpoint/_durable.py",
        "            and checkpoint_id > run.start_id\n",
        "            and False\n",
        ("tests/test_checkpoint_barrier_inflight.py::-k::own_checkpoint",),
    ),
    Mutation(
        "barrier_own_waits",
        "an own checkpoint skips the saver read, not the wait for its put",
        "langgraph_recall/checkpoint/_durable.py",
        "            self._may_be_saved(config, thread_id, checkpoint_id)\n"
        "            and self._written(thread_id, checkpoint_id)\n",
        "            not self._may_be_saved(config, thread_id, checkpoint_id)\n"
        "            or self._written(thread_id, checkpoint_id)\n",
        ("tests/test_checkpoint_barrier_inflight.py::-k::own_checkpoint",),
    ),
    Mutation(
        "durable_log_keeps_wanted",
        "the barrier's log never drops a put that a waiter is waiting for",
        "langgraph_recall/checkpoint/_durable.py",
        "            if key not in self._wanted:\n",
        "            if True:\n",
        ("tests/test_checkpoint_durable.py::-k::however_many",),
    ),
    Mutation(
        "bench_balanced_orders",
        "benchmark rounds take turns so no case always runs right after the same other one",
        "benchmarks/_harness.py",
        "    plan = orders(len(cases))\n",
        "    plan = [[(i + s) % len(cases) for i in range(len(cases))] for s in range(len(cases))]\n",
        ("tests/test_bench_stats.py::-k::balanced",),
    ),
    Mutation(
        "prefetch_split_order",
        "answers read ahead come back in each read's own row order",
        "langgraph_recall/store/_prefetch.py",
        "        out.append(list(zip(*columns, strict=True)) if columns[0] else [])\n",
        "        out.append(list(zip(*columns, strict=True))[::-1] if columns[0] else [])\n",
        ("tests/test_store_prefetch.py::-k::exactly_the_reads_own",),
    ),
    Mutation(
        "pg_record_partly_recorded",
        "PostgreSQL: a batch with a message recorded before records only the new ones",
        "langgraph_recall/store/_transcript.py",
        '        if exc.diag.constraint_name != "recall_turns_msg":\n            raise\n        return None\n',
        "        raise\n",
        ("tests/test_store_pg_plans.py::-k::partly_recorded",),
    ),
    Mutation(
        "durable_log_forgets_answered",
        "a waiter that has its answer no longer pins its entry in the barrier's log",
        "langgraph_recall/checkpoint/_durable.py",
        "        if self._wanted[key] == 1:\n            del self._wanted[key]\n",
        "        if False:\n            del self._wanted[key]\n",
        ("tests/test_checkpoint_durable.py::-k::however_many",),
    ),
    Mutation(
        "record_fresh_plan",
        "PostgreSQL recording is planned afresh, never from a generic plan made when small",
        "langgraph_recall/store/_db.py",
        '        if fresh_plan and self._db.dialect == "postgres":\n',
        "        if False:\n",
        ("tests/test_store_pg_plans.py",),
    ),
    Mutation(
        "finished_from_memory",
        "a call this process saw finish is answered from memory, with no transaction",
        "langgraph_recall/store/_actions_api.py",
        "        if kept is not None:\n",
        "        if False:\n",
        ("tests/test_store_finished.py::-k::without_a_transaction",),
    ),
    Mutation(
        "finished_kept_after_commit",
        "an end is remembered only once its own transaction committed",
        "langgraph_recall/store/_actions_api.py",
        "        ended: list[Sequence[Any]] | None = [] if self._db.outermost() else None\n",
        "        ended: list[Sequence[Any]] | None = []\n",
        ("tests/test_store_finished.py::-k::rolls_back",),
    ),
    Mutation(
        "finished_kept_when_read",
        "a finished call read by a claim is remembered for the next repeat",
        "langgraph_recall/store/_actions_api.py",
        "                finished.keep(row)\n",
        "                pass\n",
        ("tests/test_store_finished.py::-k::read_once and sqlite",),
    ),
    Mutation(
        "finished_only_final",
        "only done and failed actions are remembered: any other may run again",
        "langgraph_recall/store/_finished.py",
        '_FINAL = ("done", "failed")\n',
        '_FINAL = ("done", "failed", "abandoned", "not_done")\n',
        ("tests/test_store_finished.py::-k::may_run_again",),
    ),
    Mutation(
        "finished_fresh_objects",
        "each repeat builds its own Action from the kept row",
        "langgraph_recall/store/_actions_api.py",
        "            settled = _actions.settled_claim(_actions.action_of(kept), action_id, args_digest)\n",
        "            settled = _actions.settled_claim(vars(self).setdefault(action_id, _actions.action_of(kept)), action_id, args_digest)\n",
        ("tests/test_store_finished.py::-k::objects_of_its_own",),
    ),
    Mutation(
        "prefetch_borrow",
        "a new agent's first briefing borrows the reads of the last agent's, its id swapped in",
        "langgraph_recall/store/_prefetch.py",
        "        return _borrowed(last[1], last[0], subject)\n",
        "        return []\n",
        ("tests/test_store_prefetch.py::-k::borrows",),
    ),
    Mutation(
        "finished_cleared_on_close",
        "a closed store forgets its finished actions, so a repeat on it still refuses",
        "langgraph_recall/store/_store.py",
        "        self._db.finished.clear()\n",
        "        pass\n",
        ("tests/test_store_finished.py::-k::closed_store",),
    ),
    Mutation(
        "finished_kept_when_read_pg",
        "PostgreSQL: a finished call read by a claim is remembered for the next repeat",
        "langgraph_recall/store/_actions_api.py",
        "            finished.keep(row)  # read before this claim wrote anything: committed\n",
        "            pass\n",
        ("tests/test_store_finished.py::-k::read_once and postgres",),
    ),
    Mutation(
        "finished_kept_on_end",
        "an end this process wrote is remembered, so the next repeat reads nothing",
        "langgraph_recall/store/_actions_api.py",
        "        if ended:\n            self._db.finished.keep(ended[0])\n",
        "",
        ("tests/test_store_finished.py::-k::sibling",),
    ),
    Mutation(
        "end_run_one_write",
        "a run's end records its last turns in the transaction that gives its lease up",
        "langgraph_recall/checkpoint/_runs.py",
        "            ok = life.store._end_run(\n"
        "                run.agent_id, holder, epoch, self.messages, thread_id=run.thread_id\n"
        "            )\n",
        "            life.store.record(run.agent_id, self.messages, thread_id=run.thread_id)\n"
        "            ok = life.store.release_lease(run.agent_id, holder, epoch)\n",
        ("tests/test_checkpoint_recording.py::-k::one_transaction",),
    ),
    Mutation(
        "end_run_lease_condition",
        "a run's final write records nothing once its lease is another holder's",
        "langgraph_recall/store/_store.py",
        "            if release is not None and not _leases.release_lease(tx, agent_id, *release):\n"
        "                return -1\n",
        "            if release is not None:\n"
        "                _leases.release_lease(tx, agent_id, *release)\n",
        ("tests/test_store_records.py::-k::final_write_under_a_lease_taken_over and sqlite",),
    ),
    Mutation(
        "end_run_lease_condition_pg",
        "PostgreSQL: the final write's one statement records only if it gave the lease up",
        "langgraph_recall/store/_transcript.py",
        'turn_seq, revision_seq, action_seq) SELECT ?, {now}, {now}, ?, 0, 0 FROM rel "',
        'turn_seq, revision_seq, action_seq) SELECT ?, {now}, {now}, ?, 0, 0 "',
        ("tests/test_store_records.py::-k::final_write_under_a_lease_taken_over and postgres",),
    ),
    Mutation(
        "end_run_released_on_failure",
        "a final write that fails still gives the lease up",
        "langgraph_recall/checkpoint/_runs.py",
        "            recorder.failed(run.agent_id, exc)\n"
        "            life.store.release_lease(run.agent_id, holder, epoch)\n",
        "            recorder.failed(run.agent_id, exc)\n",
        ("tests/test_checkpoint_recording.py::-k::final_write_that_fails",),
    ),
    Mutation(
        "catch_up_skipped_when_complete",
        "a run restoring the checkpoint this process's last run ended at, all recorded, reads "
        "no turns",
        "langgraph_recall/checkpoint/_runs.py",
        "            and run.agent_id not in self.recorder.broken\n        ):\n",
        "            and False\n        ):\n",
        ("tests/test_checkpoint_recording.py::-k::reads_no_turns_to_catch_up",),
    ),
    Mutation(
        "catch_up_skip_needs_same_epoch",
        "after another holder had the lease, a run catches up again",
        "langgraph_recall/checkpoint/_runs.py",
        "== (run.thread_id, run.start_id, run.lease.epoch)",
        "[:2] == (run.thread_id, run.start_id)",
        ("tests/test_checkpoint_recording.py::-k::another_holder_had_the_lease",),
    ),
    Mutation(
        "catch_up_skip_needs_same_checkpoint",
        "a run from another checkpoint than the one the last run ended at catches up",
        "langgraph_recall/checkpoint/_runs.py",
        "== (run.thread_id, run.start_id, run.lease.epoch)",
        "[::2] == (run.thread_id, run.lease.epoch)",
        ("tests/test_checkpoint_recording.py::-k::another_checkpoint_of_the_thread",),
    ),
    Mutation(
        "broken_writes_wait",
        "after a failed write of an agent's turns, its later ones wait (no hole, order kept)",
        "langgraph_recall/checkpoint/_recording.py",
        "            elif job.agent_id not in self.broken:\n",
        "            else:\n",
        ("tests/test_checkpoint_recording.py::-k::failed_mid_run",),
    ),
    Mutation(
        "broken_filled_at_end",
        "the run's end records its whole last list after a failed write",
        "langgraph_recall/checkpoint/_runs.py",
        "            self.messages = run.turns.whole_messages()\n",
        "            pass\n",
        ("tests/test_checkpoint_recording.py::-k::failed_mid_run",),
    ),
    Mutation(
        "end_run_without_lease_still_records",
        "a run whose lease the keeper gave up already still records its last turns",
        "langgraph_recall/checkpoint/_runs.py",
        "            self.recorder.write_now(run.agent_id, run.thread_id, final.messages)\n",
        "            pass\n",
        ("tests/test_checkpoint_recording.py::-k::closed_under_it",),
    ),
    Mutation(
        "released_not_renewed",
        "a renewal that raced the run's end does not hold a released lease again",
        "langgraph_recall/store/_leases.py",
        '            "AND epoch = ? AND expires_at > 0",\n',
        '            "AND epoch = ?",\n',
        ("tests/test_store_records.py::-k::released_lease_is_not_renewed",),
    ),
    Mutation(
        "recent_agents_bounded",
        "a process's memory of its agents stays bounded (a server's agents are its chats)",
        "langgraph_recall/_recent.py",
        "            if len(self) > self.limit:\n",
        "            if False:\n",
        (
            "tests/test_recent.py::test_keeps_the_most_recently_set_keys",
            "tests/test_checkpoint_recording.py::-k::bounded_number_of_agents",
        ),
    ),
    Mutation(
        "plans_learn_graph",
        "a run's start finds the graph's durable tool nodes: even the first call is planned",
        "langgraph_recall/checkpoint/_saver.py",
        "            return self.inner.get_tuple(config)\n        self._learn_graph(run, loop)\n",
        "            return self.inner.get_tuple(config)\n",
        (
            "tests/test_tools_planned.py::-k::even_the_first",
            "tests/test_tools_planned.py::-k::new_processs_first_call",
        ),
    ),
    Mutation(
        "plans_learn_graph_async",
        "the same for an async run's start",
        "langgraph_recall/checkpoint/_saver.py",
        '            return await self._acall("get_tuple", config)\n        self._learn_graph(run, loop)\n',
        '            return await self._acall("get_tuple", config)\n',
        ("tests/test_tools_planned.py::-k::async_runs_claim",),
    ),
    Mutation(
        "no_plan_under_exit",
        "a run under durability='exit' plans nothing (its durable calls are refused)",
        "langgraph_recall/checkpoint/_put_steps.py",
        'if conf.get("checkpoint_ns") or conf.get(CONFIG_KEY_DURABILITY) == "exit":',
        'if conf.get("checkpoint_ns"):',
        ("tests/test_tools_calls.py::-k::durability_exit_is_refused",),
    ),
    Mutation(
        "closed_run_writes_nothing",
        "a run whose checkpointer was closed under it writes no unstamped checkpoint",
        "langgraph_recall/checkpoint/_put_steps.py",
        "                if self._shared.runs.run_of(agent_id) is not None:\n",
        "                if False:\n",
        ("tests/test_checkpoint_recording.py::-k::closed_under_it",),
    ),
    Mutation(
        "lost_at_the_end_records_nothing",
        "a lease lost as the run ends leaves its turns to the new holder",
        "langgraph_recall/checkpoint/_runs.py",
        "        if final is not None and not final.ran and run.lease.lost is None:\n",
        "        if final is not None and not final.ran:\n",
        ("tests/test_checkpoint_recording.py::-k::lost_as_the_run_ends",),
    ),
    Mutation(
        "lease_write_lock",
        "SQLite: a lease's release and renewal queue at the store's write lock",
        "langgraph_recall/store/_actions_api.py",
        '        return self._db.tx(write=self._db.dialect == "sqlite")\n',
        "        return self._db.tx()\n",
        ("tests/test_store_writer.py::-k::lease_write_queues",),
    ),
    Mutation(
        "ttl_refresh_after_read",
        "SQLite: a read's TTL refresh runs after the read, at the store's write lock",
        "langgraph_recall/store/_db.py",
        "        if owner is None or owner.writes:\n",
        "        if True:\n",
        ("tests/test_store_items.py::-k::ttl_refresh_on_sqlite_queues",),
    ),
    Mutation(
        "sqlite_one_insert_refused_whole",
        "SQLite: a short batch with a recorded message goes to the reading path",
        "langgraph_recall/store/_transcript.py",
        '        if "recall_turns.msg_id" not in str(exc):\n            raise\n        return None\n',
        '        if "recall_turns.msg_id" not in str(exc):\n            raise\n        return 0\n',
        (
            "tests/test_store_records.py::-k::short_batch_with_a_recorded",
            "tests/test_store_records.py::-k::appends_each_new_message_once",
        ),
    ),
    Mutation(
        "sqlite_one_insert_numbering",
        "SQLite: a short batch is numbered right after the agent's last turn",
        "langgraph_recall/store/_transcript.py",
        '"size, output_ref, created_at) SELECT ?, base.s + v.column1, v.column2, ?, "',
        '"size, output_ref, created_at) SELECT ?, base.s + v.column1 + 1, v.column2, ?, "',
        ("tests/test_store_records.py::-k::short_batch_on_sqlite_is_one_insert",),
    ),
    Mutation(
        "memory_store",
        "':memory:' opens a store of its own in a temporary folder",
        "langgraph_recall/store/_store.py",
        '            if path == ":memory:":\n',
        "            if False:\n",
        ("tests/test_store_contexts.py::-k::memory_opens",),
    ),
    Mutation(
        "empty_path_refused",
        "an empty path is refused, creating nothing",
        "langgraph_recall/store/_store.py",
        "            if not path.strip():\n",
        "            if False:\n",
        ("tests/test_store_contexts.py::-k::empty_path",),
    ),
    Mutation(
        "planners_per_graph",
        "a run plans only with its own graph's tool nodes, whatever another graph names its own",
        "langgraph_recall/checkpoint/_plans.py",
        "        self._graphs[id(nodes)] = (nodes, planners)\n        return planners\n",
        "        self._unknown.update(planners)\n        return self._unknown\n",
        ("tests/test_tools_planned.py::-k::two_graphs_naming",),
    ),
    Mutation(
        "renewer_woken_from_idle",
        "a lease taken while the renewal thread idles wakes it (else it sleeps past the ttl)",
        "langgraph_recall/checkpoint/_lease.py",
        "        if self._renewer_idle:\n            self._wake.notify_all()\n",
        "        pass  # never woken\n",
        ("tests/test_checkpoint_lease.py::-k::renewed_while_a_run_outlasts_it and idle",),
    ),
    Mutation(
        "parallel_calls",
        "several calls of one AI message still run at the same time, as ToolNode runs them",
        "langgraph_recall/tools/_node.py",
        "        if len(calls) != 1 or _loop_running():\n"
        "            return self._func_many(input, config, runtime, calls)\n",
        "        if _loop_running():\n"
        "            return self._func_many(input, config, runtime, calls)\n"
        "        if len(calls) != 1:\n"
        "            (cfg,) = get_config_list(config, 1)\n"
        "            outputs = [\n"
        "                self._run_one(c, input_type, self._tool_runtime(input, c, cfg, runtime))\n"
        "                for c in calls\n"
        "            ]\n"
        "            return self._combine_tool_outputs(outputs, input_type)\n",
        ("tests/test_tools_dispatch.py::test_several_calls_still_run_in_parallel",),
    ),
    Mutation(
        "lease_renewed",
        "the renewal thread extends every lease held while a run outlasts its ttl",
        "langgraph_recall/checkpoint/_lease.py",
        "            for held in todo:\n                self.renew(held)\n",
        "            pass  # never renewed\n",
        ("tests/test_checkpoint_lease.py::-k::renewed_while_a_run_outlasts_it",),
    ),
    Mutation(
        "ttl_filter",
        "an expired item is never returned, swept or not",
        "langgraph_recall/store/_items.py",
        '_LIVE = "(i.expires_at IS NULL OR i.expires_at > {now})"\n',
        '_LIVE = "(1 = 1)"\n',
        ("tests/test_store_items.py::-k::never_returned_even_before_a_sweep",),
    ),
    Mutation(
        "pickle_refused",
        "pickling a store (to send it to another process) says to open it there instead",
        "langgraph_recall/store/_store.py",
        '        raise not_picklable("RecallStore")\n',
        "        return object.__reduce_ex__(self, protocol)\n",
        ("tests/test_process_fork.py::-k::sent_to_another_process",),
    ),
    Mutation(
        "forked_store",
        "a store opened before a fork refuses every transaction in the forked child",
        "langgraph_recall/store/_db.py",
        '        self.birth.check("RecallStore")\n',
        "",
        ("tests/test_process_fork.py::-k::record_call_is_refused",),
    ),
    Mutation(
        "forked_checkpointer",
        "a checkpointer made before a fork refuses to act in the child (two children, one holder)",
        "langgraph_recall/checkpoint/_delegated.py",
        '        self._birth.check("RecallCheckpointer")\n',
        "        pass\n",
        ("tests/test_process_fork.py::-k::checkpointer_alone",),
    ),
    Mutation(
        "forked_saver_made",
        "making store.checkpointer() in a forked child refuses before it takes the parent's lock",
        "langgraph_recall/store/_store.py",
        '        self._db.birth.check("RecallStore")  # before the saver takes the parent\'s lock\n',
        "",
        ("tests/test_process_fork.py::-k::making_a_checkpointer_in_the_child",),
    ),
    Mutation(
        "forked_wait_durable",
        "a durable tool's wait for its checkpoint refuses in a forked child (it reads the saver)",
        "langgraph_recall/checkpoint/_durable.py",
        "        self._here()  # it may read the saver (``_written``)\n",
        "",
        ("tests/test_process_fork.py::-k::checkpointer_alone and wait_durable",),
    ),
    Mutation(
        "forked_close",
        "closing a forked child's copy leaves the parent's connections open",
        "langgraph_recall/store/_store.py",
        "            self._db.abandon()\n",
        "            self._db.close()\n",
        ("tests/test_process_fork.py::-k::refuses_in_the_child",),
    ),
    Mutation(
        "forked_scratch",
        "a forked child's exit leaves the parent's ':memory:' folder in place",
        "langgraph_recall/store/_store.py",
        "    if os.getpid() == pid:\n",
        "    if True:\n",
        ("tests/test_process_fork.py::-k::memory_store_keeps",),
    ),
    Mutation(
        "codec_fast_fallback",
        "a message field the serializer would convert sends the message to the serializer",
        "langgraph_recall/store/_codec.py",
        "            default=_not_plain,\n",
        "            default=str,\n",
        ("tests/test_store_codec_fast.py::-k::converted_values",),
    ),
    Mutation(
        "codec_fast_classes",
        "only LangChain's own message classes are packed from their fields",
        "langgraph_recall/store/_codec.py",
        "    if type(value) in _PLAIN_DUMP:\n",
        "    if isinstance(value, BaseMessage):\n",
        ("tests/test_store_codec_fast.py::-k::dumps_itself",),
    ),
    Mutation(
        "turns_agent_row",
        "an agent's first turn creates its agent row (SQLite records no agent row itself)",
        "langgraph_recall/store/_schema.py",
        '                "WHEN NEW.seq = 1 BEGIN INSERT OR IGNORE INTO recall_agents (agent_id, "\n',
        '                "WHEN NEW.seq = 0 BEGIN INSERT OR IGNORE INTO recall_agents (agent_id, "\n',
        ("tests/test_store_records.py::-k::short_batch_on_sqlite_is_one_insert",),
    ),
    Mutation(
        "turns_numbered_from_key",
        "SQLite numbers a short batch after the agent's last turn, which it alone moves",
        "langgraph_recall/store/_transcript.py",
        '            "WITH base(s) AS (SELECT coalesce((SELECT max(seq) FROM recall_turns "\n',
        '            "WITH base(s) AS (SELECT coalesce((SELECT turn_seq FROM recall_agents "\n',
        ("tests/test_store_records.py::-k::short_batch_on_sqlite_is_one_insert",),
    ),
    Mutation(
        "demo_crash_put",
        "the demo's crash after a tool also dies when LangGraph saves the checkpoint first",
        "langgraph_recall/cli/_demo_graphs.py",
        '        self._die_before_saving(checkpoint.get("channel_values", {}).values())\n',
        "",
        ("tests/test_cli.py::-k::whichever_save",),
    ),
    Mutation(
        "scripted_ids_per_thread",
        "the scripted model's message ids differ between threads of one agent",
        "langgraph_recall/testing.py",
        '        return f"{self.name_prefix}-{thread}-{n}"\n',
        '        return f"{self.name_prefix}-{n}"\n',
        ("tests/test_testing_model.py::-k::new_thread",),
    ),
    Mutation(
        "other_args_warned",
        "a finished call asked again with other arguments is reported, not answered silently",
        "langgraph_recall/tools/_durable.py",
        "                if claim.action.args_digest != digest:\n"
        "                    _warn_other_args(claim.action, args)\n",
        "",
        ("tests/test_tools_calls.py::-k::other_arguments",),
    ),
    Mutation(
        "entry_failed_next_run",
        "a run whose loop failed to enter is ended when its caller starts the agent again",
        "langgraph_recall/checkpoint/_runs.py",
        "        self.reap(agent_id, entry)\n",
        "",
        ("tests/test_checkpoint_lease.py::-k::refuses_gives",),
    ),
    Mutation(
        "entry_failed_renewer",
        "the lease renewer ends a run whose loop failed to enter, so other processes get it",
        "langgraph_recall/checkpoint/_runs.py",
        "        keeper.reaper = self.reap  # its renewer ends runs whose loop failed to enter\n",
        "",
        ("tests/test_checkpoint_lease.py::-k::failed_to_enter",),
    ),
    Mutation(
        "dropped_table",
        "a database missing one of the records' tables is refused at open (records_missing)",
        "langgraph_recall/store/_db.py",
        "            self._check_tables()\n",
        "",
        ("tests/test_store_schema.py::-k::dropped_table",),
    ),
    Mutation(
        "deleted_db_not_created",
        "a deleted SQLite database is refused before an empty one is created in its place",
        "langgraph_recall/store/_store.py",
        "            refuse_if_deleted(path)\n",
        "",
        ("tests/test_store_schema.py::test_a_deleted_database_is_refused",),
    ),
    Mutation(
        "edit_checked",
        "an edit the tool would refuse is asked again, not recorded as the approval",
        "langgraph_recall/tools/_approval.py",
        "        problem = _problem(answer, name, action_id, schema, injected)\n",
        "        problem = None\n",
        ("tests/test_tools_approval.py::-k::asked_again",),
    ),
    Mutation(
        "decisions_count",
        "a decisions list that is not one decision is asked again, not recorded as a rejection",
        "langgraph_recall/tools/_approval.py",
        '            return Answer("unclear", message=f"expected one decision, got {len(decisions)}")\n',
        '            return Answer("reject", message=f"expected one decision, got {len(decisions)}")\n',
        ("tests/test_tools_approval.py::-k::not_one_decision",),
    ),
    # A submitted turn's marker (and every record item) is written by the records' own writer,
    # which sets no TTL; plain puts cannot reach those namespaces at all ("record_kinds"), so
    # the old mutation (a plain put without ttl=None) has nothing left to remove.
    Mutation(
        "record_kinds",
        "a plain put or delete cannot change a record's own item (working state, pointers...)",
        "langgraph_recall/store/_records.py",
        '    if len(namespace) != 3 or namespace[0] != "recall" or namespace[2] not in RECORD_KINDS:\n',
        "    if True:\n",
        ("tests/test_store_records.py::-k::plain_put_or_delete",),
    ),
    Mutation(
        "asks_replayed",
        "a call answered from its record takes again the interrupt() answers its tool took",
        "langgraph_recall/tools/_steps.py",
        "    if asked and order is not None:\n",
        "    if False:\n",
        ("tests/test_tools_parallel.py::-k::question",),
    ),
    Mutation(
        "approval_in_turn",
        "a gated call's approval waits for the calls before it (its own config finds the order)",
        "langgraph_recall/tools/_order.py",
        "    if asking is not None:  # a call's own config: its scratchpad is the call's view\n",
        "    if False:\n",
        ("tests/test_tools_parallel.py::-k::never_approves",),
    ),
    Mutation(
        "calls_run_their_course",
        "every call of an ordered task runs its course before the first interrupt is raised",
        "langgraph_recall/tools/_node.py",
        "                    await turns.await_turn(call_id)\n"
        "                except Exception as exc:  # an interrupt (GraphBubbleUp) or an error\n"
        "                    return _Raised(exc)\n",
        "                    await turns.await_turn(call_id)\n"
        "                except Exception as exc:  # an interrupt (GraphBubbleUp) or an error\n"
        "                    raise\n",
        ("tests/test_tools_parallel.py::-k::gets_the_answer",),
    ),
    Mutation(
        "approval_places_kept",
        "a decided approval repeating takes as many answers as its asking took",
        "langgraph_recall/tools/_approval.py",
        "            if _problem(again, name, action_id, schema, injected) is None:\n                break\n"
        "            continue\n",
        "            break\n",
        (
            "tests/test_tools_parallel.py::-k::sent_back",
            "tests/test_tools_approval.py::-k::takes_back_the_answers_it_sent_back and sqlite",
        ),
    ),
    Mutation(
        "nothing_past_answers",
        "a repeat never moves the task's counter past the answers it holds",
        "langgraph_recall/tools/_order.py",
        "            if not self.turns.answer_waiting(self.pad, resume=same_task):\n"
        "                return\n",
        "            pass\n",
        ("tests/test_tools_parallel.py::-k::update_state",),
    ),
    Mutation(
        "resume_same_task",
        "after a crash that lost the step's answers, a repeat takes the resume's answer",
        "langgraph_recall/tools/_steps.py",
        "        order.replay(asked, same_task=task_id is not None and task_id == order.task_id)\n",
        "        order.replay(asked, same_task=False)\n",
        ("tests/test_tools_parallel.py::-k::crash_that",),
    ),
    Mutation(
        "errors_do_not_cut_off",
        "a call that raises lets its siblings finish before the error is raised",
        "langgraph_recall/tools/_node.py",
        "                    await turns.await_turn(call_id)\n"
        "                except Exception as exc:  # an interrupt (GraphBubbleUp) or an error\n",
        "                    await turns.await_turn(call_id)\n"
        "                except GraphBubbleUp as exc:\n",
        ("tests/test_tools_parallel.py::-k::does_not_cut_off",),
    ),
    Mutation(
        "sync_wrapper_async",
        "a sync-only wrap_tool_call serves ainvoke from a worker thread",
        "langgraph_recall/tools/_node.py",
        "        return sync_wrap, async_over_sync\n",
        "        return sync_wrap, None\n",
        ("tests/test_tools_calls.py::-k::sync_only_wrapper",),
    ),
    Mutation(
        "wrapper_own_thread",
        "a sync-only wrapper under ainvoke waits on a thread of its own, not the loop's executor",
        "langgraph_recall/tools/_node.py",
        "            return await _in_own_thread(user_sync, req, execute_on_loop)\n",
        "            return await asyncio.to_thread(user_sync, req, execute_on_loop)\n",
        ("tests/test_tools_calls.py::-k::many_calls_at_once and sqlite",),
    ),
    Mutation(
        "unusable_answer_marked",
        "an unusable approval answer fails the run even with handle_tool_errors=True",
        "langgraph_recall/tools/_approval.py",
        "    setattr(err, _INVALID_RESUME, True)\n",
        "    pass\n",
        ("tests/test_tools_approval.py::-k::even_when",),
    ),
    Mutation(
        "foreign_agent_run",
        "a run on a thread another agent's checkpoints fill is refused",
        "langgraph_recall/checkpoint/_runs.py",
        "        if owner is not None and owner != run.agent_id:\n",
        "        if False:\n",
        ("tests/test_tools_calls.py::-k::time_travel",),
    ),
    Mutation(
        "update_owner",
        "update_state from a history config writes for the checkpoint's agent",
        "langgraph_recall/checkpoint/_put_steps.py",
        "            agent_id = self._updating_agent(config, conf)\n",
        "            agent_id = _agent(config, conf)\n",
        ("tests/test_tools_calls.py::-k::update_state_from",),
    ),
    Mutation(
        "stable_tool_id",
        "a durable call's answer keeps one message id, so a replay is not recorded again",
        "langgraph_recall/tools/_outcome.py",
        "    if isinstance(out, ToolMessage) and not out.id:\n",
        "    if False:\n",
        ("tests/test_tools_calls.py::-k::time_travel",),
    ),
    Mutation(
        "turn_id_text",
        "a turn_id that is not text is found again by its text",
        "langgraph_recall/checkpoint/_put_steps.py",
        "            if turn is not None and not isinstance(turn, str):\n",
        "            if False:\n",
        ("tests/test_checkpoint_turns.py::-k::not_text",),
    ),
    Mutation(
        "resolver_raises",
        "a resolver that raises leaves the call in doubt",
        "langgraph_recall/tools/_drive.py",
        "        except Exception as exc:\n            return _resolver_failed(step, exc)\n"
        "        if inspect.isawaitable(found):\n",
        "        except Exception as exc:\n            raise\n        if inspect.isawaitable(found):\n",
        ("tests/test_tools_calls.py::-k::resolver_that_raises and sync",),
    ),
    Mutation(
        "resolver_answer",
        "a resolver's answer other than ActionEnd or None is refused by name",
        "langgraph_recall/tools/_drive.py",
        "    if found is None or isinstance(found, ActionEnd):\n",
        "    if True:\n",
        ("tests/test_tools_calls.py::-k::not_an_action_end",),
    ),
    Mutation(
        "middleware_stray_names",
        "RecallMiddleware refuses classes/approve/undo names no offered tool has",
        "langgraph_recall/tools/_toolset.py",
        "        if stray and offered:\n",
        "        if False:\n",
        ("tests/test_middleware.py::-k::not_offered",),
    ),
    Mutation(
        "middleware_approve_name",
        "RecallMiddleware(approve='pay') gates pay",
        "langgraph_recall/tools/_toolset.py",
        '    elif isinstance(approve, str):  # one tool\'s name: tuple() of it gave ("p", "a", "y")\n'
        "        approve = (approve,)\n",
        "    elif isinstance(approve, str):\n        pass\n",
        ("tests/test_middleware.py::-k::one_name",),
    ),
    Mutation(
        "blank_agent",
        "an agent id of only whitespace is refused",
        "langgraph_recall/store/_records.py",
        '    if not isinstance(agent_id, str) or not agent_id.strip() or "\\x00" in agent_id:\n',
        '    if not isinstance(agent_id, str) or not agent_id or "\\x00" in agent_id:\n',
        ("tests/test_store_bad_input.py::-k::whitespace or blank",),
    ),
    Mutation(
        "closed_checkpointer",
        "a closed store.checkpointer() refuses reads and runs by name",
        "langgraph_recall/checkpoint/_delegated.py",
        "        if self._shared.inner_closed:\n",
        "        if False:\n",
        ("tests/test_checkpoint_delegation.py::-k::closed and checkpointer",),
    ),
    Mutation(
        "doctor_dead_run",
        "doctor reports an agent whose last run never gave its lease back",
        "langgraph_recall/_doctor.py",
        "        if lease is not None and 0 < lease.expires_at <= now:\n",
        "        if False:\n",
        ("tests/test_cli.py::-k::died_inside",),
    ),
    Mutation(
        "undo_of_pure",
        "undo= naming a pure tool is refused",
        "langgraph_recall/tools/_toolset.py",
        '        pure = sorted(n for n in self.undo if self._classes.get(n) == "pure")\n',
        "        pure: list[str] = []\n",
        ("tests/test_tools_undo.py::-k::pure",),
    ),
    Mutation(
        "briefing_not_a_turn",
        "the recording leaves briefing_node's briefing out",
        "langgraph_recall/checkpoint/_recording.py",
        "    return [m for m in values if isinstance(m, BaseMessage) and not is_briefing_message(m)]\n",
        "    return [m for m in values if isinstance(m, BaseMessage)]\n",
        ("tests/test_hooks.py::-k::briefing_node",),
    ),
    Mutation(
        "closed_under_write",
        "a write the checkpointer's close cut off ends the run with lease_lost",
        "langgraph_recall/checkpoint/_put_steps.py",
        "        return self._failed_closing(config, exc)\n",
        "        return exc\n",
        ("tests/test_checkpoint_lease.py::-k::closing_the",),
    ),
    Mutation(
        "middleware_offered_classes",
        "create_agent's tools without a class are refused before the model is called",
        "langgraph_recall/_middleware.py",
        "            self._durable.check_offered(request.tools or ())\n",
        "            pass\n",
        ("tests/test_middleware.py::-k::before_the_model",),
    ),
    Mutation(
        "durable_wait_no_thread",
        "an async wait for a checkpoint's put holds no worker thread (ainvoke with many calls)",
        "langgraph_recall/checkpoint/_durable.py",
        "        if await durable.await_written(thread_id, checkpoint_id, timeout):\n",
        '        if await __import__("asyncio").to_thread(durable.wait, thread_id, checkpoint_id, timeout):\n',
        ("tests/test_tools_calls.py::-k::without_a_thread_each and sqlite",),
    ),
    Mutation(
        "lease_wait_no_thread",
        "runs queued for a busy agent under ainvoke wait on the loop, not on worker threads",
        "langgraph_recall/checkpoint/_saver.py",
        "        run = await self._shared.keeper.aretry(lambda: runs.begin(config, loop, entry, 0.0))\n",
        "        run = await asyncio.to_thread(runs.begin, config, loop, entry)\n",
        (
            "tests/test_checkpoint_lease.py::-k::queued_under_ainvoke and sqlite",
            "tests/test_checkpoint_lease.py::-k::held_elsewhere and sqlite",
        ),
    ),
    Mutation(
        "slot_wakes_coroutines",
        "giving an agent back wakes the coroutines of this process queued for it",
        "langgraph_recall/checkpoint/_lease.py",
        "            self._given_back.wake_all()\n",
        "            pass\n",
        ("tests/test_checkpoint_lease.py::-k::queued_under_ainvoke and sqlite",),
    ),
    Mutation(
        "cancelled_wrapper_no_tool",
        "a sync-only wrapper cancelled under ainvoke does not start the tool afterwards",
        "langgraph_recall/tools/_node.py",
        "                    if gone.is_set():\n                        raise asyncio.CancelledError()\n",
        "                    if False:\n                        raise asyncio.CancelledError()\n",
        ("tests/test_tools_calls.py::-k::cancelled_under_ainvoke and sqlite",),
    ),
    Mutation(
        "release_before_slot",
        "a run gives its agent's slot back only after the database release",
        "langgraph_recall/checkpoint/_lease.py",
        '                lost = held.lost\n            if held.epoch >= 0 and lost is None:\n                try:\n                    if final is None:\n                        self.store.release_lease(agent_id, self.holder, held.epoch)\n                    else:\n                        final(self.holder, held.epoch)\n                except Exception as exc:  # it expires anyway; the next run just waits for that\n                    warnings.warn(\n                        f"could not release the lease of agent {agent_id!r} ({exc}); it "\n                        f"expires in at most {self.ttl:.0f}s",\n                        RuntimeWarning,\n                        stacklevel=2,\n                    )\n        finally:\n            # The slot goes only after the database release: a run of this process queued\n            # for the agent then takes a released lease, at the same epoch. Had it taken the\n            # slot first, it found the lease still live, and this release ended its lease\n            # under it (it ran on with a lease the database showed free to any process).\n            if held is not None:\n                self._give_back_slot(agent_id)\n        return lost\n',
        '                lost = held.lost\n            self._give_back_slot(agent_id)\n            if held.epoch >= 0 and lost is None:\n                try:\n                    if final is None:\n                        self.store.release_lease(agent_id, self.holder, held.epoch)\n                    else:\n                        final(self.holder, held.epoch)\n                except Exception as exc:  # it expires anyway; the next run just waits for that\n                    warnings.warn(\n                        f"could not release the lease of agent {agent_id!r} ({exc}); it "\n                        f"expires in at most {self.ttl:.0f}s",\n                        RuntimeWarning,\n                        stacklevel=2,\n                    )\n        finally:\n            # The slot goes only after the database release: a run of this process queued\n            # for the agent then takes a released lease, at the same epoch. Had it taken the\n            # slot first, it found the lease still live, and this release ended its lease\n            # under it (it ran on with a lease the database showed free to any process).\n            pass\n        return lost\n',
        ("tests/test_checkpoint_lease.py::-k::database_shows_free and postgres",),
    ),
    Mutation(
        "update_wait_no_thread",
        "an aupdate_state waiting for a busy agent holds no worker thread",
        "langgraph_recall/checkpoint/_saver.py",
        "            md, agent_id, own = await self._shared.keeper.aretry(\n"
        "                lambda: self._before_put(config, metadata, 0.0)\n"
        "            )\n",
        "            md, agent_id, own = await asyncio.to_thread(self._before_put, config, metadata)\n",
        ("tests/test_checkpoint_lease.py::-k::held_elsewhere and sqlite and aupdate_state",),
    ),
    Mutation(
        "wait_keeps_cancel",
        "a coroutine cancelled just after its wake-up stays cancelled",
        "langgraph_recall/_wakeups.py",
        "        timer = loop.call_later(max(0.0, timeout), _resolve, future, False)\n"
        "        try:\n"
        "            return await future\n",
        "        timer = loop.call_later(max(0.0, timeout), _resolve, future, False)\n"
        "        try:\n"
        "            return await asyncio.wait_for(future, 1e6)\n",
        ("tests/test_checkpoint_durable.py::-k::cancelled_just_after",),
    ),
    Mutation(
        "waiters_discarded",
        "a waiter that timed out or was cancelled leaves no entry (nor its loop) behind",
        "langgraph_recall/_wakeups.py",
        "            self._discard(future)  # one that timed out or was cancelled (woken: already gone)\n",
        "            pass\n",
        ("tests/test_checkpoint_durable.py::-k::gave_up",),
    ),
    Mutation(
        "cancel_started_tool",
        "cancelling ainvoke cancels a tool a sync-only wrapper started on the loop",
        "langgraph_recall/tools/_node.py",
        "                for task in list(running):\n                    task.cancel()\n",
        "                for task in list(running):\n                    pass\n",
        ("tests/test_tools_calls.py::-k::cancelled_with_its_caller and sqlite",),
    ),
    Mutation(
        "lost_by_identity",
        "a failed renewal marks lost only the very lease it renewed, not the next run's",
        "langgraph_recall/checkpoint/_lease.py",
        "            if held is None or held.releasing or (only is not None and held is not only):\n",
        "            if held is None or held.releasing or (only is not None and held.epoch != only.epoch):\n",
        ("tests/test_checkpoint_lease.py::-k::late_renewal and sqlite",),
    ),
    Mutation(
        "release_interrupt_safe",
        "an interrupt just after a lease is marked releasing still gives the slot back",
        "langgraph_recall/checkpoint/_lease.py",
        "        held: HeldLease | None = None\n        try:\n            with self._cond:\n                found = self._held.get(agent_id)\n                if found is None or found.releasing:\n                    return None  # not held, or another thread is giving it back (close)\n                # From here no write of the run passes and no renewal runs. Set inside the\n                # try: an interrupt right after it must still give the slot back (a slot left\n                # releasing refused every later run of the agent in this process, for good).\n                held, found.releasing = found, True\n                lost = held.lost\n",
        "        held: HeldLease | None = None\n        with self._cond:\n            found = self._held.get(agent_id)\n            if found is None or found.releasing:\n                return None\n            found.releasing = True\n            lost = found.lost\n        try:\n            held = found\n            if True:\n                pass\n",
        ("tests/test_checkpoint_lease.py::-k::interrupt_inside and sqlite",),
    ),
    Mutation(
        "bound_check_node",
        "DurableToolNode: a call a wrapper inside changed is refused where the tool is invoked",
        "langgraph_recall/tools/_node.py",
        '            bound.check(tool_call["name"], tool_call.get("args"))\n',
        "            pass\n",
        ("tests/test_tools_bound.py::-k::swaps_the_recorded and sqlite",),
    ),
    Mutation(
        "bound_check_keyed",
        "create_agent: a call a middleware listed after RecallMiddleware changed is refused",
        "langgraph_recall/tools/_keys.py",
        "            bound.check(self.name, args)\n",
        "            pass\n",
        ("tests/test_tools_bound.py::-k::listed_after_recall and sqlite",),
    ),
    Mutation(
        "bound_refusal_sticks",
        "a call refused once in an attempt is refused again (a retrying wrapper runs nothing)",
        "langgraph_recall/tools/_bound.py",
        "        if self.refused is not None:  # a retrying wrapper: refused again, never run\n"
        "            raise self.refused\n",
        "        pass\n",
        ("tests/test_tools_bound.py::-k::retrying and sqlite",),
    ),
    Mutation(
        "bound_refused_answered",
        "a refusal a ToolNode turned into an answer still closes the attempt as not started",
        "langgraph_recall/tools/_durable.py",
        "        if bound.refused is not None:  # a wrapper in between made an answer of the refusal\n",
        "        if False:\n",
        ("tests/test_tools_bound.py::-k::wrapper_answers_for and sqlite",),
    ),
    Mutation(
        "bound_refused_raised",
        "a refusal raised through the wrappers closes the attempt as not started, the run goes on",
        "langgraph_recall/tools/_durable.py",
        "            if bound.refused is not None:\n"
        "                return (yield from _refused_inside(store, action, call, bound.refused))\n"
        "            try:\n",
        "            try:\n",
        ("tests/test_tools_bound.py::-k::swaps_the_recorded and not_gated and sqlite",),
    ),
    Mutation(
        "declared_approval_with_classes",
        "a tool's own approve=True gates it under the middleware even when classes= names it",
        "langgraph_recall/tools/_toolset.py",
        "            if name in self._classes and declared_approval(tool):\n",
        "            if False:\n",
        ("tests/test_middleware.py::-k::declares_its_approval",),
    ),
    Mutation(
        "middleware_given_store",
        "RecallMiddleware(store=...) serves its tool calls and the recall tools",
        "langgraph_recall/_middleware.py",
        "        return request.override(runtime=dataclasses.replace(runtime, store=self.store))  # type: ignore[type-var]\n",
        "        return request\n",
        ("tests/test_middleware.py::-k::given_to_the_middleware",),
    ),
    Mutation(
        "option_names_are_text",
        "classes/approve/undo naming a tool by anything but its name is refused when built",
        "langgraph_recall/tools/_toolset.py",
        "            if not isinstance(name, str):\n",
        "            if False:\n",
        ("tests/test_middleware.py::-k::options_of_the_wrong_kind",),
    ),
    Mutation(
        "decided_leaves_the_tools_answer",
        "a decided approval alone in its task leaves a resume that is not an approval's alone",
        "langgraph_recall/tools/_approval.py",
        "                if not _is_approval_answer(task_pad.get_null_resume(False), action_id):\n",
        "                if task_pad.get_null_resume(False) is None:\n",
        ("tests/test_tools_approval.py::-k::takes_none_of and through and sqlite",),
    ),
    Mutation(
        "misaddressed_answer_asked_again",
        "an answer naming another action is asked again, the request not left pending for good",
        "langgraph_recall/tools/_approval.py",
        "    if answer.action_id is not None and answer.action_id != action_id:\n",
        "    if False:\n",
        ("tests/test_tools_approval.py::-k::for_another_action and sqlite",),
    ),
    Mutation(
        "decided_takes_only_approval_answers",
        "a decided approval takes back only answers to an approval, none of its tool's own",
        "langgraph_recall/tools/_approval.py",
        "                if not _is_approval_answer(task_pad.resume[position]):\n"
        "                    break\n",
        "                pass\n",
        ("tests/test_tools_approval.py::-k::takes_none_of and sqlite",),
    ),
    Mutation(
        "bound_model_part",
        "only the arguments the model gives are compared, not what ToolNode injects",
        "langgraph_recall/tools/_bound.py",
        "        if all(k in keys for k in args):\n",
        "        if True:\n",
        ("tests/test_tools_bound.py::-k::injects and sqlite",),
    ),
    Mutation(
        "middleware_store_recall_tools_only",
        "RecallMiddleware(store=...) leaves the agent's own store to tools other than its own",
        "langgraph_recall/_middleware.py",
        '            or (request.tool_call or {}).get("name") not in RECALL_TOOL_NAMES\n',
        "",
        ("tests/test_middleware.py::-k::own_store_to_its_tools and sqlite",),
    ),
    Mutation(
        "middleware_store_durable_engine",
        "RecallMiddleware(store=...) is where its durable calls are recorded",
        "langgraph_recall/_middleware.py",
        "        self._durable.store = store\n",
        "",
        ("tests/test_middleware.py::-k::own_store_to_its_tools and sqlite",),
    ),
    Mutation(
        "decision_keeps_its_task",
        "a decision takes back its answers only in the task it was asked in",
        "langgraph_recall/tools/_approval.py",
        "                if latest.task_id != task_id or taken >= (latest.asked or 0):\n",
        "                if taken >= (latest.asked or 0):\n",
        ("tests/test_tools_approval.py::-k::shaped_like and sqlite",),
    ),
    Mutation(
        "decision_keeps_its_count",
        "a decision takes back exactly as many answers as its asking took",
        "langgraph_recall/tools/_approval.py",
        "        if exact:\n            continue\n",
        "        if exact:\n            break\n",
        ("tests/test_tools_approval.py::-k::after_the_approval_was_asked_again and sqlite",),
    ),
    Mutation(
        "same_holder_live_new_epoch",
        "a holder id taking its own live lease (another process by that name) gets a new epoch",
        "langgraph_recall/store/_leases.py",
        '        "AND recall_leases.expires_at <= {now} THEN recall_leases.epoch "\n',
        '        "THEN recall_leases.epoch "\n',
        ("tests/test_checkpoint_fencing.py::-k::restarted_under",),
    ),
    Mutation(
        "durable_timeout_checked",
        "a durable_timeout that is not seconds above 0 is refused when the node is built",
        "langgraph_recall/tools/_durable.py",
        '        self.durable_timeout = check_timeout("durable_timeout", durable_timeout)\n',
        "        self.durable_timeout = durable_timeout\n",
        ("tests/test_tools_calls.py::-k::not_a_positive_number",),
    ),
    Mutation(
        "durable_wait_no_limit",
        "a sync wait for a checkpoint with no limit (inf) waits instead of raising",
        "langgraph_recall/checkpoint/_durable.py",
        "                    self._cond.wait(min(left, _LONGEST_WAIT))  # no limit: inf\n",
        "                    self._cond.wait(left)\n",
        ("tests/test_checkpoint_durable.py::-k::without_a_limit",),
    ),
    Mutation(
        "resolve_while_running",
        "a person cannot settle a call whose run still holds the agent's lease (it may be running)",
        "langgraph_recall/store/_actions.py",
        "    _refuse_while_running(tx, action)\n",
        "",
        (
            "tests/test_store_records.py::-k::resolve_refuses_while_the_agents_lease_is_live",
            "tests/test_cli.py::-k::resolve_refuses_a_call_whose_run_still_holds_the_lease",
        ),
    ),
    Mutation(
        "cli_not_a_store",
        "a CLI command on a database that is not a store refuses it and writes nothing",
        "langgraph_recall/cli/_commands.py",
        "    if not create:\n        _refuse_if_not_a_store(ctx.db)\n",
        "",
        ("tests/test_cli.py::-k::not_a_store_is_refused_and_left_as_it_was",),
    ),
    Mutation(
        "replaced_db_untouched",
        "a SQLite file emptied or replaced under its secret is refused before anything writes it",
        "langgraph_recall/store/_secret.py",
        "    found = sqlite_found(db_path)\n",
        "    found = None\n",
        (
            "tests/test_store_schema.py::-k::refused_before_anything_is_written",
            "tests/test_store_schema.py::-k::replaced_by_another_file_is_refused_untouched",
        ),
    ),
    Mutation(
        "pg_search_words",
        "PostgreSQL indexes an item's words split at punctuation, as SQLite and the query do",
        "langgraph_recall/store/_items.py",
        '    return _SEPARATORS.sub(" ", text)[:SEARCH_BODY_MAX]\n',
        "    return text[:SEARCH_BODY_MAX]\n",
        ("tests/test_store_search.py::-k::postgres and (email_url or working_state)",),
    ),
    Mutation(
        "pg_search_cap",
        "PostgreSQL indexes at most SEARCH_BODY_MAX characters, so a large put fits a tsvector",
        "langgraph_recall/store/_items.py",
        '    return _SEPARATORS.sub(" ", text)[:SEARCH_BODY_MAX]\n',
        '    return _SEPARATORS.sub(" ", text)\n',
        ("tests/test_store_search.py::-k::postgres and large_varied",),
    ),
    Mutation(
        "pg_search_migration",
        "schema v5 re-indexes PostgreSQL items written before with the same words",
        "langgraph_recall/store/_schema.py",
        '                f"UPDATE recall_items SET body = {_SEARCH_BODY_PG} WHERE body <> {_SEARCH_BODY_PG}"\n',
        '                "SELECT 1"\n',
        ("tests/test_store_search.py::-k::before_v5",),
    ),
    Mutation(
        "abatch_embeds_on_loop",
        "abatch embeds with the index's async methods, so an async-only embed works",
        "langgraph_recall/store/_store.py",
        "                documents = await self._embeddings.aembed_documents([t for _, _, t in todo])\n",
        "                documents = self._embeddings.embed_documents([t for _, _, t in todo])\n",
        ("tests/test_store_search.py::-k::async_only",),
    ),
    Mutation(
        "twin_embeds_on_caller_loop",
        "a search inside an async twin's thread embeds on the caller's loop (abriefing)",
        "langgraph_recall/store/_store.py",
        "            loop = caller_loop()\n",
        "            loop = None\n",
        ("tests/test_store_search.py::-k::async_only",),
    ),
    Mutation(
        "show_keeps_ttl",
        "langgraph-recall show leaves the TTL of the memories its briefing shows alone",
        "langgraph_recall/cli/_commands.py",
        "        brief = store.briefing(agent, refresh_ttl=False)\n",
        "        brief = store.briefing(agent)\n",
        ("tests/test_cli.py::-k::ttl_of_the_memories",),
    ),
    Mutation(
        "items_rowid_column",
        "SQLite items keep their rowid through a .dump and restore, so text search stays right",
        "langgraph_recall/store/_schema.py",
        '    [{"sqlite": _items_keep_their_rowid(), "postgres": []}],\n',
        '    [{"sqlite": [], "postgres": []}],\n',
        ("tests/test_store_search.py::-k::dump_and_restore",),
    ),
    Mutation(
        "items_fts_rebuilt",
        "the v6 upgrade rebuilds an FTS5 index that a restore before it broke",
        "langgraph_recall/store/_schema.py",
        "        \"INSERT INTO recall_items_fts(recall_items_fts) VALUES ('rebuild')\",\n",
        "",
        ("tests/test_store_search.py::-k::mended_by_the_upgrade",),
    ),
    Mutation(
        "filter_big_int",
        "a filter on an integer beyond 64 bits is answered on SQLite, not an OverflowError",
        "langgraph_recall/store/_items.py",
        '            return "?", [float(value)]\n',
        '            return "?", [value]\n',
        ("tests/test_store_bad_input.py::-k::beyond_64_bits",),
    ),
    Mutation(
        "no_truncate",
        "PostgreSQL journals refuse TRUNCATE, which fires no row trigger",
        "langgraph_recall/store/_schema.py",
        "def _no_truncate_guard(table: str) -> list[str]:\n",
        "def _no_truncate_guard(table: str) -> list[str]:\n    return []\n",
        (
            "tests/test_store_schema.py::test_postgres_journals_refuse_truncate",
            "tests/test_store_schema.py::-k::gains_the_truncate_guard",
        ),
    ),
    Mutation(
        "verify_truncate",
        "verify reports a PostgreSQL journal that lost its TRUNCATE guard",
        "langgraph_recall/store/_verify.py",
        '                if f"{t}_append_only" in names and f"{t}_no_truncate" in names\n',
        '                if f"{t}_append_only" in names\n',
        ("tests/test_store_schema.py::-k::gains_the_truncate_guard",),
    ),
    Mutation(
        "undo_checked_first",
        "every undo function is checked before any undo runs or is recorded",
        "langgraph_recall/tools/_undo.py",
        "    calls = [_prepare(fn, action) for action, fn in walk.undos]\n",
        "    calls = (_prepare(fn, action) for action, fn in walk.undos)\n",
        ("tests/test_tools_undo.py::-k::bad_undo_function",),
    ),
    Mutation(
        "undo_whole_result",
        "an undo gets the tool's whole answer, not the record's reference to a long one",
        "langgraph_recall/tools/_undo.py",
        "            extras[name] = whole_result(store, call.action.result)\n",
        "            extras[name] = call.action.result\n",
        ("tests/test_tools_undo.py::-k::whole_result",),
    ),
    Mutation(
        "settle_skips_undo",
        "settle leaves an undo in doubt open: it is not offered to the tool's resolver",
        "langgraph_recall/tools/_durable.py",
        "            undo = action.tool.startswith(UNDO_PREFIX)\n",
        "            undo = False\n",
        ("tests/test_tools_undo.py::-k::settling",),
    ),
    Mutation(
        "undo_unrecordable_result",
        "an undo whose return value cannot be recorded is recorded done with its repr",
        "langgraph_recall/tools/_undo.py",
        "        dumps_typed(result)\n",
        "        pass\n",
        ("tests/test_tools_undo.py::-k::cannot_be_recorded",),
    ),
    Mutation(
        "undo_in_doubt_open",
        "an undo function raising InDoubt leaves its undo open (not failed) and stops the walk",
        "langgraph_recall/tools/_undo.py",
        "    except InDoubt:\n",
        "    except ():\n",
        ("tests/test_tools_undo.py::-k::raising_in_doubt",),
    ),
    Mutation(
        "undo_in_doubt_named",
        "an undo left in doubt by this walk is the action its report's stopped_at names",
        "langgraph_recall/tools/_undo.py",
        "            return _stopped(report, undo_action_id(call.action.action_id))\n",
        "            return _stopped(report, call.action.action_id)\n",
        ("tests/test_tools_undo.py::-k::raising_in_doubt",),
    ),
    Mutation(
        "undo_takes_lease",
        "store.undo acts under the agent's lease: lease_held while another holder (or a killed undo) has it",
        "langgraph_recall/tools/_undo.py",
        "        return keeper.acquire(agent_id)\n",
        '        return keeper._held.setdefault(agent_id, HeldLease(agent_id, 0, float("inf")))\n',
        (
            "tests/test_tools_undo.py::-k::lease_held",
            "tests/test_tools_undo.py::-k::killed_undo",
        ),
    ),
    Mutation(
        "undo_lease_checked",
        "an undo that lost the agent's lease mid-way starts no other undo (lease_lost)",
        "langgraph_recall/tools/_undo.py",
        "        _check_lease(keeper, agent_id, report)\n",
        "",
        ("tests/test_tools_undo.py::-k::loses_the_lease",),
    ),
    Mutation(
        "resolver_result_named",
        "a resolver's done result that cannot be recorded is refused naming the resolver and the action",
        "langgraph_recall/tools/_steps.py",
        "            dumps_typed(end.result)\n",
        "            pass\n",
        ("tests/test_tools_calls.py::-k::resolver_result_that_cannot_be_recorded",),
    ),
    Mutation(
        "meta_lost",
        "a database that lost recall_meta but kept other recall tables is refused, not re-created",
        "langgraph_recall/store/_db.py",
        "            self._refuse_if_meta_lost(tx)\n",
        "",
        ("tests/test_store_schema.py::-k::lost_only_its_meta_table",),
    ),
    Mutation(
        "secret_file_strict",
        "a spoiled secret file is secret_missing, not read as another store's (records_missing)",
        "langgraph_recall/store/_secret.py",
        "    store_id, _ = read_secret_file(path, db_path)\n",
        "    try:\n"
        "        with open(path) as f:\n"
        '            store_id = json.load(f).get("store_id")\n'
        "    except (OSError, ValueError, AttributeError):\n"
        "        store_id = None\n",
        ("tests/test_store_schema.py::-k::spoiled_secret_file",),
    ),
    Mutation(
        "search_page_checked",
        "a search's limit and offset are checked (a count) before the transaction",
        "langgraph_recall/store/_validate.py",
        '        validate_count("limit", op.limit)\n'
        '        validate_count("offset", op.offset)\n'
        "    elif isinstance(op, ListNamespacesOp):\n",
        "    elif isinstance(op, ListNamespacesOp):\n",
        ("tests/test_store_bad_input.py::-k::search_limit_or_offset and sqlite",),
    ),
    Mutation(
        "put_ttl_checked",
        "a put's ttl is checked (positive, finite minutes) before anything is written",
        "langgraph_recall/store/_validate.py",
        '        if isinstance(op, PutOp):\n            validate_minutes("ttl", op.ttl)\n',
        "",
        ("tests/test_store_bad_input.py::-k::ttl_must_be and sqlite",),
    ),
    Mutation(
        "secret_given_id_file",
        "a SQLite store opened with secret= keeps its store id beside it (deletion is noticed)",
        "langgraph_recall/store/_secret.py",
        '        _write_secret_file(path, {"store_id": store_id or _set_store_id(db)})\n',
        "",
        ("tests/test_store_schema.py::-k::deleted_database_opened_with_a_secret",),
    ),
    Mutation(
        "dsn_query_password",
        "a password= query parameter of a PostgreSQL URL is never shown (errors, CLI, repr)",
        "langgraph_recall/store/_db.py",
        '    dsn = _QUERY_PASSWORD.sub(r"\\1***", dsn)\n',
        "",
        ("tests/test_store_order.py::-k::dsn_password", "tests/test_cli.py::-k::dsns_query"),
    ),
    Mutation(
        "sqlite_path_absolute",
        "a relative SQLite path is resolved at open: after os.chdir new connections open the same file",
        "langgraph_recall/store/_sqlite.py",
        "        self.path = os.path.abspath(path)\n",
        "        self.path = path\n",
        ("tests/test_store_contexts.py::-k::after_a_chdir",),
    ),
    Mutation(
        "sqlite_same_file",
        "a new SQLite connection refuses a database file deleted or replaced since the store opened",
        "langgraph_recall/store/_sqlite.py",
        "        elif found != self._identity:\n",
        "        elif False:\n",
        ("tests/test_store_schema.py::-k::while_open and replaced",),
    ),
    Mutation(
        "wal_thread_rw",
        "the WAL checkpoint thread opens the file mode=rw: it never creates a deleted database",
        "langgraph_recall/store/_sqlite.py",
        '            self._uri("rw"), uri=True, isolation_level=None, check_same_thread=False, timeout=1.0\n',
        "            self.path, isolation_level=None, check_same_thread=False, timeout=1.0\n",
        ("tests/test_store_wal.py::-k::never_creates_a_deleted",),
    ),
    Mutation(
        "collected_loop_reaped",
        "a run whose failed loop was collected is ended at the agent's next run, not left to a "
        "finalizer thread that may not have started",
        "langgraph_recall/checkpoint/_runs.py",
        "            # finalizer's end then finds it ended).\n            return True\n",
        "            # finalizer's end then finds it ended).\n            return False\n",
        ("tests/test_checkpoint_lease.py::-k::collected_is_ended and not-started",),
    ),
    Mutation(
        "ending_waited",
        "a next run waits for the agent's previous run being ended on another thread",
        "langgraph_recall/checkpoint/_runs.py",
        "            ending.released.wait(max(30.0, self.keeper.ttl))\n",
        "            pass\n",
        ("tests/test_checkpoint_lease.py::-k::collected_is_ended and ending",),
    ),
    Mutation(
        "old_secret_store_not_reseeded",
        "a SQLite store opened with secret= before it kept an id file is never given a made-up "
        "secret (its approvals would all read as forged)",
        "langgraph_recall/store/_secret.py",
        "    if store_id is None and existed_before and _holds_records(db):\n",
        "    if False:\n",
        ("tests/test_store_schema.py::-k::old_store_opened_with_a_secret",),
    ),
    Mutation(
        "driver_message_scrubbed",
        "a password libpq quotes back in its error (a raw % in it) is never shown",
        "langgraph_recall/store/_postgres.py",
        '                f"{_scrub(str(exc).strip().splitlines()[0], dsn)}. "\n',
        '                f"{str(exc).strip().splitlines()[0]}. "\n',
        ("tests/test_cli.py::-k::driver_quotes_back",),
    ),
    Mutation(
        "pg_empty_secret_not_given",
        "on PostgreSQL an empty secret= counts as not given (LANGGRAPH_RECALL_SECRET), as on SQLite",
        "langgraph_recall/store/_secret.py",
        "    raw = given or os.environ.get(ENV_SECRET)\n",
        "    raw = given if given is not None else os.environ.get(ENV_SECRET)\n",
        ("tests/test_store_schema.py::-k::empty_secret_counts_as_not_given",),
    ),
    Mutation(
        "dsn_escaped_quote",
        "a keyword DSN's quoted password holding \\' is hidden whole, not up to that quote",
        "langgraph_recall/store/_db.py",
        """_KEYWORD_PASSWORD = re.compile(r"(password\\s*=\\s*)(?:'((?:[^'\\\\]|\\\\.)*)'|(\\S+))")\n""",
        """_KEYWORD_PASSWORD = re.compile(r"(password\\s*=\\s*)(?:'([^']*)'|(\\S+))")\n""",
        ("tests/test_store_order.py::-k::dsn_password",),
    ),
    Mutation(
        "cli_lost_meta_deferred",
        "the CLI leaves a store that lost recall_meta to the open (records_missing), never "
        "calling it 'not a langgraph-recall store'",
        "langgraph_recall/cli/_commands.py",
        "    if found is None or found.is_store or found.lost_meta:\n",
        "    if found is None or found.is_store:\n",
        ("tests/test_cli.py::-k::lost_only_recall_meta",),
    ),
    Mutation(
        "driver_cause_dropped",
        "a driver error quoting the DSN's password is not chained (a logged traceback prints it)",
        "langgraph_recall/store/_db.py",
        "    return exc if _scrub(str(exc), dsn) == str(exc) else None\n",
        "    return exc\n",
        ("tests/test_cli.py::-k::driver_quotes_back",),
    ),
    Mutation(
        "upgrade_refused_clearly",
        "an upgrade the role may not make is refused saying so and what to do, nothing changed",
        "langgraph_recall/store/_db.py",
        "            raise\n        except Exception as exc:\n            # The DDL of one transaction",
        "            raise\n        except ZeroDivisionError as exc:\n            # The DDL of one transaction",
        ("tests/test_store_schema.py::-k::role_may_not",),
    ),
    Mutation(
        "doubts_in_header",
        "the briefing's header itself says not to repeat the calls in doubt (their section may not fit)",
        "langgraph_recall/_briefing.py",
        '"repeat them."',
        '"ask."',
        ("tests/test_briefing.py::-k::too_small_for_any_doubt_line",),
    ),
]


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for name in ("langgraph_recall", "tests", "benchmarks"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")


def _env(dest: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(dest), "PYTHONDONTWRITEBYTECODE": "1"}


def _pytest(dest: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str]:
    """Run ``tests``; the node ids together, each "file::-k::expression" on its own (pytest
    takes one -k per run). The first failing run decides."""
    plain = [t for t in tests if "::-k::" not in t]
    runs = [plain] if plain else []
    for t in tests:
        path, sep, expr = t.partition("::-k::")
        if sep:
            runs.append([path, "-k", expr])
    code, tail = 0, ""
    for args in runs:
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *args]
        try:
            done = subprocess.run(
                cmd, cwd=dest, env=_env(dest), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return 124, "timed out"
        code, tail = done.returncode, (done.stdout.strip().splitlines() or [""])[-1]
        if code != 0:
            break
    return code, tail


def _check_imports_copy(dest: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import langgraph_recall; print(langgraph_recall.__file__)"],
        cwd=dest,
        env=_env(dest),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not out.startswith(str(dest)):
        raise SystemExit(f"the copy is not the package under test ({out}); aborting")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", help="a guard to check (repeat, or separate with commas)"
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    only = {name for given in args.only or () for name in given.split(",") if name}
    unknown = sorted(only - {m.name for m in MUTATIONS})
    if unknown:  # checking nothing must not read as "every guard is specified"
        parser.error(f"no guard named {', '.join(unknown)}; see MUTATIONS in this script")
    chosen = [m for m in MUTATIONS if not only or m.name in only]
    with tempfile.TemporaryDirectory(prefix="recall-mutation-") as tmp:
        dest = Path(tmp)
        _copy_tree(dest)
        _check_imports_copy(dest)
        every_test = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        code, tail = _pytest(dest, every_test, args.timeout)
        print(f"unmodified: {'pass' if code == 0 else 'FAIL'} ({tail})")
        if code != 0:
            print("the tests must pass before guards are removed; fix that first")
            return 1
        survived = []
        for m in chosen:
            target = dest / m.path
            original = target.read_text()
            if original.count(m.find) != 1:
                print(
                    f"{m.name:11s} cannot apply: the guarded source changed ({m.path}); update MUTATIONS"
                )
                survived.append(m.name)
                continue
            target.write_text(original.replace(m.find, m.replace))
            start = time.monotonic()
            try:
                code, tail = _pytest(dest, m.tests, args.timeout)
            finally:
                target.write_text(original)
            verdict = "killed" if code != 0 else "SURVIVED"
            if code == 0:
                survived.append(m.name)
            print(
                f"{m.name:11s} {verdict:9s} {time.monotonic() - start:5.1f}s  {m.guard}  [{tail}]"
            )
        if survived:
            print(f"guards no test notices: {', '.join(survived)}")
            return 1
        print("every guard is specified by a test that fails without it")
        return 0


if __name__ == "__main__":
    sys.exit(main())
