"""Red team, quiz 12: a walrus and a conditional. Stopped by: only literals count."""
Q1 = (answer := "b") if True else "a"
