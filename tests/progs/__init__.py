"""Tests of app.programs (named progs: tests/programs.py is the zoo module)."""
