"""Typed job payloads: one model per job kind, registered with its job in
``bot.tasks.JOBS``, validated at enqueue and at claim; rows written by the bot
before the payloads were typed still load."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from bot.context import Context
from bot.payloads import (
    PAYLOADS,
    EventPayload,
    PayloadError,
    PublishPayload,
    RebaselinePayload,
    ReverifyPayload,
    RunTaskPayload,
)
from bot.service import job_handler
from bot.store import Base, Store
from bot.tasks import JOBS, claimed
from bot.tasks import Job as RegisteredJob
from bot.vocab import JobKind
from bot.worker import JobRun, Permanent, Worker

# The payloads exactly as the bot wrote them before they were typed (one per
# enqueue site, copied from that code), and what each must load as.
TODAYS_ROWS = [
    # store.record_deliveries
    (JobKind.EVENT, {"delivery_id": "d-1"}, EventPayload(delivery_id="d-1")),
    # handlers/labeled.start, handlers/rerequested._resume, commands resume and budget,
    # tasks/rebaseline.apply_rebaseline
    (JobKind.RUN_TASK, {"task_id": 3, "generation": 2},
     RunTaskPayload(task_id=3, generation=2)),
    # tasks/run._enqueue_publish
    (JobKind.PUBLISH, {"task_id": 3, "generation": 2, "n": 4},
     PublishPayload(task_id=3, generation=2, n=4)),
    # handlers/merged
    (JobKind.REBASELINE, {"task_id": 3, "ref": "a" * 40, "merged_pr": 17},
     RebaselinePayload(task_id=3, ref="a" * 40, merged_pr=17)),
    # handlers/commands rebaseline (``requested_by`` was never read)
    (JobKind.REBASELINE, {"task_id": 3, "ref": None, "merged_pr": None, "requested_by": "ann"},
     RebaselinePayload(task_id=3)),
    # handlers/rerequested, handlers/pushed, commands rerun (``rebase`` and ``reason`` were
    # never read)
    (JobKind.REVERIFY, {"task_id": 3, "n": 1, "rebase": False, "reason": "re-run requested",
                        "requested_by": "ann"},
     ReverifyPayload(task_id=3, n=1, requested_by="ann")),
    (JobKind.REVERIFY, {"task_id": 3, "n": 2, "rebase": False, "reason": "push by bob",
                        "requested_by": "bob"},
     ReverifyPayload(task_id=3, n=2, requested_by="bob")),
    (JobKind.REVERIFY, {"task_id": 3, "n": 5, "rebase": False, "reason": "rerun",
                        "requested_by": "cy"},
     ReverifyPayload(task_id=3, n=5, requested_by="cy")),
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    url = (f"sqlite:///{tmp_path}/bot.db" if request.param == "sqlite"
           else os.environ["RSI_TEST_POSTGRES_URL"])
    s = Store(url, create=False)
    Base.metadata.drop_all(s.engine)
    Base.metadata.create_all(s.engine)
    yield s
    s.close()


def test_every_job_kind_is_registered_with_its_payload_model():
    assert set(JOBS) == set(JobKind)
    assert {job.payload for job in JOBS.values()} == set(PAYLOADS)
    for kind, job in JOBS.items():
        assert job.kind == kind and job.payload.kind == kind
    with pytest.raises(TypeError, match="RunTaskPayload"):
        RegisteredJob(JobKind.PUBLISH, RunTaskPayload, JOBS[JobKind.PUBLISH].run)


def test_rows_written_before_typing_are_claimed_and_load(store):
    ids = [store.enqueue(kind, raw) for kind, raw, _ in TODAYS_ROWS]
    got = {}
    while (job := store.claim("w")) is not None:
        run = JobRun(job)
        registered = claimed(run)
        assert registered is JOBS[job.kind]
        got[job.id] = run.args
        store.finish(job, None)
    assert got == {i: want for i, (_, _, want) in zip(ids, TODAYS_ROWS, strict=True)}


def test_a_typed_enqueue_stores_only_the_fields_a_job_reads(store):
    jid = store.enqueue_job(ReverifyPayload(task_id=3, n=1, requested_by="ann"), key="k")
    assert store.enqueue_job(ReverifyPayload(task_id=3, n=1), key="k") is None  # keys still hold
    [row] = store.jobs(kind=JobKind.REVERIFY)
    assert row.id == jid
    assert row.payload == {"task_id": 3, "n": 1, "generation": None, "requested_by": "ann"}


def test_a_bad_payload_is_refused_at_enqueue_and_nothing_is_stored(store):
    with pytest.raises(ValidationError):
        RunTaskPayload(task_id="3", generation=1)  # strict: no "3" for 3
    with pytest.raises(ValidationError):
        ReverifyPayload(task_id=3, n=1, reason="rerun")  # a field no job reads
    forged = RunTaskPayload.model_construct(task_id=None, generation=1)
    with pytest.raises(PayloadError, match="task_id"):
        store.enqueue_job(forged)
    assert store.jobs() == []


@pytest.mark.parametrize("raw, problem", [
    ({"task_id": "3", "generation": 1}, "task_id"),
    ({"task_id": 3}, "generation"),
    ({"task_id": 3, "generation": 1, "rebase": False}, "rebase"),  # legacy only for reverify
    ({"task_id": True, "generation": 1}, "task_id"),
    (["task_id", 3], "not a JSON object"),
])
def test_a_bad_payload_at_claim_fails_that_job_only(store, bot_settings, raw, problem):
    settings = bot_settings()
    ctx = Context(settings=settings, store=store, gh=None, harness=None)  # type: ignore[arg-type]
    bad = store.enqueue(JobKind.RUN_TASK, raw)
    store.record_delivery("d-ping", "ping", None, {"zen": "hi"})
    failed: list[str] = []
    worker = Worker(store, job_handler(ctx), owner="t", on_failed=lambda j, m: failed.append(m))
    assert worker.run_once() and worker.run_once()
    assert not worker.run_once()
    jobs = {j.id: j for j in store.jobs()}
    assert jobs[bad].state == "failed" and jobs[bad].attempts == 1  # at once, never retried
    assert "RunTaskPayload" in jobs[bad].last_error and problem in jobs[bad].last_error
    assert len(failed) == 1
    [event] = [j for j in jobs.values() if j.kind == JobKind.EVENT]
    assert event.state == "done" and event.result == "ignored: ping"


def test_an_unknown_kind_at_claim_fails_that_job(store):
    store.enqueue("watch_the_sky", {"task_id": 1})
    run = JobRun(store.claim("w"))
    with pytest.raises(Permanent, match="unknown job kind 'watch_the_sky'"):
        claimed(run)


def test_a_job_reads_its_payload_typed():
    run = JobRun(_claimed_job(JobKind.PUBLISH, {"task_id": 3, "generation": 2, "n": 4}))
    assert run.args_as(PublishPayload) == PublishPayload(task_id=3, generation=2, n=4)
    bad = JobRun(_claimed_job(JobKind.PUBLISH, {"task_id": 3, "generation": 2}))
    with pytest.raises(Permanent, match="n: Field required"):
        bad.args_as(PublishPayload)


def _claimed_job(kind: str, payload: dict):
    from bot.store import ClaimedJob

    return ClaimedJob(1, kind, payload, 1, 8, None, "w")



def test_a_runner_refuses_a_job_whose_payload_does_not_fit(tmp_path):
    from bot.executors.actions import JOB_SCHEMA
    from bot.executors.remote import execute

    job = {"schema": JOB_SCHEMA, "kind": "reverify", "payload": {"task_id": 1}, "repo": "o/r",
           "issue": 1, "generation": 1, "task_id": "issue-1"}
    result = execute(job, repo=tmp_path, out=tmp_path / "out", state_dir=tmp_path / "state")
    assert "ReverifyPayload" in result["error"] and "n: Field required" in result["error"]
    assert (tmp_path / "out" / "result.json").exists()  # reported, never raised
