"""``rsi serve`` and ``rsi worker`` (mounted in the ``rsi`` CLI by bot/cli.py)."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True)


def _settings():
    from bot.settings import SettingsError, load_settings

    try:
        return load_settings()
    except SettingsError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None


def _logging() -> None:
    """JSON lines (bot.obs; RSI_LOG_FORMAT=console for a terminal)."""
    from bot.obs import configure_logging

    configure_logging(os.environ.get("RSI_LOG_FORMAT", "json"))


@app.command()
def serve(host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
          port: int = typer.Option(8080, help="Port to listen on."),
          workers: Optional[int] = typer.Option(
              None, help="Worker threads per process (default RSI_WORKERS)."),
          processes: int = typer.Option(
              1, min=1, help="Web processes (uvicorn workers) sharing the port.")) -> None:
    """Run the webhook service (and, by default, its worker pool)."""
    import os

    import uvicorn

    from bot.service import create_service

    _logging()
    settings = _settings()  # fail fast here, before any process starts
    if processes > 1:
        import sys

        if workers is not None:
            os.environ["RSI_WORKERS"] = str(workers)
        # the same process (pid, group) as bot.serve_entry: the module spawn imports
        # first in each web worker, so the worker dies with this master from its start
        os.execv(sys.executable, [sys.executable, "-m", "bot.serve_entry", "--host", host,
                                  "--port", str(port), "--processes", str(processes)])
    uvicorn.run(create_service(settings, workers=workers), host=host, port=port,
                log_level="info", access_log=False, log_config=None)


@app.command()
def worker(
    local: bool = typer.Option(False, "--local", help="Take jobs from the bot's database "
                               "(RSI_DATABASE_URL) and run them on this host."),
    threads: int = typer.Option(1, help="Worker threads (with --local)."),
    job: Optional[str] = typer.Option(None, help="A dispatched job: JSON text or a file "
                                      "(actions executor, on the runner)."),
    repo: Path = typer.Option(Path("."), help="Checkout of the target repo (with --job)."),
    out: Path = typer.Option(Path("rsi-result"), help="Where the result goes (with --job)."),
    state_dir: Path = typer.Option(Path(".rsi-state"), envvar="RSI_STATE_DIR",
                                   help="Harness state (with --job; keep it on the runner)."),
) -> None:
    """Run jobs: from the bot's queue (--local), or one dispatched job (--job)."""
    _logging()
    if local == (job is not None):
        typer.echo("give either --local or --job", err=True)
        raise typer.Exit(2)
    if job is not None:
        from bot.executors.remote import execute

        text = Path(job).read_text() if Path(job).is_file() else job
        result = execute(json.loads(text), repo=repo, out=out, state_dir=state_dir)
        typer.echo(json.dumps({"status": result.get("status"), "out": str(out),
                               "error": result.get("error")}))
        from bot.worker import job_exit_code

        raise typer.Exit(job_exit_code(result))
    from bot.service import build_context, make_pool

    ctx = build_context(_settings())
    pool = make_pool(ctx, threads).start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    pool.stop()


if __name__ == "__main__":
    app()
