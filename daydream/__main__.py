from daydream.cli import run

run()
