"""Red team, quiz 07: an f-string answer (code, not a literal). Stopped by: only literals count."""
Q1 = f"{'b'}"
