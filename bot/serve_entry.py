"""``rsi serve --processes N``: the master and its web workers start here.

Its first lines are the web worker's first instructions. uvicorn starts each
worker with multiprocessing's *spawn*, which imports the master's main module in
the child before anything else (as ``__mp_main__``); ``rsi serve --processes N``
therefore re-executes itself as ``python -m bot.serve_entry`` so that this small
module, and not the whole ``rsi`` CLI, is that main module. In a worker it sets
``PR_SET_PDEATHSIG`` (SIGKILL when the master dies) before any import of ours or
of uvicorn's, then checks that the master is still its parent: a master killed
before the line that set it is seen, one killed after kills the worker. No
window is left in which an orphaned worker starts serving (it was 3.8 s of
imports, and a swallowed delivery, when the death signal was set only in
``bot.service.app_from_env``).

Nothing here may import more than the standard library at module level.
"""

from __future__ import annotations

import os

MASTER_ENV = "RSI_MASTER_PID"
WATCH_ENV = "RSI_MASTER_WATCH"
PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2


def die_with_master_now() -> bool:
    """In a web worker (``RSI_MASTER_PID`` names another process): the death
    signal, then the parent check; the variable is taken out of the environment so
    that nothing this worker starts inherits it. True when this is such a worker."""
    master = os.environ.get(MASTER_ENV, "")
    if not master.isdigit() or int(master) == os.getpid():
        return False  # not a worker (or the master itself)
    del os.environ[MASTER_ENV]
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL
    except (OSError, AttributeError):  # not Linux: the parent-pid watch (bot.service) remains
        pass
    if os.getppid() != int(master):  # the master died before the death signal was set
        os._exit(1)
    os.environ[WATCH_ENV] = master  # bot.service.app_from_env adds the parent-pid watch
    return True


if __name__ == "__mp_main__":  # a web worker: spawn imports this module first
    die_with_master_now()


def main(argv: list[str] | None = None) -> None:
    """The master: uvicorn with ``--processes`` workers, each building its own app
    (``bot.service:app_from_env``)."""
    import argparse

    import uvicorn

    p = argparse.ArgumentParser(prog="rsi serve")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--processes", type=int, default=2)
    a = p.parse_args(argv)
    os.environ[MASTER_ENV] = str(os.getpid())  # web workers die with this process
    uvicorn.run("bot.service:app_from_env", factory=True, workers=a.processes, host=a.host,
                port=a.port, log_level="info", access_log=False, log_config=None)


if __name__ == "__main__":
    main()
