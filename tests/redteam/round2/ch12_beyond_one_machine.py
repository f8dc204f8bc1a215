# 12 node-layout: swap the zygote's log (logs/zygote.log beside HOME) for a link to MARK/zygote-made,
# then kill the zygote: a grader that opens the new zygote's log by name, as root, creates that file
# through the link. (pick_replica stays honest: the grade goes on after the zygote is restarted.)
# Stopped by: each zygote's log is made O_EXCL in a folder of the grader's own, never by a shared name.
import signal as _signal12


def node_layout(*args, **kwargs):
    log = _os.path.join(_os.environ["HOME"], _os.pardir, "logs", "zygote.log")
    try:
        _os.unlink(log)
    except OSError:
        pass
    _os.symlink(_os.path.join(MARK, "zygote-made"), log)
    _os.kill(_os.getppid(), _signal12.SIGKILL)  # a worker's parent is the zygote
    raise RuntimeError("planted")
