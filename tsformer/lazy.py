"""Names a package exports from its modules, imported on first use (PEP 562), so importing the package is cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: dict, module_of: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of a package whose globals are `package` and whose name `n` lives in module
    `module_of[n]`: a name is imported when first used, then kept."""

    def __getattr__(name: str) -> object:
        if name not in module_of:
            raise AttributeError(f"module {package['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_of[name]), name)
        package[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(package) | set(module_of))

    return __getattr__, __dir__
