"""``underway db``: schema management."""

from __future__ import annotations

import typer

from ._common import DbOption, handle_errors, open_store

app = typer.Typer(help="Manage the database schema.", no_args_is_help=True)


@app.command("migrate")
@handle_errors
def migrate(ctx: typer.Context, db: DbOption = None) -> None:
    """Create or upgrade the schema; print the schema version now in place."""
    with open_store(ctx, db, migrate=True) as store:
        version = store.schema_version()
    typer.echo(f"schema version {version}")
