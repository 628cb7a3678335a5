from daydream._start import run

run()
