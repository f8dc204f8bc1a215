"""The per-rank scheduling loop, how it receives messages, and its processes (chapters 02 and 06)."""

from .config import SchedulerConfig
from .io import LocalIO, SchedulerIO, ZmqIO
from .scheduler import Scheduler

__all__ = ["LocalIO", "Scheduler", "SchedulerConfig", "SchedulerIO", "ZmqIO"]
