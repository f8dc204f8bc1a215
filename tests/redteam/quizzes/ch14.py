"""Red team, quiz 14: answers assigned inside an if. Stopped by: only top-level literals count."""
if True:
    Q1 = "a"
