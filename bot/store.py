"""Durable state: deliveries, the job queue, tasks, candidates, sticky comments.

SQLAlchemy 2 over SQLite (default) or PostgreSQL (by URL). Everything the bot
must not lose lives here, so a bot killed at any point resumes on restart.

Job states::

          enqueue                claim (lease)                 finish
    ----> queued ---------------------------------> running ----------> done
            ^  ^                                      |  |
            |  '--- retry: next_run_at = now+backoff -'  '--- fail (attempts spent) --> failed
            '------ lease expired (holder died): claimable again, attempts+1

* A delivery is claimed by inserting its id (``ON CONFLICT DO NOTHING``); the
  event job is inserted in the same transaction, so a delivery is stored and
  queued exactly once. The SHA-256 of its signed body is claimed the same way
  and kept for good (about 220 bytes per delivery with its indexes on SQLite,
  220 MB a million deliveries; GitHub's signature never expires, so neither may
  the record): a captured body replayed under a
  fresh delivery id, however late, is a duplicate too.
* A job dispatched to GitHub Actions is recorded with a one-time nonce
  (``Dispatch``); only a result carrying a recorded, unconsumed nonce is
  ingested, once.
* A job is claimed by one ``UPDATE ... WHERE id = (SELECT ... LIMIT 1 [FOR
  UPDATE SKIP LOCKED]) RETURNING``; a running job holds a lease that its
  worker renews (heartbeat). A dead worker's lease runs out and the job is
  claimed again, which is how a restarted bot resumes running work.
* A multi-step effect is a recorded sequence (``Step``, one row per step done,
  keyed by the saga): a job run again after a crash resumes at the first step
  not recorded. ``Lease`` holds a per-service lease (one redelivery sweep
  whatever the number of processes); ``Redelivery`` counts the asks per guid.
* Jobs sharing a ``lane`` (one per task) never run at the same time.
* ``key`` makes an enqueue idempotent: a retried handler does not queue twice.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, cast

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    case,
    create_engine,
    delete,
    event,
    func,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import CursorResult, Result
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, aliased, mapped_column, sessionmaker
from sqlalchemy.pool import StaticPool

from bot.payloads import EventPayload, JobPayload
from bot.vocab import CandidateState, JobKind, TaskState
from verifier.verdict import Verdict

JOB_STATES = ("queued", "running", "done", "failed")



def _rowcount(result: Result[Any]) -> int:
    """Rows an UPDATE or DELETE matched (its result is a cursor result)."""
    return cast(CursorResult[Any], result).rowcount

class Base(DeclarativeBase):
    pass


class Delivery(Base):
    __tablename__ = "deliveries"
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    event: Mapped[str] = mapped_column(String(100))
    action: Mapped[str | None] = mapped_column(String(100), nullable=True)
    received_at: Mapped[float] = mapped_column(Float)
    body: Mapped[str] = mapped_column(Text)  # the payload's JSON text, as GitHub sent it

    @property
    def payload(self) -> dict:
        return json.loads(self.body)


class BodyDigest(Base):
    """SHA-256 of a processed webhook body (the part the signature covers)."""

    __tablename__ = "body_digests"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(200))
    received_at: Mapped[float] = mapped_column(Float, index=True)


class Dispatch(Base):
    """A job the bot dispatched to the ``actions`` executor, keyed by its nonce.

    ``base_sha``: the commit every branch in the result must descend from (the
    task's Bk when dispatched). ``consumed_at``: set once, when its result is
    ingested; a replayed result finds it consumed."""

    __tablename__ = "dispatches"
    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    repo: Mapped[str] = mapped_column(String(300))
    task_id: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(50))
    doc: Mapped[Any] = mapped_column(JSON)
    base_sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    consumed_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    job_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    """The job dispatched (a re-run of that job reuses this nonce, never makes a second)."""
    ingest_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    """Who is applying its result now (the ingesting job); a re-run of that same job
    resumes the application, anyone else waits until ``ingest_until``."""
    ingest_until: Mapped[float | None] = mapped_column(Float, nullable=True)


class Job(Base):
    __tablename__ = "jobs"
    # at most one running job per lane, enforced by the database (concurrent
    # claimers on PostgreSQL cannot both take a job of the same lane)
    __table_args__ = (Index("uq_jobs_running_lane", "lane", unique=True,
                            postgresql_where=text("state = 'running' AND lane IS NOT NULL"),
                            sqlite_where=text("state = 'running' AND lane IS NOT NULL")),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(50))
    payload: Mapped[Any] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(20), index=True, default="queued")
    lane: Mapped[str | None] = mapped_column(String(300), nullable=True, index=True)
    key: Mapped[str | None] = mapped_column(String(300), nullable=True, unique=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=8)
    next_run_at: Mapped[float] = mapped_column(Float, index=True)
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    result: Mapped[Any] = mapped_column(JSON, nullable=True)


class Task(Base):
    """One issue's task. ``generation`` grows with each new trigger (a newer
    label supersedes: jobs of older generations stop and do nothing)."""

    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("repo", "issue"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(300))
    issue: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(30), default=TaskState.QUEUED)  # a TaskState
    labeler: Mapped[str | None] = mapped_column(String(200), nullable=True)
    trigger: Mapped[str | None] = mapped_column(String(200), nullable=True)
    installation_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    budget: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stop: Mapped[bool] = mapped_column(Boolean, default=False)
    b0_sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    bk_sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    proposal: Mapped[str | None] = mapped_column(Text, nullable=True)
    """The proposal as the writer saw it when labeling (never re-read)."""
    edited_proposal: Mapped[str | None] = mapped_column(Text, nullable=True)
    """The issue body after an edit that no writer has approved yet."""
    rounds_done: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class Candidate(Base):
    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("task_id", "generation", "n"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"))
    generation: Mapped[int] = mapped_column(Integer, default=1)
    n: Mapped[int] = mapped_column(Integer)
    branch: Mapped[str | None] = mapped_column(String(300), nullable=True)
    sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    decision: Mapped[str] = mapped_column(String(20))
    verdict: Mapped[Any] = mapped_column(JSON, nullable=True)
    hypothesis: Mapped[str | None] = mapped_column(Text, nullable=True)
    state: Mapped[str] = mapped_column(String(20), default=CandidateState.NONE)  # a CandidateState
    pr_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    round: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """The loop's round that made it (None for rows stored before it was kept)."""
    agent: Mapped[str | None] = mapped_column(String(200), nullable=True)
    updated_at: Mapped[float] = mapped_column(Float)

    @property
    def verdict_model(self) -> Verdict | None:
        """The stored verdict, read as the verifier's ``Verdict`` (None when none is
        stored; ValueError when what is stored is not one)."""
        return Verdict.model_validate(self.verdict) if self.verdict else None


def stored_verdict(verdict: Verdict | None) -> dict[str, Any] | None:
    """``verdict`` as ``Candidate.verdict`` stores it (its JSON, by alias)."""
    return verdict.model_dump(mode="json", by_alias=True) if verdict is not None else None


class LiveCheck(Base):
    """A ``rsi/verifier`` check run kept live for one heavy job: created
    ``queued`` when the job is queued or dispatched, ``in_progress`` with
    progress text while it runs, ``completed`` with the verdict (or cancelled).
    ``n`` is the candidate it verifies (None: the task's run, on its base commit);
    ``run_id`` the Actions run that carries the job, when dispatched."""

    __tablename__ = "live_checks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    task_id: Mapped[int] = mapped_column(Integer, index=True)
    generation: Mapped[int] = mapped_column(Integer, default=1)
    n: Mapped[int | None] = mapped_column(Integer, nullable=True)
    repo: Mapped[str] = mapped_column(String(300))
    head_sha: Mapped[str] = mapped_column(String(64))
    check_run_id: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20), default="queued")
    progress: Mapped[str | None] = mapped_column(Text, nullable=True)
    details_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class StickyComment(Base):
    __tablename__ = "sticky_comments"
    repo: Mapped[str] = mapped_column(String(300), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    marker: Mapped[str] = mapped_column(String(200), primary_key=True)
    comment_id: Mapped[int] = mapped_column(Integer)


class Step(Base):
    """One step of a recorded sequence (a saga: the watch's comment, revert PR,
    label, review request; a rebaseline's result), done once: ``data`` is what the
    step made (a PR number, the measured result), read back by a re-run, which
    resumes at the first step not recorded."""

    __tablename__ = "steps"
    saga: Mapped[str] = mapped_column(String(300), primary_key=True)
    step: Mapped[str] = mapped_column(String(100), primary_key=True)
    data: Mapped[Any] = mapped_column(JSON, nullable=True)
    done_at: Mapped[float] = mapped_column(Float)


class Lease(Base):
    """A named lease held by one process of the service (e.g. ``redeliver``: one
    redelivery sweep per service, whatever the number of web processes)."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    until: Mapped[float] = mapped_column(Float)


class Redelivery(Base):
    """How often the bot asked GitHub to redeliver a delivery (``redeliver.py``);
    ``gave_up_at``: the asks were spent and it is not asked for again."""

    __tablename__ = "redeliveries"
    guid: Mapped[str] = mapped_column(String(200), primary_key=True)
    asks: Mapped[int] = mapped_column(Integer, default=0)
    last_asked_at: Mapped[float] = mapped_column(Float)
    gave_up_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)


class Installation(Base):
    __tablename__ = "installations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    account: Mapped[str] = mapped_column(String(200))
    suspended: Mapped[bool] = mapped_column(Boolean, default=False)
    repos: Mapped[Any] = mapped_column(JSON, default=list)
    updated_at: Mapped[float] = mapped_column(Float)


@dataclass(frozen=True)
class ClaimedJob:
    id: int
    kind: str
    payload: dict
    attempts: int
    max_attempts: int
    lane: str | None
    owner: str


class Store:
    """All database access of the bot. Thread-safe; one per process."""

    def __init__(self, url: str, *, clock=time.time, create: bool = True, max_attempts: int = 8):
        self.url = url
        self.max_attempts = max_attempts  # default for new jobs
        self.clock = clock
        self.sqlite = url.startswith("sqlite")
        kw: dict[str, Any] = {"future": True}
        if self.sqlite:
            kw["connect_args"] = {"check_same_thread": False, "timeout": 30}
            if ":memory:" in url or url in ("sqlite://", "sqlite:///"):
                kw["poolclass"] = StaticPool
        else:
            kw["pool_pre_ping"] = True
            kw["pool_size"] = 10
            kw["max_overflow"] = 20
        self.engine = create_engine(url, **kw)
        if self.sqlite:
            self._sqlite_pragmas()
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        self._ins_delivery: Any = None  # the dialect's INSERT .. ON CONFLICT DO NOTHING RETURNING id
        # One writer at a time inside this process (SQLite allows one anyway;
        # waiting on a lock is cheaper than SQLite's busy-retry loop).
        self._wlock = threading.Lock() if self.sqlite else None
        if create:
            Base.metadata.create_all(self.engine)
            self._add_new_columns()

    def _add_new_columns(self) -> None:
        """Add the nullable columns a newer version declares to tables an older
        version created (``create_all`` never alters an existing table)."""
        quote = self.engine.dialect.identifier_preparer.quote
        exists = "" if self.sqlite else "IF NOT EXISTS "  # concurrent starts on PostgreSQL
        with self.engine.begin() as conn:
            have = inspect(conn)
            for table in Base.metadata.sorted_tables:
                names = {c["name"] for c in have.get_columns(table.name)}
                for col in table.columns:
                    if col.name in names:
                        continue
                    if not col.nullable:
                        raise RuntimeError(f"{table.name}.{col.name} is missing and not nullable:"
                                           " this database needs a migration by hand")
                    conn.exec_driver_sql(
                        f"ALTER TABLE {quote(table.name)} ADD COLUMN {exists}{quote(col.name)} "
                        f"{col.type.compile(self.engine.dialect)}")

    def _sqlite_pragmas(self) -> None:
        @event.listens_for(self.engine, "connect")
        def _connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(self.engine, "begin")
        def _begin(conn):
            # IMMEDIATE: take the write lock up front, so two processes never
            # deadlock upgrading read locks (they wait on busy_timeout instead).
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    def close(self) -> None:
        self.engine.dispose()

    # -- sessions -------------------------------------------------------------
    class _Tx:
        def __init__(self, store: "Store"):
            self.store = store

        def __enter__(self) -> Session:
            if self.store._wlock:
                self.store._wlock.acquire()
            self.session = self.store._session()
            self.session.begin()
            return self.session

        def __exit__(self, exc_type, exc, tb):
            try:
                if exc_type is None:
                    self.session.commit()
                else:
                    self.session.rollback()
            finally:
                self.session.close()
                if self.store._wlock:
                    self.store._wlock.release()

    def tx(self) -> "_Tx":
        return Store._Tx(self)

    def _insert(self, model):
        if self.sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        return insert(model)

    # -- deliveries -----------------------------------------------------------
    def record_delivery(self, delivery_id: str, event_name: str, action: str | None,
                        payload: dict | str) -> int | None:
        """Claim a delivery and queue its event job, atomically.

        Returns the job id, or None when this delivery id was seen before.
        ``payload`` may be the JSON text as received (stored as is).
        """
        return self.record_deliveries([(delivery_id, event_name, action, payload)])[0]

    def record_deliveries(self, items: list[tuple[str, str, str | None, dict | str]]
                          ) -> list[int | None]:
        """:meth:`record_delivery` for many deliveries in one transaction (group
        commit: the web process batches concurrent deliveries). A body already
        seen (its SHA-256, kept for good) is a duplicate whatever its delivery id."""
        if self._ins_delivery is None:
            d = Delivery.__table__
            self._ins_delivery = (self._insert(d).on_conflict_do_nothing(index_elements=["id"])
                                  .returning(d.c.id))
        now = self.clock()
        rows, first, digests = [], set(), {}
        for delivery_id, event_name, action, payload in items:
            body = payload if isinstance(payload, str) else json.dumps(payload)
            digest = hashlib.sha256(body.encode()).hexdigest()
            if delivery_id in first or digest in digests:
                continue  # the same id or body twice in one batch: the first one claims it
            first.add(delivery_id)
            digests[digest] = delivery_id
            rows.append({"id": delivery_id, "event": event_name, "action": action,
                         "received_at": now, "body": body})
        with self.tx() as s:
            conn = s.connection()
            fresh = self._claim_digests(conn, digests, now)
            rows = [r for r in rows if r["id"] in fresh]
            if not rows:
                return [None] * len(items)
            claimed = set(conn.execute(self._ins_delivery, rows).scalars()) if len(rows) > 1 \
                else {x for x in [conn.execute(self._ins_delivery, rows[0]).scalar()] if x}
            if not claimed:
                return [None] * len(items)
            jobs = [{"kind": JobKind.EVENT, "payload": EventPayload(delivery_id=d).dump(),
                     "state": "queued",
                     "lane": None, "key": f"event:{d}", "attempts": 0, "max_attempts": self.max_attempts,
                     "next_run_at": now, "lease_owner": None, "lease_until": None,
                     "created_at": now, "updated_at": now, "last_error": None, "result": None}
                    for d in (r["id"] for r in rows) if d in claimed]
            conn.execute(cast(Table, Job.__table__).insert(), jobs)
            ids = dict(conn.execute(select(Job.key, Job.id).where(
                Job.key.in_([j["key"] for j in jobs]))).all())
        out: list[int | None] = []
        seen: set[str] = set()
        for delivery_id, *_ in items:
            job_id = ids.get(f"event:{delivery_id}") if delivery_id not in seen else None
            seen.add(delivery_id)
            out.append(job_id if delivery_id in claimed else None)
        return out

    def _claim_digests(self, conn, digests: dict[str, str], now: float) -> set[str]:
        """Insert the bodies' digests; the delivery ids whose digest was new."""
        if not digests:
            return set()
        t = BodyDigest.__table__
        ins = self._insert(BodyDigest).on_conflict_do_nothing(
            index_elements=["digest"]).returning(t.c.digest)
        got: set[str] = set()
        for d, delivery_id in digests.items():
            row = conn.execute(ins, {"digest": d, "delivery_id": delivery_id,
                                     "received_at": now}).scalar()
            if row:
                got.add(delivery_id)
        return got

    def delivery(self, delivery_id: str) -> Delivery | None:
        with self.tx() as s:
            return s.get(Delivery, delivery_id)

    def count_deliveries(self) -> int:
        with self.tx() as s:
            return s.scalar(select(func.count()).select_from(Delivery)) or 0

    # -- jobs -----------------------------------------------------------------
    def enqueue(self, kind: str, payload: dict, *, lane: str | None = None,
                key: str | None = None, delay_s: float = 0.0,
                max_attempts: int | None = None) -> int | None:
        """Queue a job; with ``key``, a second enqueue of the same key is a no-op (None)."""
        now = self.clock()
        values = dict(kind=kind, payload=payload, state="queued", lane=lane, key=key,
                      attempts=0, max_attempts=max_attempts or self.max_attempts,
                      next_run_at=now + delay_s,
                      created_at=now, updated_at=now)
        with self.tx() as s:
            if key is None:
                job = Job(**values)
                s.add(job)
                s.flush()
                return job.id
            ins = self._insert(Job).values(**values).on_conflict_do_nothing(
                index_elements=["key"]).returning(Job.id)
            return s.execute(ins).scalar()

    def enqueue_job(self, payload: JobPayload, *, lane: str | None = None,
                    key: str | None = None, delay_s: float = 0.0,
                    max_attempts: int | None = None) -> int | None:
        """Queue the job of ``payload``'s kind (:mod:`bot.payloads`), validated on
        the way in; as :meth:`enqueue` otherwise."""
        return self.enqueue(payload.kind, payload.dump(), lane=lane, key=key, delay_s=delay_s,
                            max_attempts=max_attempts)

    def claim(self, owner: str, *, lease_s: float = 60.0,
              kinds: Iterable[str] | None = None) -> ClaimedJob | None:
        """Take the next runnable job (queued and due, or running with an expired lease)."""
        tries = 0
        while True:
            now = self.clock()
            claimable = or_(
                and_(Job.state == "queued", Job.next_run_at <= now),
                and_(Job.state == "running", Job.lease_until <= now),
            )
            other = aliased(Job)
            lane_busy = select(other.id).where(
                other.lane == Job.lane, other.state == "running", other.id != Job.id).exists()
            pick = (select(Job.id).where(claimable)
                    .where(or_(Job.lane.is_(None), ~lane_busy)))
            if kinds is not None:
                pick = pick.where(Job.kind.in_(list(kinds)))
            pick = pick.order_by(Job.next_run_at, Job.id).limit(1)
            if not self.sqlite:
                pick = pick.with_for_update(skip_locked=True)
            stmt = (
                update(Job)
                .where(Job.id == pick.scalar_subquery())
                .where(claimable)
                .values(state="running", lease_owner=owner, lease_until=now + lease_s,
                        attempts=Job.attempts + 1, updated_at=now)
                .returning(Job.id, Job.kind, Job.payload, Job.attempts, Job.max_attempts,
                           Job.lane)
                .execution_options(synchronize_session=False)
            )
            try:
                with self.tx() as s:
                    row = s.execute(stmt).first()
            except IntegrityError:
                # another worker took a job of the same lane at the same moment
                if tries > 5:
                    return None
                tries += 1
                continue
            if row is None:
                return None
            with self.tx() as s:
                # the RETURNING columns above, in order
                job_id, kind, payload, attempts, max_attempts, lane = cast(
                    tuple[int, str, dict[str, Any] | None, int, int, str | None], tuple(row))
                if attempts > max_attempts:
                    # Crashed holders spent its attempts: give up on it loudly.
                    s.execute(update(Job).where(Job.id == job_id).values(
                        state="failed", lease_owner=None, lease_until=None, updated_at=now,
                        last_error=(f"gave up after {max_attempts} attempts "
                                    "(its workers kept dying)")))
                    continue
            return ClaimedJob(job_id, kind, payload or {}, attempts, max_attempts, lane, owner)

    def heartbeat(self, job: ClaimedJob, *, lease_s: float = 60.0) -> bool:
        """Renew a lease; False when the job is no longer ours (it was re-claimed)."""
        now = self.clock()
        with self.tx() as s:
            r = s.execute(update(Job).where(
                Job.id == job.id, Job.lease_owner == job.owner, Job.state == "running",
            ).values(lease_until=now + lease_s, updated_at=now))
            return _rowcount(r) == 1

    def finish(self, job: ClaimedJob, result: Any = None) -> bool:
        now = self.clock()
        with self.tx() as s:
            r = s.execute(update(Job).where(
                Job.id == job.id, Job.lease_owner == job.owner, Job.state == "running",
            ).values(state="done", result=result, lease_owner=None, lease_until=None,
                     updated_at=now))
            return _rowcount(r) == 1

    def fail(self, job: ClaimedJob, error: str, *, retry: bool = True,
             backoff_base_s: float = 2.0, backoff_max_s: float = 600.0) -> str:
        """Record a failure: back to ``queued`` after a backoff, or ``failed``. Returns the state."""
        now = self.clock()
        final = not retry or job.attempts >= job.max_attempts
        delay = min(backoff_base_s * 2 ** max(job.attempts - 1, 0), backoff_max_s)
        values: dict[str, Any] = dict(lease_owner=None, lease_until=None, updated_at=now,
                                      last_error=error[-4000:])
        if final:
            values["state"] = "failed"
        else:
            values.update(state="queued", next_run_at=now + delay)
        with self.tx() as s:
            s.execute(update(Job).where(
                Job.id == job.id, Job.lease_owner == job.owner, Job.state == "running",
            ).values(**values))
        return values["state"]

    def job(self, job_id: int) -> Job | None:
        with self.tx() as s:
            return s.get(Job, job_id)

    def jobs(self, *, kind: str | None = None, state: str | None = None) -> list[Job]:
        with self.tx() as s:
            q = select(Job).order_by(Job.id)
            if kind:
                q = q.where(Job.kind == kind)
            if state:
                q = q.where(Job.state == state)
            return list(s.scalars(q))

    def job_counts(self) -> dict[str, int]:
        with self.tx() as s:
            rows = s.execute(select(Job.state, func.count()).group_by(Job.state)).all()
        counts = {st: 0 for st in JOB_STATES}
        counts.update({st: n for st, n in rows})
        return counts

    def oldest_queued_age(self) -> float:
        """Seconds the oldest due job has been waiting (0 when none)."""
        now = self.clock()
        with self.tx() as s:
            oldest = s.scalar(select(func.min(Job.next_run_at)).where(
                Job.state == "queued", Job.next_run_at <= now))
        return max(0.0, now - oldest) if oldest is not None else 0.0

    # -- tasks ----------------------------------------------------------------
    def start_task(self, repo: str, issue: int, *, labeler: str | None,
                   installation_id: int | None, trigger: str | None = None) -> Task:
        """Create the issue's task, or supersede the current one (generation + 1).

        ``trigger`` (the delivery id) makes a retried handler idempotent: the same
        trigger returns the same generation."""
        now = self.clock()
        with self.tx() as s:
            task = s.scalar(select(Task).where(Task.repo == repo, Task.issue == issue))
            if task is None:
                task = Task(repo=repo, issue=issue, generation=1, state=TaskState.QUEUED,
                            labeler=labeler, installation_id=installation_id, stop=False,
                            rounds_done=0, trigger=trigger, created_at=now, updated_at=now)
                s.add(task)
            elif trigger is not None and task.trigger == trigger:
                pass
            else:
                task.trigger = trigger
                task.generation += 1
                task.state = TaskState.QUEUED
                task.labeler = labeler
                task.installation_id = installation_id or task.installation_id
                task.stop = False
                task.rounds_done = 0
                task.updated_at = now
            s.flush()
            return task

    def task(self, task_id: int) -> Task | None:
        with self.tx() as s:
            return s.get(Task, task_id)

    def existing_task(self, task_id: int) -> Task:
        """The task a job holds the id of (tasks are never deleted); ``LookupError``
        when there is none."""
        task = self.task(task_id)
        if task is None:
            raise LookupError(f"task {task_id} is not in the store")
        return task

    def find_task(self, repo: str, issue: int) -> Task | None:
        with self.tx() as s:
            return s.scalar(select(Task).where(Task.repo == repo, Task.issue == issue))

    def update_task(self, task_id: int, *, generation: int | None = None, **fields) -> bool:
        """Update a task; with ``generation``, only while that generation is current."""
        fields["updated_at"] = self.clock()
        with self.tx() as s:
            q = update(Task).where(Task.id == task_id)
            if generation is not None:
                q = q.where(Task.generation == generation)
            return _rowcount(s.execute(q.values(**fields))) == 1

    def approve_proposal(self, task_id: int, body: str, *, generation: int | None = None,
                         **fields) -> bool:
        """Make ``body`` the proposal that runs (with ``fields``), in one statement:
        a held edit stays held unless it is ``body`` (an edit made while this
        approval was on its way is never dropped nor run)."""
        return self.update_task(task_id, generation=generation, proposal=body,
                                edited_proposal=case((Task.edited_proposal == body, None),
                                                     else_=Task.edited_proposal), **fields)

    def hold_edit(self, task_id: int, body: str) -> None:
        """Hold ``body`` as the issue's unapproved edit, in one statement: none when
        it is the proposal that runs."""
        self.update_task(task_id, edited_proposal=case(
            (func.coalesce(Task.proposal, "") == body, None), else_=body))

    def tasks(self) -> list[Task]:
        with self.tx() as s:
            return list(s.scalars(select(Task).order_by(Task.id)))

    # -- candidates -----------------------------------------------------------
    def upsert_candidate(self, task_id: int, n: int, *, generation: int = 1,
                         **fields) -> Candidate:
        now = self.clock()
        with self.tx() as s:
            c = s.scalar(select(Candidate).where(Candidate.task_id == task_id,
                                                 Candidate.generation == generation,
                                                 Candidate.n == n))
            if c is None:
                fields.setdefault("decision", "error")
                c = Candidate(task_id=task_id, generation=generation, n=n, updated_at=now,
                              **fields)
                s.add(c)
            else:
                for k, v in fields.items():
                    setattr(c, k, v)
                c.updated_at = now
            s.flush()
            return c

    def candidates(self, task_id: int, *, state: str | None = None,
                   generation: int | None = None) -> list[Candidate]:
        with self.tx() as s:
            q = select(Candidate).where(Candidate.task_id == task_id).order_by(
                Candidate.generation, Candidate.n)
            if state:
                q = q.where(Candidate.state == state)
            if generation is not None:
                q = q.where(Candidate.generation == generation)
            return list(s.scalars(q))

    def candidate_by_pr(self, repo: str, pr_number: int) -> tuple[Task, Candidate] | None:
        with self.tx() as s:
            row = s.execute(
                select(Task, Candidate).join(Candidate, Candidate.task_id == Task.id)
                .where(Task.repo == repo, Candidate.pr_number == pr_number)).first()
            return (row[0], row[1]) if row else None

    def candidate_by_branch(self, repo: str, branch: str) -> tuple[Task, Candidate] | None:
        with self.tx() as s:
            row = s.execute(
                select(Task, Candidate).join(Candidate, Candidate.task_id == Task.id)
                .where(Task.repo == repo, Candidate.branch == branch)).first()
            return (row[0], row[1]) if row else None

    def candidate_by_sha(self, repo: str, sha: str) -> tuple[Task, Candidate] | None:
        """The candidate whose head is ``sha`` (the newest, if several)."""
        if not sha:
            return None
        with self.tx() as s:
            row = s.execute(
                select(Task, Candidate).join(Candidate, Candidate.task_id == Task.id)
                .where(Task.repo == repo, Candidate.sha == sha)
                .order_by(Candidate.id.desc())).first()
            return (row[0], row[1]) if row else None

    def verdict_counts(self) -> dict[str, int]:
        with self.tx() as s:
            rows = s.execute(select(Candidate.decision, func.count())
                             .group_by(Candidate.decision)).all()
        return {d: n for d, n in rows}

    # -- sticky comments ------------------------------------------------------
    def sticky(self, repo: str, number: int, marker: str) -> int | None:
        with self.tx() as s:
            row = s.get(StickyComment, (repo, number, marker))
            return row.comment_id if row else None

    def set_sticky(self, repo: str, number: int, marker: str, comment_id: int) -> None:
        with self.tx() as s:
            row = s.get(StickyComment, (repo, number, marker))
            if row is None:
                s.add(StickyComment(repo=repo, number=number, marker=marker,
                                    comment_id=comment_id))
            else:
                row.comment_id = comment_id

    # -- live check runs ------------------------------------------------------
    def add_live_check(self, *, task_id: int, generation: int, repo: str, head_sha: str,
                       check_run_id: int, job_id: int | None = None, n: int | None = None,
                       state: str = "queued", details_url: str | None = None) -> LiveCheck:
        now = self.clock()
        with self.tx() as s:
            c = LiveCheck(task_id=task_id, generation=generation, repo=repo, head_sha=head_sha,
                          check_run_id=check_run_id, job_id=job_id, n=n, state=state,
                          details_url=details_url, created_at=now, updated_at=now)
            s.add(c)
            s.flush()
            return c

    def live_checks(self, *, job_id: int | None = None, task_id: int | None = None,
                    run_id: int | None = None, check_run_id: int | None = None,
                    repo: str | None = None, open_only: bool = True) -> list[LiveCheck]:
        """Live checks of a job, a task or an Actions run, oldest first (only
        unfinished ones by default)."""
        with self.tx() as s:
            q = select(LiveCheck).order_by(LiveCheck.id)
            if run_id is not None:
                q = q.where(LiveCheck.run_id == run_id)
            if check_run_id is not None:
                q = q.where(LiveCheck.check_run_id == check_run_id)
            if repo is not None:
                q = q.where(LiveCheck.repo == repo)
            if job_id is not None:
                q = q.where(LiveCheck.job_id == job_id)
            if task_id is not None:
                q = q.where(LiveCheck.task_id == task_id)
            if open_only:
                q = q.where(LiveCheck.state != "completed")
            return list(s.scalars(q))

    def update_live_check(self, check_id: int, **fields) -> None:
        fields["updated_at"] = self.clock()
        with self.tx() as s:
            s.execute(update(LiveCheck).where(LiveCheck.id == check_id).values(**fields))

    def dispatches_of(self, task_id: int, *, pending: bool = True) -> list[Dispatch]:
        """The task's dispatched jobs (only those whose result was not ingested yet)."""
        with self.tx() as s:
            q = select(Dispatch).where(Dispatch.task_id == task_id).order_by(Dispatch.created_at)
            if pending:
                q = q.where(Dispatch.consumed_at.is_(None))
            return list(s.scalars(q))

    # -- dispatches (actions executor) -----------------------------------------
    def record_dispatch(self, nonce: str, *, repo: str, task_id: int, generation: int,
                        kind: str, doc: dict, base_sha: str | None,
                        job_id: int | None = None) -> None:
        with self.tx() as s:
            s.add(Dispatch(nonce=nonce, repo=repo, task_id=task_id, generation=generation,
                           kind=kind, doc=doc, base_sha=base_sha, created_at=self.clock(),
                           job_id=job_id))

    def dispatch_of_job(self, job_id: int) -> Dispatch | None:
        """The dispatch recorded for a job (the newest), consumed or not."""
        with self.tx() as s:
            return s.scalar(select(Dispatch).where(Dispatch.job_id == job_id)
                            .order_by(Dispatch.created_at.desc()).limit(1))

    def set_dispatch_run(self, nonce: str, run_id: int | None) -> None:
        with self.tx() as s:
            s.execute(update(Dispatch).where(Dispatch.nonce == nonce).values(run_id=run_id))

    def dispatch(self, nonce: str) -> Dispatch | None:
        with self.tx() as s:
            return s.get(Dispatch, nonce)

    def consume_dispatch(self, nonce: str) -> bool:
        """Mark a dispatch's result as ingested; False when it already was."""
        with self.tx() as s:
            r = s.execute(update(Dispatch).where(Dispatch.nonce == nonce,
                                                 Dispatch.consumed_at.is_(None))
                          .values(consumed_at=self.clock()))
            return _rowcount(r) == 1

    def release_dispatch(self, nonce: str) -> None:
        """Undo :meth:`consume_dispatch` and :meth:`claim_ingest` (the ingest failed
        and will be retried)."""
        with self.tx() as s:
            s.execute(update(Dispatch).where(Dispatch.nonce == nonce)
                      .values(consumed_at=None, ingest_owner=None, ingest_until=None))

    def claim_ingest(self, nonce: str, owner: str, *, hold_s: float = 3600.0) -> bool:
        """Take the right to apply a dispatch's result (not consumed yet): free, held
        by ``owner`` already (its job run again after a crash: it resumes), or held
        by someone whose hold ran out. False: consumed, or another is applying it."""
        now = self.clock()
        with self.tx() as s:
            r = s.execute(update(Dispatch).where(
                Dispatch.nonce == nonce, Dispatch.consumed_at.is_(None),
                or_(Dispatch.ingest_owner.is_(None), Dispatch.ingest_owner == owner,
                    Dispatch.ingest_until < now))
                .values(ingest_owner=owner, ingest_until=now + hold_s))
            return _rowcount(r) == 1

    # -- recorded sequences (sagas) --------------------------------------------
    def step_done(self, saga: str, step: str) -> Step | None:
        """The record of ``step`` of ``saga`` (None: not done yet)."""
        with self.tx() as s:
            return s.get(Step, (saga, step))

    def steps(self, saga: str) -> dict[str, Step]:
        with self.tx() as s:
            return {r.step: r for r in s.scalars(select(Step).where(Step.saga == saga))}

    def record_step(self, saga: str, step: str, data: Any = None) -> Step:
        """Record ``step`` done (once: a second record keeps the first's data)."""
        with self.tx() as s:
            s.execute(self._insert(Step).values(saga=saga, step=step, data=data,
                                                done_at=self.clock())
                      .on_conflict_do_nothing(index_elements=["saga", "step"]))
        got = self.step_done(saga, step)
        assert got is not None
        return got

    # -- leases -----------------------------------------------------------------
    def take_lease(self, name: str, owner: str, *, hold_s: float) -> bool:
        """Take or renew the lease ``name`` for ``hold_s``: True when ``owner`` holds
        it now (it was free, ran out, or is already ``owner``'s)."""
        now = self.clock()
        with self.tx() as s:
            s.execute(self._insert(Lease).values(name=name, owner=owner, until=now + hold_s)
                      .on_conflict_do_nothing(index_elements=["name"]))
            s.execute(update(Lease).where(Lease.name == name,
                                          or_(Lease.owner == owner, Lease.until < now))
                      .values(owner=owner, until=now + hold_s))
            row = s.get(Lease, name)
            return row is not None and row.owner == owner

    def drop_lease(self, name: str, owner: str) -> None:
        with self.tx() as s:
            s.execute(delete(Lease).where(Lease.name == name, Lease.owner == owner))

    # -- redelivery asks -------------------------------------------------------
    def redelivery(self, guid: str) -> Redelivery | None:
        with self.tx() as s:
            return s.get(Redelivery, guid)

    def count_redelivery_ask(self, guid: str) -> int:
        """One more ask for ``guid``; returns the asks so far."""
        now = self.clock()
        with self.tx() as s:
            s.execute(self._insert(Redelivery).values(guid=guid, asks=0, last_asked_at=now)
                      .on_conflict_do_nothing(index_elements=["guid"]))
            s.execute(update(Redelivery).where(Redelivery.guid == guid)
                      .values(asks=Redelivery.asks + 1, last_asked_at=now))
            return int(s.scalar(select(Redelivery.asks).where(Redelivery.guid == guid)) or 0)

    def give_up_redelivery(self, guid: str) -> bool:
        """Mark ``guid`` given up; True the first time."""
        now = self.clock()
        with self.tx() as s:
            s.execute(self._insert(Redelivery).values(guid=guid, asks=0, last_asked_at=now)
                      .on_conflict_do_nothing(index_elements=["guid"]))
            r = s.execute(update(Redelivery).where(Redelivery.guid == guid,
                                                   Redelivery.gave_up_at.is_(None))
                          .values(gave_up_at=now))
            return _rowcount(r) == 1

    def redelivery_counts(self) -> tuple[int, int]:
        """(asks made in all, deliveries given up) for ``/metrics``."""
        with self.tx() as s:
            asks = s.scalar(select(func.coalesce(func.sum(Redelivery.asks), 0)))
            gave_up = s.scalar(select(func.count()).select_from(Redelivery)
                               .where(Redelivery.gave_up_at.is_not(None)))
            return int(asks or 0), int(gave_up or 0)

    # -- installations --------------------------------------------------------
    def set_installation(self, inst_id: int, *, account: str | None = None,
                         suspended: bool | None = None, add_repos: Iterable[str] = (),
                         remove_repos: Iterable[str] = (), deleted: bool = False) -> None:
        now = self.clock()
        with self.tx() as s:
            row = s.get(Installation, inst_id)
            if deleted:
                if row is not None:
                    s.delete(row)
                return
            if row is None:
                row = Installation(id=inst_id, account=account or "", suspended=False,
                                   repos=[], updated_at=now)
                s.add(row)
            if account:
                row.account = account
            if suspended is not None:
                row.suspended = suspended
            repos = [r for r in (row.repos or []) if r not in set(remove_repos)]
            repos += [r for r in add_repos if r not in repos]
            row.repos = repos
            row.updated_at = now

    def installation(self, inst_id: int) -> Installation | None:
        with self.tx() as s:
            return s.get(Installation, inst_id)

