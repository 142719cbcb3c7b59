"""`rsi worker --local` as its own process, and `rsi serve` failing fast."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from bot.store import Store
from tests.bot._support import SECRET, wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_worker_local_drains_the_queue(tmp_path):
    db = f"sqlite:///{tmp_path}/bot.db"
    store = Store(db)
    for i in range(3):
        store.record_delivery(f"d{i}", "ping", None, {"zen": "z", "hook_id": i})
    env = {**os.environ, "RSI_WEBHOOK_SECRET": SECRET, "RSI_GITHUB_TOKEN": "unused",
           "RSI_GITHUB_API_URL": "http://127.0.0.1:9", "RSI_DATABASE_URL": db,
           "RSI_POLL_S": "0.05", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "bot.service_cli", "worker", "--local"],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: store.job_counts()["done"] == 3, 60, what="jobs done")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0
    assert [j.result for j in store.jobs()] == ["ignored: ping"] * 3


def test_serve_fails_fast_without_settings(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSI_")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-m", "bot.service_cli", "serve"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "RSI_WEBHOOK_SECRET" in r.stderr and "Traceback" not in r.stderr
