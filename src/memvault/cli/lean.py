"""What `mem --help` need not import: rich's Markdown and Traceback.

Typer's help and error formatter (typer.rich_utils) imports both at its top, for the
markdown markup mode and for pretty tracebacks, and mem uses neither (its help is Rich
markup, its tracebacks are plain and only with MEM_DEBUG=1). With markdown-it, Pygments
and attrs behind them they are a third of `mem --help`'s start-up. While that one module
runs, the two names resolve to stand-ins that import the real class the moment they are
used, so nothing behaves differently; any other import of rich.markdown or rich.traceback,
before or after, gets the real module.
"""

from __future__ import annotations

import importlib
import sys
import types
from importlib.machinery import ModuleSpec
from typing import Any

FORMATTER = "typer.rich_utils"
DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


class _Deferred(type):
    """A class that is its real counterpart once used: called, or any attribute read."""

    _module: str
    _name: str

    def _real(cls) -> Any:
        return getattr(importlib.import_module(cls._module), cls._name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls._real(), name)


def _stand_in(module: str, name: str) -> types.ModuleType:
    stand_in = types.ModuleType(module)
    setattr(stand_in, name, _Deferred(name, (), {"_module": module, "_name": name}))
    return stand_in


class _Loader:
    """The formatter's own loader, run with the stand-ins in place."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        created: types.ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: types.ModuleType) -> None:
        added = [name for name in DEFERRED if name not in sys.modules]
        for name in added:
            sys.modules[name] = _stand_in(name, DEFERRED[name])
        try:
            self.loader.exec_module(module)
        finally:
            for name in added:
                sys.modules.pop(name, None)

    def __getattr__(self, name: str) -> Any:  # get_source and the rest, for tracebacks
        return getattr(self.loader, name)


class _Finder:
    """Finds the formatter as the import system would, with _Loader around its loader;
    used once, then gone."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name != FORMATTER:
            return None
        uninstall()
        from importlib.util import find_spec

        spec = find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
        return spec


_FINDER = _Finder()


def install() -> None:
    """Defer the two imports, if the formatter is still to be imported."""
    if FORMATTER not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
