"""Tests of app.programs (named progs so as not to read as a zoo of programs: bench/zoo.py)."""
