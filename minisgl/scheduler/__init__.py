"""The per-rank scheduling loop, how it receives messages, and its processes (chapters 02 and 06).
A rank's config is `SchedulerConfig` (`minisgl/config.py`), checked once before any rank starts."""

from minisgl.config import SchedulerConfig

from .io import SchedulerIO, ZmqIO
from .local_io import LocalIO
from .scheduler import Scheduler

__all__ = ["LocalIO", "Scheduler", "SchedulerConfig", "SchedulerIO", "ZmqIO"]
