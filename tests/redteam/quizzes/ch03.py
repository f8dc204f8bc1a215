"""Red team, quiz 03: a value computed by a call. Stopped by: only literals count."""
Q1 = str("b")
Q2 = __import__("os").environ.get("Q2", "a")
