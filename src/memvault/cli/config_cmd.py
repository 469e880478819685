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

    def shown(value: object) -> str:
        if isinstance(value, (list, tuple)):
            return ", ".join(map(shown, value)) or "-"
        if isinstance(value, bool):
            return str(value).lower()  # as config.yaml writes it
        return "-" if value is None or value == "" else str(value)

    def rows(name: str, value: object, source: str) -> list[list[str]]:
        """A row a setting; a mapping's keys a row each (compaction.summarizer), so that
        each is on a line of its own; what is unset is "-", never "None"."""
        if isinstance(value, dict) and value:
            return [row for k, v in value.items() for row in rows(f"{name}.{k}", v, source)]
        return [[name, shown(value), source]]

    Output(json).data(doc, lambda o: o.table(
        ["setting", "value", "source"],
        [row for k, v in resolved.items() for row in rows(k, v["value"], str(v["source"]))]))


@app.command()
def path(json: JsonOpt = False) -> None:
    """Print the config file's path."""
    from memvault.config import CONFIG_FILE, config_dir

    p = str(config_dir() / CONFIG_FILE)
    Output(json).data({"config_file": p}, lambda o: o.line(p))


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="config")
