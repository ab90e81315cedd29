"""The ``listhygiene`` console script's own exit (listhygiene.cli.run; docs/pipeline.md,
"Small lists"): the command's exit code, its threads, atexit handlers and output kept, the
interpreter's teardown skipped."""

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

# Registered before the command: its atexit handler runs after the command's own; the object
# alive at exit has a finalizer that only the interpreter's teardown would call.
_PROBE = """
import atexit, sys, tempfile
from pathlib import Path
folder = Path(sys.argv[1])
kept = tempfile.TemporaryDirectory(dir=folder)  # removed by its atexit finalizer
(folder / "kept").write_text(kept.name)
atexit.register(lambda: print("atexit ran"))  # no flush: the exit flushes stdout
class Alive:
    def __init__(self, path):
        self.path = path
    def __del__(self, open=open):  # builtins are gone by then
        with open(self.path, "w") as file:
            file.write("teardown ran")
alive = Alive(str(folder / "torn-down"))
def finish():  # a thread still working when the command returns: the exit waits for it
    import time
    time.sleep(0.5)
    (folder / "finished").write_text("done")
import threading
threading.Thread(target=finish).start()
if sys.argv[2] == "--without-helpers":  # an interpreter without CPython's exit helpers
    del threading._shutdown
    del sys.argv[2]
sys.argv = ["listhygiene", *sys.argv[2:]]
from listhygiene.cli import run
run()
"""


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_console_script_exits_without_the_interpreters_teardown(tmp_path: Path) -> None:
    done = _run(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    version, last = done.stdout.splitlines()
    assert version.startswith("listhygiene, version ")
    assert last == "atexit ran"
    assert not Path((tmp_path / "kept").read_text()).exists()  # finalizers for the exit ran
    assert not (tmp_path / "torn-down").exists()  # the teardown did not
    assert (tmp_path / "finished").read_text() == "done"
    assert done.stderr == ""


def test_a_failing_command_keeps_its_exit_code_and_its_message(tmp_path: Path) -> None:
    done = _run(tmp_path, "clean", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "out"))
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "missing.csv" in done.stderr
    assert "atexit ran" in done.stdout
    usage = _run(tmp_path, "clean", "--no-such-option")
    assert usage.returncode == 2
    assert "No such option" in usage.stderr


def test_without_cpythons_exit_helpers_the_exit_is_the_usual_one(tmp_path: Path) -> None:
    done = _run(tmp_path, "--without-helpers", "clean", str(tmp_path / "missing.csv"), "--out", "o")
    assert done.returncode == 3, done.stderr
    assert "atexit ran" in done.stdout
    assert (tmp_path / "finished").read_text() == "done"
    assert (tmp_path / "torn-down").exists()  # the interpreter's own teardown ran


def test_the_installed_command_and_python_m_both_take_the_exit() -> None:
    (script,) = (e for e in entry_points(group="console_scripts") if e.name == "listhygiene")
    assert script.value == "listhygiene.cli:run"
    main_module = Path(sys.modules["listhygiene"].__file__ or "").parent / "cli" / "__main__.py"
    assert "run()" in main_module.read_text()
