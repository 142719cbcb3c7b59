"""The `rsi` command line: one entry point composed from each layer's own app.

Each package owns its commands (imports only go down):

* ``verifier.cli.app``: ``rsi verify``, ``rsi calibrate`` (also ``python -m verifier``)
* ``harness.cli.app``: ``rsi run``, ``rsi spec check``, ``rsi init``, ``rsi config check|schema``
* ``harness.demo.app``: ``rsi demo``
* ``bot.service_cli.app``: ``rsi serve``, ``rsi worker``
* ``bot.setup_flow.app``: ``rsi setup`` (create the GitHub App from its manifest)
* ``bot.trylocal.app``: ``rsi try`` (a labelled issue's whole flow, locally, without GitHub)

``rsi --version`` prints the installed version. Commands in :data:`INTERNAL`
are what other parts of rsi-bot run (the harness runs the verifier in a
container through them); they work, but the top-level help does not list them.
"""

from __future__ import annotations

import copy
from importlib import metadata

import typer

INTERNAL = frozenset({"verify-dirs", "calibrate-dir"})
"""Commands run by rsi-bot itself, hidden from ``rsi --help``."""


def version() -> str:
    try:
        return metadata.version("rsi-bot")
    except metadata.PackageNotFoundError:  # pragma: no cover - a bare source tree
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"rsi-bot {version()}")
        raise typer.Exit()


def build_app() -> typer.Typer:
    from bot import service_cli, setup_flow, trylocal
    from harness import cli as harness_cli
    from harness import demo as harness_demo
    from verifier import cli as verifier_cli

    app = typer.Typer(
        name="rsi",
        help="rsi-bot: agents make inference stacks faster; an independent verifier keeps them honest.",
        no_args_is_help=True,
        add_completion=False,
    )

    @app.callback()
    def _root(_version: bool = typer.Option(False, "--version", callback=_print_version,
                                            is_eager=True, help="Print the version and exit.")) -> None:
        pass

    for sub in (verifier_cli.app, harness_cli.app, harness_demo.app, service_cli.app,
                setup_flow.app, trylocal.app):
        for cmd in sub.registered_commands:
            name = cmd.name or (cmd.callback.__name__.replace("_", "-") if cmd.callback else "")
            if name in INTERNAL:
                cmd = copy.copy(cmd)  # the layer's own app keeps listing it
                cmd.hidden = True
            app.registered_commands.append(cmd)
        app.registered_groups.extend(sub.registered_groups)
    return app


def main() -> None:
    import sys

    if sys.argv[1:] == ["--version"]:  # answer without importing every layer
        typer.echo(f"rsi-bot {version()}")
        return
    build_app()()


if __name__ == "__main__":
    main()
