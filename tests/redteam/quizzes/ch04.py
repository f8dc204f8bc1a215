"""Red team, quiz 04: a module-level __getattr__ that answers any question asked by name.
Stopped by: the file is parsed, not imported; a def is not an answer."""


def __getattr__(name):
    import importlib

    return getattr(importlib.import_module("solutions.quizzes.ch04"), name)
