from listhygiene.cli import run

run()
