"""`mem pref`: key-value preferences, stored encrypted in preferences.json."""

from typing import Annotated

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from memvault.cli.output import Output

app = typer.Typer(help="Set, get, list and unset preferences.", no_args_is_help=True)
KeyArg = Annotated[str, typer.Argument(help="Preference key, e.g. editor or output.format.")]


@app.command("set")
def set_(
    key: KeyArg,
    value: Annotated[str, typer.Argument(
        help="The value, or - to read it from stdin (out of the process list).")],
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Set a preference."""
    if value == "-":
        value = context.stdin_text("the value")
    from memvault.ops import prefs as core

    result = core.set_(context.open_vault(vault, org, user, key_file, needs=None),
                       key, value)
    Output(json).data(result, lambda o: o.info(f"{key} set"))


@app.command()
def get(
    key: KeyArg,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Print a preference's value (exit 66 when unset)."""
    from memvault.ops import prefs as core

    result = core.get(context.open_vault(vault, org, user, key_file), key)
    Output(json).data(result, lambda o: o.line(result.value))


@app.command("list")
def list_(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """List every preference."""
    from memvault.ops import prefs as core

    result = core.list_(context.open_vault(vault, org, user, key_file))

    def human(o: Output) -> None:
        if not result.prefs:
            o.info("no preferences set")
        else:
            o.table(["key", "value", "updated"], [[p.key, p.value, p.updated_at[:19]]
                                                  for p in result.prefs])

    Output(json).data(result, human)


@app.command()
def unset(
    key: KeyArg,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Remove a preference (exit 66 when unset)."""
    from memvault.ops import prefs as core

    result = core.unset(context.open_vault(vault, org, user, key_file), key)
    Output(json).data(result, lambda o: o.info(f"{key} removed"))


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="pref")
