"""How an agent starts mem: the program, and who it runs as, resolved once at install time.

An agent does not pass its own environment on as it is: Codex starts an MCP server with
HOME, PATH, LANG, SHELL, TERM and a few more only; Gemini CLI drops every variable whose
name holds KEY, TOKEN, SECRET (and more), or all but a few in a GitHub Action. A hook or
server that found its vault, user or key in MEM_* variables would then fail, or serve the
login user and store there. So the user scope writes everything mem resolved into each
entry, the hooks and the server alike (the same resolution, the same user): flags where
mem has them, the agent's own `env` mechanism for the rest. A committed (project) file
names nothing of this machine: its entries find everything as each user's mem does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from memvault.errors import ConfigError
from memvault.integrations import hookbase

# Every variable mem reads for who it runs as and where its key is: what a shared (project)
# file may have an agent pass on by name, never by value.
MEM_VARIABLES = ("MEM_VAULT", "MEM_ORG", "MEM_USER", "MEM_KEY_FILE", "MEM_KEY_COMMAND",
                 "MEM_MASTER_KEY", "MEM_KEY_SOURCE", "MEM_CONFIG_DIR", "MEM_LOG_DIR")


@dataclass(frozen=True)
class Launch:
    """A mem command line as an agent's settings hold it."""

    program: tuple[str, ...]
    flags: tuple[str, ...] = ()  # --vault=..., --org=..., --user=..., --key-file=...
    env: tuple[tuple[str, str], ...] = ()  # values mem has no flag for (PINNED_ENV)
    # A variable the agent must pass on by name (MEM_MASTER_KEY: its value is a secret
    # that no settings file may hold).
    forward: tuple[str, ...] = ()

    def argv(self, *args: str) -> list[str]:
        return [*self.program, *args, *self.flags]

    def shell_line(self, *args: str) -> str:
        """For agents that run a hook through a shell: assignments, then the command."""
        return hookbase.shell_line(self.argv(*args), self.env)

    @property
    def env_map(self) -> dict[str, str]:
        return dict(self.env)


def _absolute(path: Path) -> str:
    return str(Path(path).expanduser().absolute())


def resolve(scope: str) -> Launch:
    """The launch of the hooks and the server for `scope`, from this process's resolved
    configuration (flag-less: MEM_* environment > config file > defaults)."""
    if scope != "user":
        return Launch(tuple(hookbase.portable_command()))
    from memvault.config import config_dir
    from memvault.config import resolve as resolve_settings
    from memvault.vault.keysource import key_source

    settings = resolve_settings()
    flags = [f"--vault={_absolute(settings.vault)}", f"--org={settings.org}",
             f"--user={settings.user}"]
    # The config file (redaction rules, the server's limits) and the log, where the
    # installer found them: platformdirs reads XDG_* variables that agents drop.
    env = [("MEM_CONFIG_DIR", _absolute(config_dir())),
           ("MEM_LOG_DIR", _absolute(settings.log_dir))]
    forward: tuple[str, ...] = ()
    source = key_source(settings)
    if source.kind == "file" and source.path is not None:
        flags.append(f"--key-file={_absolute(source.path)}")
    elif source.kind == "command" and source.command:
        env.append(("MEM_KEY_COMMAND", source.command))
    elif source.kind == "env":
        forward = ("MEM_MASTER_KEY",)
    elif source.kind == "keyring":  # the entry's name comes from the vault: no secret here
        env.append(("MEM_KEY_SOURCE", "keyring"))
    return Launch(tuple(hookbase.mem_command()), tuple(flags), tuple(env), forward)


def refuse_forwarding(launch: Launch, agent: str) -> None:
    """For an agent that can pass no secret variable on to an MCP server (Gemini CLI)."""
    if launch.forward:
        reason = (f"{agent} never passes {', '.join(launch.forward)} to an MCP server, and "
                  "no settings file should hold the key")
        # The doctor says the reason, and the step (the hint) as its fix.
        raise ConfigError(f"{reason}: keep it in a key file (MEM_KEY_FILE) or behind "
                          "MEM_KEY_COMMAND, then install again; nothing was changed",
                          hint="key-not-forwarded", reason=reason)
