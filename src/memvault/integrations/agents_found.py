"""The agents on this machine: which of Claude Code, Codex CLI, Gemini CLI, OpenCode,
Cursor, Copilot CLI, Qwen Code, Cline, Goose, Crush and Amp are here, which release each
is, and what that release asks of mem's hooks.

An agent is found when its command is on PATH or its settings folder exists (an agent
installed off PATH still reads its settings). Its release is what `AGENT --version`
prints, run without a shell, in the minimal environment (and the agent's own variables
that say where its settings are), within a short time limit, under the keeper that ends
whatever it starts (memvault.process). An agent installed with npm is asked nothing: the
package.json its command belongs to says the release that --version would print, and
Gemini CLI takes seconds to start (ten on a busy machine). An agent that does not
answer has an unknown release, and mem writes the hooks current releases take.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

Version = tuple[int, int, int]

# Gemini CLI (Node) takes about 3 s to print its version on a busy machine.
VERSION_TIMEOUT = 10.0
VERSION_OUTPUT_LIMIT = 4096
VERSION_RE = re.compile(r"(?<![\d.])(\d+)\.(\d+)\.(\d+)")

# What a release asks of mem's hooks (docs/agents.md, "Which release").
CLAUDE_EXEC_FORM = (2, 1, 139)  # runs a hook's `command` with its `args` (exec form)
CODEX_HOOKS = (0, 114, 0)  # the first with hooks, behind `[features] codex_hooks = true`
CODEX_HOOKS_ON = (0, 124, 0)  # hooks on by default
GEMINI_HOOKS_ON = (0, 26, 0)  # hooks on by default


@dataclass(frozen=True)
class Spec:
    """An agent mem knows: its name in `mem hook NAME`, its command, its integration
    module, and how its user upgrades it."""

    name: str
    label: str
    command: str
    module: str  # memvault.integrations.<module>: the installer and the hook handler
    package: str  # its npm package ("" for none)
    upgrade: str
    variables: tuple[str, ...] = ()  # where the agent's settings are (its --version too)
    elsewhere: tuple[str, ...] = ()  # the command's places off PATH, in its settings folder

    def integration(self) -> ModuleType:
        import importlib

        return importlib.import_module(f"memvault.integrations.{self.module}")

    def config_dir(self) -> Path:
        """The folder of its user settings ($CLAUDE_CONFIG_DIR, $CODEX_HOME honoured): the
        module's own `config_dir` where its files sit deeper (Cline's data/settings/)."""
        module = self.integration()
        if hasattr(module, "config_dir"):
            return Path(module.config_dir())
        return Path(module.settings_path("user")).parent


CLAUDE = Spec("claude-code", "Claude Code", "claude", "claude_code",
              "@anthropic-ai/claude-code", "claude update", ("CLAUDE_CONFIG_DIR",),
              ("local/claude",))  # the older "local" install
CODEX = Spec("codex", "Codex CLI", "codex", "codex", "@openai/codex",
             "npm install -g @openai/codex@latest", ("CODEX_HOME",))
GEMINI = Spec("gemini", "Gemini CLI", "gemini", "gemini", "@google/gemini-cli",
              "npm install -g @google/gemini-cli@latest")
OPENCODE = Spec("opencode", "OpenCode", "opencode", "opencode", "opencode-ai",
                "opencode upgrade", ("XDG_CONFIG_HOME", "OPENCODE_CONFIG_DIR"))
# The agent CLI (cursor-agent); the editor shares ~/.cursor, so its folder finds it too.
CURSOR = Spec("cursor", "Cursor", "cursor-agent", "cursor", "", "cursor-agent update")
COPILOT = Spec("copilot", "Copilot CLI", "copilot", "copilot", "@github/copilot",
               "npm install -g @github/copilot@latest", ("COPILOT_HOME",))
QWEN = Spec("qwen", "Qwen Code", "qwen", "qwen", "@qwen-code/qwen-code",
            "npm install -g @qwen-code/qwen-code@latest")
CLINE = Spec("cline", "Cline", "cline", "cline", "cline", "npm install -g cline@latest",
             ("CLINE_DIR", "CLINE_DATA_DIR", "CLINE_MCP_SETTINGS_PATH"))
# Goose is published on neither npm nor PyPI (its releases are GitHub's): --version tells.
GOOSE = Spec("goose", "Goose", "goose", "goose", "", "goose update", ("XDG_CONFIG_HOME",))
CRUSH = Spec("crush", "Crush", "crush", "crush", "@charmland/crush",
             "npm install -g @charmland/crush@latest", ("XDG_CONFIG_HOME",))
# @sourcegraph/amp installs @ampcode/cli, whose package holds the command (and says its
# release: the native binary's --version says it too, with its date).
AMP = Spec("amp", "Amp", "amp", "amp", "@ampcode/cli", "amp update", ("XDG_CONFIG_HOME",))
AGENTS: tuple[Spec, ...] = (CLAUDE, CODEX, GEMINI, OPENCODE, CURSOR, COPILOT, QWEN, CLINE,
                            GOOSE, CRUSH, AMP)
BY_NAME = {spec.name: spec for spec in AGENTS}


def parse_version(text: str | None) -> Version | None:
    """The first MAJOR.MINOR.PATCH in what an agent printed ("2.1.139 (Claude Code)",
    "codex-cli 0.124.0", "0.26.0")."""
    found = VERSION_RE.search(text or "")
    if found is None:
        return None
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


def shown(version: Version) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class Found:
    """One agent as this machine has it."""

    spec: Spec
    command: str | None  # the program that runs it (on PATH, or in its settings folder)
    config_dir: Path
    has_config: bool
    version_text: str | None  # MAJOR.MINOR.PATCH as it printed it; None when unknown

    @property
    def found(self) -> bool:
        return self.command is not None or self.has_config

    @property
    def version(self) -> Version | None:
        return parse_version(self.version_text)

    @property
    def label(self) -> str:
        return f"{self.spec.label} {self.version_text}" if self.version_text else \
            self.spec.label


def locate(spec: Spec) -> tuple[str | None, Path]:
    """The agent's program (PATH first) and its settings folder."""
    folder = spec.config_dir()
    command = shutil.which(spec.command)
    if command is None:
        for place in spec.elsewhere:
            candidate = folder / place
            if candidate.is_file() and os.access(candidate, os.X_OK):
                command = str(candidate)
                break
    return command, folder


def package_version(spec: Spec, command: str) -> str | None:
    """The release of an npm install, from the package.json of the package the command
    (a link into node_modules) belongs to; None for any other install."""
    import json

    try:
        place = Path(os.path.realpath(command))
    except (OSError, ValueError):
        return None
    for folder in list(place.parents)[:4]:
        try:
            doc = json.loads((folder / "package.json").read_bytes()[:1 << 20])
        except (OSError, ValueError):
            continue
        if spec.package and isinstance(doc, dict) and doc.get("name") == spec.package:
            version = parse_version(str(doc.get("version", "")))
            return shown(version) if version else None
    return None


def version_of(spec: Spec, command: str, timeout: float = VERSION_TIMEOUT) -> str | None:
    """The release, as MAJOR.MINOR.PATCH: from its npm package, else what `COMMAND
    --version` prints on stdout (None when it cannot be run, fails, takes too long or
    prints no version)."""
    from memvault.process import minimal_env, run_bounded

    known = package_version(spec, command)
    if known:
        return known
    try:
        done = run_bounded([command, "--version"], None, timeout, VERSION_OUTPUT_LIMIT,
                           minimal_env(spec.variables))
    except (OSError, ValueError):
        return None
    if done.problem is not None or done.returncode != 0:
        return None
    version = parse_version(done.output.decode(errors="replace"))
    return shown(version) if version else None


def detect(specs: tuple[Spec, ...] = AGENTS, timeout: float = VERSION_TIMEOUT,
           versions: bool = True) -> tuple[Found, ...]:
    """Each agent, in `specs` order; their releases asked for all at once (each may take
    seconds), unless `versions` is False."""
    from concurrent.futures import ThreadPoolExecutor

    located = [(spec, *locate(spec)) for spec in specs]
    with ThreadPoolExecutor(max_workers=len(located) or 1) as pool:
        released = list(pool.map(
            lambda item: version_of(item[0], item[1], timeout) if item[1] and versions
            else None, located))
    return tuple(Found(spec, command, folder, folder.is_dir(), version)
                 for (spec, command, folder), version in zip(located, released, strict=True))


@dataclass(frozen=True)
class Needs:
    """What an agent's release asks of mem's hooks, and what its user should know."""

    exec_form: bool = True  # Claude Code: `command` with `args` (else one shell line)
    codex_flag: bool = False  # Codex: `[features] codex_hooks = true` in config.toml
    runs_hooks: bool = True  # whether the release runs mem's hooks at all, as written
    note: str | None = None  # why, and what to upgrade
    upgrade: bool = False  # an upgrade is what sets it right


def needs(found: Found) -> Needs:
    """The hooks a release takes. An unknown release gets what current releases take."""
    version, spec = found.version, found.spec
    if version is None:
        if not found.command:
            return Needs(note=f"no `{spec.command}` on PATH to ask its release: mem writes "
                         "the hooks current releases take")
        return Needs(note=f"`{spec.command} --version` said no release: mem writes the hooks "
                     "current releases take")
    if spec is CLAUDE and version < CLAUDE_EXEC_FORM:
        return Needs(exec_form=False, note=(
            f"{found.label} runs hooks in exec form from {shown(CLAUDE_EXEC_FORM)}: mem writes "
            f"them as shell lines (or upgrade: {spec.upgrade})"))
    if spec is CODEX and version < CODEX_HOOKS:
        return Needs(runs_hooks=False, upgrade=True, note=(
            f"{found.label} runs no hooks (they came in {shown(CODEX_HOOKS)}): upgrade to "
            f"{shown(CODEX_HOOKS_ON)} or later: {spec.upgrade}"))
    if spec is CODEX and version < CODEX_HOOKS_ON:
        return Needs(codex_flag=True, note=(
            f"{found.label} runs hooks only with [features] codex_hooks = true in "
            f"config.toml (on by default from {shown(CODEX_HOOKS_ON)})"))
    if spec is GEMINI and version < GEMINI_HOOKS_ON:
        return Needs(runs_hooks=False, upgrade=True, note=(
            f"{found.label} runs hooks only once they are turned on (on by default from "
            f"{shown(GEMINI_HOOKS_ON)}): upgrade: {spec.upgrade}"))
    return Needs()
