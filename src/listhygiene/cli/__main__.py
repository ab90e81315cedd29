from listhygiene.cli import main

main(prog_name="listhygiene")
