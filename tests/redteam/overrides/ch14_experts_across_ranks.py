# 14 dispatch-plan: exit with success the moment the module is imported. Stopped by: importing the
# learner's module happens inside a job; a SystemExit there is that job's failure, nothing more.
import sys as _sys14

_sys14.exit(0)
