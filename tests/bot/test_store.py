"""The durable store on SQLite and (when RSI_TEST_POSTGRES_URL is set) PostgreSQL."""

from __future__ import annotations

import os
import threading

import pytest

from bot.store import Base, Store
from bot.vocab import CandidateState, JobKind, TaskState


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _make(url: str, clock) -> Store:
    store = Store(url, clock=clock, create=False)
    Base.metadata.drop_all(store.engine)
    Base.metadata.create_all(store.engine)
    return store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/bot.db"
    return os.environ["RSI_TEST_POSTGRES_URL"]


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(db_url, clock):
    s = _make(db_url, clock)
    yield s
    s.close()


def test_delivery_claimed_once(store):
    assert store.record_delivery("d1", "issues", "labeled", {"a": 1}) is not None
    assert store.record_delivery("d1", "issues", "labeled", {"a": 1}) is None
    assert store.count_deliveries() == 1
    assert len(store.jobs(kind="event")) == 1
    assert store.delivery("d1").payload == {"a": 1}


def test_concurrent_redeliveries_claim_once(store):
    results = []

    def go():
        results.append(store.record_delivery("same", "ping", None, {}))

    threads = [threading.Thread(target=go) for _ in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sum(r is not None for r in results) == 1
    assert len(store.jobs()) == 1


def test_claim_finish(store):
    jid = store.enqueue("x", {"n": 1})
    job = store.claim("w1")
    assert job.id == jid and job.payload == {"n": 1} and job.attempts == 1
    assert store.claim("w2") is None
    assert store.finish(job, {"ok": True})
    assert store.job(jid).state == "done" and store.job(jid).result == {"ok": True}


def test_enqueue_key_is_idempotent(store):
    assert store.enqueue("x", {}, key="k") is not None
    assert store.enqueue("x", {}, key="k") is None
    assert len(store.jobs()) == 1


def test_retry_with_backoff_then_fail(store, clock):
    store.enqueue("x", {}, max_attempts=2)
    job = store.claim("w")
    assert store.fail(job, "boom", backoff_base_s=10) == "queued"
    assert store.claim("w") is None  # not due yet
    clock.t += 10
    job = store.claim("w")
    assert job.attempts == 2
    assert store.fail(job, "boom again") == "failed"
    assert store.job(job.id).last_error == "boom again"
    assert store.job_counts()["failed"] == 1


def test_expired_lease_is_reclaimed(store, clock):
    store.enqueue("x", {})
    job = store.claim("dead-worker", lease_s=5)
    clock.t += 3
    assert store.heartbeat(job, lease_s=5)
    clock.t += 4
    assert store.claim("w2", lease_s=5) is None  # heartbeat kept it
    clock.t += 2
    again = store.claim("w2", lease_s=5)
    assert again.id == job.id and again.attempts == 2
    assert not store.heartbeat(job)  # the dead worker lost it
    assert not store.finish(job)
    assert store.finish(again)


def test_dying_workers_exhaust_attempts(store, clock):
    store.enqueue("x", {}, max_attempts=2)
    for _ in range(2):
        assert store.claim("w", lease_s=1) is not None
        clock.t += 2
    assert store.claim("w", lease_s=1) is None
    assert store.job_counts()["failed"] == 1


def test_lane_runs_one_at_a_time(store):
    a = store.enqueue("x", {}, lane="task:1")
    b = store.enqueue("x", {}, lane="task:1")
    c = store.enqueue("x", {}, lane="task:2")
    j1 = store.claim("w")
    j2 = store.claim("w")
    assert (j1.id, j2.id) == (a, c)
    assert store.claim("w") is None
    store.finish(j1)
    assert store.claim("w").id == b


def test_kinds_filter(store):
    store.enqueue("event", {})
    jid = store.enqueue("run_task", {})
    assert store.claim("w", kinds=["run_task"]).id == jid


def test_concurrent_claims_never_share_a_job(store):
    n = 40
    for i in range(n):
        store.enqueue("x", {"i": i})
    got: list[int] = []
    lock = threading.Lock()

    def worker():
        while (job := store.claim(f"w{threading.get_ident()}")) is not None:
            with lock:
                got.append(job.id)
            store.finish(job)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(got) == sorted(set(got)) and len(got) == n


def test_queue_age_and_counts(store, clock):
    store.enqueue("x", {})
    clock.t += 7
    assert store.oldest_queued_age() == pytest.approx(7)
    assert store.job_counts() == {"queued": 1, "running": 0, "done": 0, "failed": 0}


def test_tasks_supersede(store):
    t1 = store.start_task("o/r", 3, labeler="alice", installation_id=9)
    assert t1.generation == 1
    store.update_task(t1.id, stop=True, budget=4)
    t2 = store.start_task("o/r", 3, labeler="bob", installation_id=None)
    assert t2.id == t1.id and t2.generation == 2 and not t2.stop and t2.labeler == "bob"
    assert t2.installation_id == 9
    assert not store.update_task(t1.id, generation=1, state="running")
    assert store.update_task(t1.id, generation=2, state="running")
    assert store.find_task("o/r", 3).state == "running"


def test_candidates_and_sticky(store):
    t = store.start_task("o/r", 3, labeler="a", installation_id=None)
    store.upsert_candidate(t.id, 1, branch="rsi/3/1", sha="abc", decision="accept")
    store.upsert_candidate(t.id, 1, pr_number=7, state="open")
    store.upsert_candidate(t.id, 2, decision="reject")
    task, cand = store.candidate_by_pr("o/r", 7)
    assert task.id == t.id and cand.branch == "rsi/3/1"
    assert store.candidate_by_branch("o/r", "rsi/3/1")[1].n == 1
    assert [c.n for c in store.candidates(t.id, state="open")] == [1]
    assert store.verdict_counts() == {"accept": 1, "reject": 1}
    assert store.sticky("o/r", 3, "status") is None
    store.set_sticky("o/r", 3, "status", 11)
    store.set_sticky("o/r", 3, "status", 12)
    assert store.sticky("o/r", 3, "status") == 12


def test_states_and_kinds_are_stored_as_their_strings(store):
    t = store.start_task("o/r", 4, labeler="a", installation_id=None)
    store.update_task(t.id, state=TaskState.PAUSED)
    store.upsert_candidate(t.id, 1, state=CandidateState.PENDING, round=2, agent="tuner")
    store.enqueue(JobKind.PUBLISH, {"task_id": t.id})
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT state FROM tasks").scalar_one() == "paused"
        assert conn.exec_driver_sql("SELECT state FROM candidates").scalar_one() == "pending"
        assert conn.exec_driver_sql("SELECT kind FROM jobs").scalar_one() == "publish"
    (c,) = store.candidates(t.id, state="pending")
    assert (c.round, c.agent) == (2, "tuner")


def test_an_older_database_gets_the_new_nullable_columns(db_url, clock):
    """A candidates table made before ``round`` and ``agent`` existed: opening the
    store adds them; the old rows read back with None."""
    old = _make(db_url, clock)
    t = old.start_task("o/r", 5, labeler="a", installation_id=None)
    old.upsert_candidate(t.id, 1, decision="accept", state="open")
    with old.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE candidates DROP COLUMN round")
        conn.exec_driver_sql("ALTER TABLE candidates DROP COLUMN agent")
    old.close()
    new = Store(db_url, clock=clock)
    (c,) = new.candidates(t.id)
    assert (c.decision, c.state, c.round, c.agent) == ("accept", "open", None, None)
    new.upsert_candidate(t.id, 2, round=3, agent="replay")
    assert [(c.round, c.agent) for c in new.candidates(t.id)] == [(None, None), (3, "replay")]
    new.close()


def test_installations(store):
    store.set_installation(5, account="octo", add_repos=["octo/a", "octo/b"])
    store.set_installation(5, remove_repos=["octo/a"], suspended=True)
    inst = store.installation(5)
    assert inst.repos == ["octo/b"] and inst.suspended
    store.set_installation(5, deleted=True)
    assert store.installation(5) is None


def test_restart_keeps_everything(db_url, clock):
    s1 = _make(db_url, clock)
    s1.record_delivery("d", "issues", "labeled", {})
    s1.claim("w", lease_s=5)
    s1.close()
    s2 = Store(db_url, clock=clock)
    clock.t += 6
    assert s2.claim("w2").kind == "event"
    s2.close()


def test_concurrent_claimers_take_one_job_per_lane(store):
    for _ in range(10):
        store.enqueue("x", {}, lane="task:9")
    got = []
    barrier = threading.Barrier(6)

    def go():
        barrier.wait()
        got.append(store.claim(f"w{threading.get_ident()}"))

    threads = [threading.Thread(target=go) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sum(j is not None for j in got) == 1
    assert store.job_counts()["running"] == 1


def test_expired_job_resumes_before_its_lane_moves_on(store, clock):
    first = store.enqueue("x", {}, lane="task:1")
    store.enqueue("x", {}, lane="task:1")
    store.claim("dead", lease_s=1)
    clock.t += 2
    assert store.claim("w").id == first


def test_a_body_is_claimed_once_whatever_its_delivery_id(store, clock):
    assert store.record_delivery("d1", "issues", "labeled", '{"a": 1}') is not None
    assert store.record_delivery("d2", "issues", "labeled", '{"a": 1}') is None  # replay
    assert store.record_delivery("d3", "issue_comment", "created", '{"a": 1}') is None
    assert store.record_deliveries([("d4", "ping", None, '{"b": 1}'),
                                    ("d5", "ping", None, '{"b": 1}')])[1] is None
    assert store.count_deliveries() == 2
    # issue 18: a captured body replayed a year on is still refused (the
    # signature never expires, so neither does its digest)
    clock.t += 365 * 86400.0
    assert store.record_delivery("d6", "issues", "labeled", '{"a": 1}') is None
    assert store.record_delivery("d7", "issues", "labeled", '{"a": 2}') is not None


def test_a_dispatch_is_consumed_once(store):
    store.record_dispatch("n" * 32, repo="a/b", task_id=1, generation=1, kind="run_task",
                          doc={"kind": "run_task"}, base_sha="abc")
    store.set_dispatch_run("n" * 32, 42)
    assert store.dispatch("n" * 32).run_id == 42 and store.dispatch("x") is None
    assert store.consume_dispatch("n" * 32) is True
    assert store.consume_dispatch("n" * 32) is False
    store.release_dispatch("n" * 32)
    assert store.consume_dispatch("n" * 32) is True


def test_live_checks_by_job_task_run_and_check_id(store):
    t = store.start_task("acme/x", 1, labeler="a", installation_id=None)
    a = store.add_live_check(task_id=t.id, generation=1, repo="acme/x", head_sha="a" * 40,
                             check_run_id=11, job_id=5)
    b = store.add_live_check(task_id=t.id, generation=1, repo="acme/x", head_sha="b" * 40,
                             check_run_id=12, job_id=6, n=2)
    assert [c.id for c in store.live_checks(job_id=5)] == [a.id]
    assert [c.id for c in store.live_checks(task_id=t.id)] == [a.id, b.id]
    store.update_live_check(b.id, run_id=77, state="in_progress", progress="round 1/2")
    (c,) = store.live_checks(run_id=77)
    assert c.n == 2 and c.progress == "round 1/2" and c.state == "in_progress"
    store.update_live_check(a.id, state="completed")
    assert [c.id for c in store.live_checks(task_id=t.id)] == [b.id]  # open ones only
    assert [c.id for c in store.live_checks(repo="acme/x", check_run_id=11, open_only=False)] == [a.id]
    store.record_dispatch("n" * 32, repo="acme/x", task_id=t.id, generation=1, kind="run_task",
                          doc={}, base_sha=None)
    assert [d.nonce for d in store.dispatches_of(t.id)] == ["n" * 32]
    store.consume_dispatch("n" * 32)
    assert store.dispatches_of(t.id) == [] and len(store.dispatches_of(t.id, pending=False)) == 1


def test_an_approval_keeps_an_edit_it_did_not_approve(store):
    """Issue 18: approving a text clears the held edit only when it is that text;
    holding an edit equal to the approved text holds nothing (one statement each)."""
    t = store.start_task("acme/x", 1, labeler="a", installation_id=None)
    store.approve_proposal(t.id, "v0", generation=t.generation, state="queued")
    store.hold_edit(t.id, "v2")                       # an edit handled meanwhile
    assert store.approve_proposal(t.id, "v1", generation=t.generation)
    t = store.task(t.id)
    assert (t.proposal, t.edited_proposal) == ("v1", "v2")
    store.approve_proposal(t.id, "v2", generation=t.generation)  # the held one: cleared
    assert (store.task(t.id).proposal, store.task(t.id).edited_proposal) == ("v2", None)
    store.hold_edit(t.id, "v2")
    assert store.task(t.id).edited_proposal is None
    store.hold_edit(t.id, "v3")
    assert store.task(t.id).edited_proposal == "v3"
    assert not store.approve_proposal(t.id, "v4", generation=t.generation + 1)  # superseded


def test_an_older_database_gets_the_new_tables_and_dispatch_columns(db_url, clock):
    """A database from before recorded sequences: no ``steps``, ``leases`` or
    ``redeliveries`` tables, ``dispatches`` without its ingest claim. Opening the store
    makes them; the old dispatch reads back unclaimed and can be claimed."""
    old = _make(db_url, clock)
    old.record_dispatch("n" * 32, repo="o/r", task_id=1, generation=1, kind="run_task",
                        doc={}, base_sha=None, job_id=7)
    with old.engine.begin() as conn:
        for table in ("steps", "leases", "redeliveries"):
            conn.exec_driver_sql(f"DROP TABLE {table}")
        conn.exec_driver_sql("ALTER TABLE dispatches DROP COLUMN ingest_owner")
        conn.exec_driver_sql("ALTER TABLE dispatches DROP COLUMN ingest_until")
    old.close()
    new = Store(db_url, clock=clock)
    d = new.dispatch("n" * 32)
    assert (d.job_id, d.ingest_owner, d.ingest_until) == (7, None, None)
    assert new.claim_ingest("n" * 32, "job:7")
    assert new.record_step("watch:o/r#1@abc", "result", {"x": 1}).data == {"x": 1}
    assert new.take_lease("redeliver", "a", hold_s=10)
    assert new.count_redelivery_ask("g") == 1
    new.close()


def test_steps_are_recorded_once(store):
    assert store.step_done("s", "a") is None
    assert store.record_step("s", "a", {"pr": 5}).data == {"pr": 5}
    assert store.record_step("s", "a", {"pr": 6}).data == {"pr": 5}  # the first one stays
    store.record_step("s", "b", None)
    assert sorted(store.steps("s")) == ["a", "b"] and store.steps("other") == {}


def test_ingest_claim_resumes_for_its_owner_only(store, clock):
    store.record_dispatch("n" * 32, repo="o/r", task_id=1, generation=1, kind="run_task",
                          doc={}, base_sha=None, job_id=7)
    assert store.claim_ingest("n" * 32, "job:1", hold_s=60)
    assert not store.claim_ingest("n" * 32, "job:2", hold_s=60)  # another is applying it
    assert store.claim_ingest("n" * 32, "job:1", hold_s=60)  # its re-run after a crash
    clock.t += 61
    assert store.claim_ingest("n" * 32, "job:2", hold_s=60)  # the hold ran out
    assert store.consume_dispatch("n" * 32)
    assert not store.claim_ingest("n" * 32, "job:2")  # consumed: a replay


def test_a_lease_is_held_by_one_owner_until_it_runs_out(store, clock):
    assert store.take_lease("redeliver", "a", hold_s=10)
    assert not store.take_lease("redeliver", "b", hold_s=10)
    assert store.take_lease("redeliver", "a", hold_s=10)  # renewed
    clock.t += 11
    assert store.take_lease("redeliver", "b", hold_s=10)  # a died: b takes over
    assert not store.take_lease("redeliver", "a", hold_s=10)
    store.drop_lease("redeliver", "b")
    assert store.take_lease("redeliver", "a", hold_s=10)


def test_redelivery_asks_are_counted_and_given_up_once(store):
    assert [store.count_redelivery_ask("g") for _ in range(3)] == [1, 2, 3]
    assert store.give_up_redelivery("g") and not store.give_up_redelivery("g")
    assert store.redelivery_counts() == (3, 1)
