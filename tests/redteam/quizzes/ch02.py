"""Red team, quiz 02: read the key file from disk. Stopped by: the file is parsed, not run (and the
sandbox user could not read the keys anyway)."""
_keys = {}
exec(open("solutions/quizzes/ch02.py").read(), _keys)
Q1 = _keys["Q1"]
