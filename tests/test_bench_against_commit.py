"""bench/against_commit.py runs each side's own code: an older layout (top folders mapped into
``promptrobust`` only by its installed package) is imported from that checkout, not from the
package installed here, even when the script puts its checkout first on sys.path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.against_commit import _BOOT, import_root  # noqa: E402


def _old_layout(root: Path) -> Path:
    """A checkout as before e9519a0: promptrobust/ holds no engine; engine/ sits beside it."""
    (root / "promptrobust").mkdir(parents=True)
    (root / "promptrobust" / "__init__.py").write_text("")
    (root / "engine" / "backends").mkdir(parents=True)
    (root / "engine" / "__init__.py").write_text("")
    (root / "engine" / "backends" / "__init__.py").write_text("")
    (root / "engine" / "backends" / "marker.py").write_text("WHERE = 'the old checkout'\n")
    (root / "bench").mkdir()
    # as the old bench scripts do: their checkout first on sys.path
    (root / "bench" / "probe.py").write_text(
        "import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path(__file__).resolve().parents[1]))\n"
        "import promptrobust.engine.backends.marker as m\nprint(m.WHERE, sys.argv[1:])\n"
    )
    return root


def test_an_old_layout_is_imported_from_its_own_checkout(tmp_path: Path) -> None:
    old = _old_layout(tmp_path / "old")
    root = import_root(old, tmp_path / "scratch")
    assert root != old and (root / "promptrobust" / "engine").resolve() == (old / "engine").resolve()
    done = subprocess.run([sys.executable, "-c", _BOOT, str(root), str(old / "bench" / "probe.py"), "--x", "1"],
                          cwd=old, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the old checkout ['--x', '1']"


def test_this_layout_is_imported_as_it_is(tmp_path: Path) -> None:
    here = Path(__file__).resolve().parents[1]
    assert import_root(here, tmp_path) == here
