"""`mem config`: the resolved settings and where each came from."""

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from memvault.cli.output import Output

app = typer.Typer(help="Show the resolved configuration.", no_args_is_help=True)


@app.command()
def show(
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Print every setting, its value and where it came from (flag > env > file > default)."""
    s = context.settings(vault, org, user, key_file)
    # A mapping (compaction:, mcp:) stays a mapping in JSON; anything else is text.
    resolved = {k: {"value": v if isinstance(v, dict) else None if v is None else str(v),
                    "source": s.sources[k]} for k, v in s.values.items()}
    doc = {"config_file": str(s.config_path), "settings": resolved}

    def shown(value: object) -> object:
        if isinstance(value, dict):
            return ", ".join(f"{k}: {v}" for k, v in value.items())
        return value

    Output(json).data(doc, lambda o: o.table(
        ["setting", "value", "source"],
        [[k, shown(v["value"]), v["source"]] for k, v in resolved.items()]))


@app.command()
def path(json: JsonOpt = False) -> None:
    """Print the config file's path."""
    from memvault.config import CONFIG_FILE, config_dir

    p = str(config_dir() / CONFIG_FILE)
    Output(json).data({"config_file": p}, lambda o: o.line(p))


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="config")
