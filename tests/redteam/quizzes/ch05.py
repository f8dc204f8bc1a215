"""Red team, quiz 05: end the grader's process with success while it imports this file.
Stopped by: the file is parsed, not run."""
import os

os._exit(0)
