"""`mem pref`: key-value preferences, stored encrypted in preferences.json."""

from typing import Annotated

import typer

from mem.cli import context
from mem.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from mem.output import Output

app = typer.Typer(help="Set, get, list and unset preferences.", no_args_is_help=True)
KeyArg = Annotated[str, typer.Argument(help="Preference key, e.g. editor or output.format.")]


@app.command("set")
def set_(
    key: KeyArg,
    value: Annotated[str, typer.Argument(help="The value.")],
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Set a preference."""
    doc = context.open_vault(vault, org, user, key_file).pref_set(key, value)
    Output(json).data(doc, lambda o: o.info(f"{key} set"))


@app.command()
def get(
    key: KeyArg,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Print a preference's value (exit 66 when unset)."""
    doc = context.open_vault(vault, org, user, key_file).pref_get(key)
    Output(json).data(doc, lambda o: o.line(str(doc["value"])))


@app.command("list")
def list_(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """List every preference."""
    prefs = context.open_vault(vault, org, user, key_file).pref_list()

    def human(o: Output) -> None:
        if not prefs:
            o.info("no preferences set")
        else:
            o.table(["key", "value", "updated"], [[p["key"], p["value"], p["updated_at"][:19]]
                                                  for p in prefs])

    Output(json).data({"preferences": {p["key"]: p["value"] for p in prefs}}, human)


@app.command()
def unset(
    key: KeyArg,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Remove a preference (exit 66 when unset)."""
    doc = context.open_vault(vault, org, user, key_file).pref_unset(key)
    Output(json).data(doc, lambda o: o.info(f"{key} removed"))
