"""Can an unprivileged user run this interpreter? The bundle's tests run learner code as `nobody`
where it can (as run_autograder does on Gradescope), and say why not where it cannot."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess

USER = "nobody"


def sandbox_user_problem(python: str) -> str | None:
    """Why `USER` cannot run `python` with torch here (None: it can)."""
    if os.geteuid() != 0:
        return "not root: learner code runs as this user, in processes apart"
    try:
        # the user's own group only, as the grader's sandbox runs it: keeping root's group would let
        # group permissions through that the sandbox never has
        done = subprocess.run([python, "-c", "import torch"], user=USER, group=grp.getgrgid(pwd.getpwnam(USER).pw_gid).gr_name,
                              extra_groups=[], capture_output=True, text=True, timeout=120, cwd="/")
    except (OSError, subprocess.SubprocessError) as error:
        return f"{USER} cannot start {python}: {error}"
    if done.returncode != 0:
        return (f"{USER} cannot run {python} with torch (installed where only root can read?): "
                f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return None
