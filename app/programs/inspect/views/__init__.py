"""The inspect views, one module each with a `VIEW` (`app.programs.inspect.view.View`).

A module added here is a new view: the registry finds it, the API answers it with its model,
and the command line offers it and prints it. Nothing else needs to change.
"""
