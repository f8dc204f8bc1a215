"""Red team, quiz 09: annotated and chained assignments, which look like answers. Stopped by: only
plain `Qn = <literal>` lines count; the whole file scores 0."""
Q1: int = 65
Q2 = Q3 = 8.0
