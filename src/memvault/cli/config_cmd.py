"""`mem config`: the resolved settings and where each came from."""

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from memvault.cli import context
from memvault.cli.options import JsonOpt, KeyFileOpt, OrgOpt, UserOpt, VaultOpt
from memvault.cli.output import Output
from memvault.errors import UsageError

if TYPE_CHECKING:
    from memvault.config import Settings

app = typer.Typer(help="Show the resolved configuration.", no_args_is_help=True)


@app.command()
def show(
    name: Annotated[Optional[str], typer.Argument(  # noqa: UP045
        help="Only this setting (a mapping's key as mapping.key, e.g. "
        "compaction.summarizer), or a mapping.", show_default=False)] = None,
    vault: VaultOpt = None, org: OrgOpt = None, user: UserOpt = None,
    key_file: KeyFileOpt = None, json: JsonOpt = False,
) -> None:
    """Print every setting, its value and where it came from (flag > env > file > default)."""
    s = context.settings(vault, org, user, key_file)
    # A mapping (compaction:, mcp:) stays a mapping in JSON; anything else is text.
    resolved = {k: {"value": v if isinstance(v, dict) else None if v is None else str(v),
                    "source": s.sources[k]} for k, v in s.values.items()}
    for k, (value, source) in _defaults(s).items():
        resolved[k] = {"value": value, "source": source}
    if name is not None:
        resolved = _only(resolved, name)
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


def _defaults(s: "Settings") -> dict[str, tuple[str | None, str]]:
    """What a setting left unset resolves to, shown as it is used (never "-" for a
    default that names a place): the key file mem reads (or says why none is read), the
    hooks' log folder, the actor the audit log names."""
    from memvault.vault.keysource import key_source

    out: dict[str, tuple[str | None, str]] = {}
    if s.sources["log_dir"] == "default":
        out["log_dir"] = (str(s.log_dir), "default")
    if s.sources["actor"] == "default":
        out["actor"] = (s.actor, "default (login name)")
    if s.sources["key_file"] == "default":
        source = key_source(s)
        if source.kind == "file" and source.path is not None:
            out["key_file"] = (str(source.path), "default")
        elif source.kind == "none" and source.path is not None:
            out["key_file"] = (str(source.path), "default (no file yet: `mem init` makes it)")
        else:
            used = {"command": "MEM_KEY_COMMAND", "env": "MEM_MASTER_KEY",
                    "keyring": "the OS keyring"}.get(source.kind, source.kind)
            out["key_file"] = (None, f"default (none read: the key comes from {used})")
    return out


def _only(resolved: dict[str, dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    """The one setting `name` asks for (a mapping's key as mapping.key); UsageError with
    the closest name for one that mem has not."""
    from memvault.config import did_you_mean, setting_names

    section, _, key = name.partition(".")
    entry = resolved.get(section)
    if entry is not None and not key:
        return {name: entry}
    if entry is not None and isinstance(entry["value"], dict) and key in entry["value"]:
        return {name: {"value": entry["value"][key], "source": entry["source"]}}
    raise UsageError(f"unknown setting {name!r}" + (
        did_you_mean(name, setting_names()) or "; `mem config show` lists them all"))


@app.command()
def path(json: JsonOpt = False) -> None:
    """Print the config file's path."""
    from memvault.config import CONFIG_FILE, config_dir

    p = str(config_dir() / CONFIG_FILE)
    Output(json).data({"config_file": p}, lambda o: o.line(p))


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="config")
