"""The body of one scheduler rank process: build the engine, report ready (or why not), loop."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from multiprocessing.queues import Queue

from minisgl.engine.engine import Engine
from minisgl.utils import reporting_start_failure

from .config import SchedulerConfig
from .io import ZmqIO
from .scheduler import Scheduler


def run_scheduler_process(config: SchedulerConfig, ack_queue: Queue) -> None:
    """Entry point of rank `config.tp_info.rank`. Puts ("ready" | "error", rank, detail) on `ack_queue`."""
    rank = config.tp_info.rank
    logging.basicConfig(level=os.environ.get("MINISGL_LOG_LEVEL", "WARNING"), format=f"[rank {rank}] %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the launcher stops us
    exit_when_parent_dies()
    with reporting_start_failure(ack_queue, rank):
        engine = Engine(config)
        io = ZmqIO(config.tp_info, engine.cpu_group, config.requests_addr, config.outputs_addr, config.broadcast_addr)
        scheduler = Scheduler(config, engine, io)
    ack_queue.put(("ready", rank, f"{engine.kv_pool.allocator.num_pages} KV pages"))
    try:
        scheduler.run_forever()
    except Exception as error:
        # One line, not a traceback: when a peer rank dies, every other rank's next collective
        # fails, and the launcher already names the one that died. MINISGL_LOG_LEVEL=DEBUG shows more.
        logging.error("stopped: %s: %s", type(error).__name__, str(error).splitlines()[0] if str(error) else "")
        logging.debug("traceback", exc_info=True)
        raise SystemExit(1) from None
    finally:
        io.close()
        engine.shutdown()


def exit_when_parent_dies() -> None:
    """No orphans: if the launching process disappears (even by kill -9), this process exits too.
    Every child of the server calls it (ranks, tokenizers, detokenizer)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watchdog").start()
