"""The ``listhygiene`` console script's own exit (listhygiene.cli.run; docs/pipeline.md,
"Small lists"): the heap frozen before shutdown, nothing else about the exit changed."""

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

# atexit handlers run last-registered first: this one, registered before the command, runs
# after the command's own and after the script's freeze
_PROBE = """
import atexit, gc, sys, tempfile
from pathlib import Path
kept = tempfile.TemporaryDirectory(prefix="lh-exit-")  # cleaned by its atexit finalizer
Path(sys.argv[1]).write_text(kept.name)
atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0, flush=True))
sys.argv = ["listhygiene", *sys.argv[2:]]
from listhygiene.cli import run
run()
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path / "kept"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_console_script_freezes_the_heap_before_the_interpreter_exits(tmp_path: Path) -> None:
    done = _run(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    assert "listhygiene, version" in done.stdout
    assert "frozen True" in done.stdout
    # the exit still runs every finalizer registered for it
    assert not Path((tmp_path / "kept").read_text()).exists()


def test_a_failing_command_keeps_its_exit_code(tmp_path: Path) -> None:
    done = _run(tmp_path, "clean", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "out"))
    assert done.returncode == 3, done.stderr
    assert "frozen True" in done.stdout
    assert "Traceback" not in done.stderr


def test_the_installed_command_and_python_m_both_take_the_exit() -> None:
    (script,) = (e for e in entry_points(group="console_scripts") if e.name == "listhygiene")
    assert script.value == "listhygiene.cli:run"
    main_module = Path(sys.modules["listhygiene"].__file__ or "").parent / "cli" / "__main__.py"
    assert "run()" in main_module.read_text()
