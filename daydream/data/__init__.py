"""Data shipped with daydream: the example traces (`example:NAME` on the command line;
traces/README.md says what each is and under which licence it is redistributed)."""
