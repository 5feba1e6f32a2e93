"""The project's scripts (``scripts/NAME.py``) as modules a test can call, loaded from the checkout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as module ``name``, registered in ``sys.modules`` (a dataclass defined in a
    script looks its module up there); scripts/ is on ``sys.path``, as when a script runs, so a script's
    own imports of its siblings (``import meaning_sets``) work."""
    if str(SCRIPTS) not in sys.path:
        sys.path.append(str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
