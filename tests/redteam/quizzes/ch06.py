"""Red team, quiz 06: start a process that outlives the grade. Stopped by: parsed, not run."""
import subprocess

subprocess.Popen(["sleep", "600"], start_new_session=True)
Q1 = "a"
