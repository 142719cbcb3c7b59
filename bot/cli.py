"""The `rsi` command line: one entry point composed from each layer's own app.

Each package owns its commands (imports only go down):

* ``verifier.cli.app``: ``rsi verify``, ``rsi calibrate`` (also ``python -m verifier``)
* ``harness.cli.app``: ``rsi run``, ``rsi spec check``
* ``harness.demo.app``: ``rsi demo``
* ``bot.service_cli.app``: ``rsi serve``, ``rsi worker``
"""

from __future__ import annotations

import typer


def build_app() -> typer.Typer:
    from bot import service_cli
    from harness import cli as harness_cli
    from harness import demo as harness_demo
    from verifier import cli as verifier_cli

    app = typer.Typer(
        name="rsi",
        help="rsi-bot: agents make inference stacks faster; an independent verifier keeps them honest.",
        no_args_is_help=True,
        add_completion=False,
    )
    for sub in (verifier_cli.app, harness_cli.app, harness_demo.app, service_cli.app):
        app.registered_commands.extend(sub.registered_commands)
        app.registered_groups.extend(sub.registered_groups)
    return app


def main() -> None:
    build_app()()


if __name__ == "__main__":
    main()
