"""Tests of app.programs (named progs so as not to read as the zoo of programs: tests/zoo.py)."""
