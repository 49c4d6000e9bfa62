"""The repository's command-line tools, each run as ``python scripts/<name>.py`` (the Makefile
says which); a package so that one script imports another as ``from scripts import …``."""
