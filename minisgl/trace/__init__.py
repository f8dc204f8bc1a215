"""A per-process timeline of a run (chapters 02, 06, 07 and 10): every process records spans and
instants of what it does at the engine's seams (messages, batches, forwards, collectives, text,
HTTP), writes them as a Chrome trace when it exits, and `merge` puts every process of the run on
one clock in one file that Perfetto opens; `plot` draws it for a notebook.

- `recorder.py`: `TRACE`, this process's recorder (off by default: `--trace DIR`, `LLM(trace=DIR)`);
- `chrome.py`: the Chrome trace JSON, and `merge` (`python -m minisgl.trace merge DIR`);
- `plot.py`: a matplotlib timeline, one lane per process.
"""

from .chrome import load, merge
from .plot import plot, step_window
from .recorder import TRACE, Recorder, check_trace_dir

__all__ = ["TRACE", "Recorder", "check_trace_dir", "load", "merge", "plot", "step_window"]
