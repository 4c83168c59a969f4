from starforge.cli import run

run()
