"""Random kill -9 while an agent sends emails: each email at most once, or recorded in doubt.

A scripted agent sends 5 emails, one per model turn, through an external tool that records the
email (fsynced) and then sleeps before answering, so many kills land between the effect and
its record. Each trial kills the worker at 1 or 2 random moments of the agent's run (timed
from the moment the worker starts the agent, so a slow start on a loaded machine does not eat
the schedule), then lets a fresh worker finish. The same schedule runs against a plain ToolNode, which must send some email twice:
that is what the durable node is for, and it shows the kills land where it matters.
"""

from __future__ import annotations

import queue
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from fix_tools import Zygote, read_effects, wait_for_effect, zygotes  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

TRIALS = 20
EMAILS = 5
SLEEP = 0.06  # seconds the email tool sleeps after its effect, before answering
WORKER = "fix_tools:email_worker"


@dataclass
class Trial:
    agent_id: str
    effects: str
    kills: int = 0


def _trial(z: Zygote, target: str, trial: Trial, mode: str, delays: list[float]) -> None:
    job = {
        "target": target,
        "agent_id": trial.agent_id,
        "mode": mode,
        "effects": trial.effects,
        "emails": EMAILS,
        "sleep": SLEEP,
    }
    for delay in delays:
        pid = z.start(WORKER, **job)
        code = z.wait(delay) if wait_for_effect(trial.effects, "ready", pid, 300) else z.wait(0)
        if code is None:
            z.kill()
            trial.kills += 1
            continue
        assert code == 0, f"worker for {trial.agent_id} exited with {code}"
        return
    z.start(WORKER, **job)
    assert z.wait(300) == 0, f"the last worker for {trial.agent_id} did not finish"


def _duplicates(trial: Trial) -> int:
    sent = Counter(e["to"] for e in read_effects(trial.effects, "email"))
    return sum(n - 1 for n in sent.values() if n > 1)


def _run(
    pool: list[Zygote],
    target: str,
    tmp: Path,
    mode: str,
    schedules: list[list[float]],
    stop: Callable[[Trial], bool] = lambda trial: False,
) -> list[Trial]:
    """Run the trials on the pool; once ``stop(trial)`` holds for a finished trial, no new
    trial starts (the ones running finish)."""
    trials = [Trial(f"{mode}-{i}", str(tmp / f"{mode}-{i}.log")) for i in range(len(schedules))]
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(trials)):
        todo.put(i)
    errors: list[BaseException] = []
    done: list[Trial] = []
    enough = threading.Event()

    def work(z: Zygote) -> None:
        while not enough.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                _trial(z, target, trials[i], mode, schedules[i])
            except BaseException as exc:  # reported below, with the others' results
                errors.append(exc)
                return
            done.append(trials[i])
            if stop(trials[i]):
                enough.set()

    threads = [threading.Thread(target=work, args=(z,)) for z in pool]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return done


def _agent_run_seconds(z: Zygote, target: str, tmp: Path) -> float:
    """How long the agent's run takes here, now, from its start to the worker's exit.

    The second of two runs: the first also creates the schema, which later runs do not.
    """
    for attempt in range(2):
        effects = str(tmp / f"c{attempt}.log")
        z.start(
            WORKER,
            target=target,
            agent_id=f"calibrate-{attempt}",
            mode="durable",
            effects=effects,
            emails=EMAILS,
            sleep=SLEEP,
        )
        assert z.wait(300) == 0
        [ready] = read_effects(effects, "ready")
        last = read_effects(effects, "email")[-1]
    return float(last["t"] - ready["t"])


def test_kill9_at_random_sends_each_email_at_most_once(
    zygotes: list[Zygote],  # noqa: F811 (the fixture)
    store_target: str,
    store,
    tmp_path: Path,
) -> None:
    span = _agent_run_seconds(zygotes[0], store_target, tmp_path)
    rng = random.Random(20261129)
    schedules = [
        [round(rng.uniform(0.0, 1.1) * span, 3) for _ in range(rng.randint(1, 2))]
        for _ in range(TRIALS)
    ]
    durable = _run(zygotes, store_target, tmp_path, "durable", schedules)
    # The baseline only has to show that these kills make a plain ToolNode repeat an email.
    plain = _run(
        zygotes, store_target, tmp_path, "plain", schedules, stop=lambda t: _duplicates(t) > 0
    )

    assert len(durable) == TRIALS
    # The schedule really killed workers. Its times come from one calibration run: if the
    # machine's load changes after it, fewer land inside a run (29 of 20 trials under load
    # here), so half the trials is asked; the in-doubt count below is what matters.
    assert sum(t.kills for t in durable) >= TRIALS // 2
    in_doubt = 0
    for trial in durable:
        sent = Counter(e["to"] for e in read_effects(trial.effects, "email"))
        actions = {a.args["to"]: a for a in store.actions(trial.agent_id)}
        for i in range(EMAILS):
            to = f"user{i}@example.com"
            assert sent[to] <= 1, f"{trial.agent_id}: {to} was sent {sent[to]} times"
            action = actions[to]
            if action.status == "open":  # in doubt: sent once or not at all, never repeated
                in_doubt += 1
            else:
                assert action.status == "done" and sent[to] == 1, (trial.agent_id, to, action)
        keys = {e["to"]: e["key"] for e in read_effects(trial.effects, "email")}
        assert all(keys[to] == actions[to].idempotency_key for to in keys)
    assert in_doubt > 0  # some kills landed between an effect and its record

    repeated = sum(_duplicates(t) for t in plain)
    print(
        f"\n{store.dialect}: durable {len(durable)} trials, {sum(t.kills for t in durable)} kill -9, "
        f"0 emails twice, {in_doubt} of {len(durable) * EMAILS} in doubt; plain ToolNode "
        f"{len(plain)} trials, {sum(t.kills for t in plain)} kill -9, {repeated} emails twice"
    )
    assert repeated > 0, "a plain ToolNode never repeated an email"
