"""The server's text side: tokenizer workers and the incremental detokenizer (chapter 02).

The package imports no tokenizer library: the launcher imports `process` for the workers' entry
points and never tokenizes, so transformers' tokenizer classes (~1.5 s of CPU) load in the workers
only. `PromptTokenizer` and the encoders are in `minisgl.tokenizer.tokenize`."""

from .detokenize import Detokenizer, IncrementalDecoder, TextStream

__all__ = ["Detokenizer", "IncrementalDecoder", "TextStream"]
