"""Token ids -> text, a few tokens at a time, for every request in flight (chapter 02).

Two things make streaming text harder than `tokenizer.decode(all_ids)` at the end:
- One character can span several tokens. Byte-level BPE gives a Chinese character or an emoji
  two to four byte tokens; decoding only some of them yields U+FFFD. `IncrementalDecoder` holds
  the new tokens back until they decode to complete characters.
- A stop string can arrive split over several tokens ("Obs" + "ervation:"). `TextStream` holds
  back any tail that could still grow into a stop string, so a stop string never reaches the
  client, not even its first half; once it completes, the text ends just before it.

`Detokenizer` keeps one `TextStream` per request and turns the scheduler's `TokenOutput`s into
the `TextOutput`s the API streams.
"""

from __future__ import annotations

from typing import Any

from minisgl.message import AbortRequest, DetokenizeStart, TextOutput, TokenOutput

REPLACEMENT_CHAR = "\ufffd"  # what a decoder yields for an incomplete UTF-8 sequence


class IncrementalDecoder:
    """One request's token ids in, its text out in pieces that never split a character."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        # ids[:text_end] are already text. The new ids are decoded together with the ids of the
        # previous piece, ids[context_start:text_end], because a token's text can depend on its
        # left neighbour (SentencePiece drops the leading space of a sequence's first word).
        self.context_start = 0
        self.text_end = 0

    def push(self, token_ids: list[int]) -> str:
        """Add tokens; return the new text, or "" while a character is still incomplete."""
        self.ids += token_ids
        return self._decode(final=False)

    def flush(self) -> str:
        """The request ended: return whatever is left, even an incomplete character."""
        return self._decode(final=True)

    def _decode(self, final: bool) -> str:
        if self.text_end == len(self.ids):
            return ""
        context = self._text(self.ids[self.context_start : self.text_end])
        text = self._text(self.ids[self.context_start :])
        if text.endswith(REPLACEMENT_CHAR) and not final:
            return ""  # the last token ends inside a character: wait for its remaining bytes
        self.context_start, self.text_end = self.text_end, len(self.ids)
        return text[len(context) :]

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


class TextStream:
    """One request's text as it may be shown: complete characters, cut before the first stop string."""

    def __init__(self, tokenizer: Any, stop: list[str]) -> None:
        self.decoder = IncrementalDecoder(tokenizer)
        self.stop = [s for s in stop if s]
        self.text = ""  # everything decoded so far
        self.sent = 0  # text[:sent] has been handed out; no stop string starts before it
        self.num_tokens = 0
        self.stopped = False  # a stop string completed; nothing more will be shown

    def push(self, token_ids: list[int], final: bool = False) -> str:
        """Add tokens (`final`: the last ones); return the text that became safe to show."""
        self.num_tokens += len(token_ids)
        self.text += self.decoder.push(token_ids)
        if final:
            self.text += self.decoder.flush()
        stop_at = self._find_stop()
        if stop_at is not None:
            self.stopped = True
            end = stop_at
        elif final:
            end = len(self.text)
        else:
            end = len(self.text) - self._stop_prefix_len()
        piece, self.sent = self.text[self.sent : end], end
        return piece

    def _find_stop(self) -> int | None:
        """Where the earliest complete stop string starts; it cannot start before `sent`."""
        hits = [i for i in (self.text.find(s, self.sent) for s in self.stop) if i >= 0]
        return min(hits) if hits else None

    def _stop_prefix_len(self) -> int:
        """Length of the longest tail of `text` that is the start of some stop string."""
        longest = 0
        for stop in self.stop:
            for n in range(min(len(stop) - 1, len(self.text) - self.sent), longest, -1):
                if self.text.endswith(stop[:n]):
                    longest = n
                    break
        return longest


class Detokenizer:
    """Every request's `TextStream`, fed by the scheduler's `TokenOutput`s.

    A request's `DetokenizeStart` (from a tokenizer worker) and its first `TokenOutput` (from
    rank 0) travel different sockets; outputs that win the race wait in `early` for their start.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.streams: dict[int, TextStream] = {}
        self.prompt_tokens: dict[int, int] = {}
        self.early: dict[int, list[TokenOutput]] = {}

    def handle(self, message: DetokenizeStart | TokenOutput) -> tuple[list[TextOutput], list[AbortRequest]]:
        """Text for the API, and aborts for rank 0 (a stop string ended a request the scheduler
        would otherwise keep generating for)."""
        if isinstance(message, DetokenizeStart):
            if message.error is not None:
                return [TextOutput(message.uid, "", [], True, "error", message.error, message.prompt_tokens)], []
            self.streams[message.uid] = TextStream(self.tokenizer, message.stop)
            self.prompt_tokens[message.uid] = message.prompt_tokens
            texts: list[TextOutput] = []
            aborts: list[AbortRequest] = []
            for output in self.early.pop(message.uid, []):
                more_texts, more_aborts = self._on_tokens(output)
                texts += more_texts
                aborts += more_aborts
            return texts, aborts
        if message.uid not in self.streams:
            self.early.setdefault(message.uid, []).append(message)
            return [], []
        return self._on_tokens(message)

    def fail(
        self, message: DetokenizeStart | TokenOutput, error: Exception
    ) -> tuple[list[TextOutput], list[AbortRequest]]:
        """`handle(message)` raised: end that request alone with an error, and abort it at rank 0
        unless this was its last output."""
        uid = message.uid
        self.streams.pop(uid, None)
        self.early.pop(uid, None)
        prompt_tokens = self.prompt_tokens.pop(uid, 0)
        reason = f"detokenizing failed: {type(error).__name__}: {error}"
        last = isinstance(message, TokenOutput) and message.finished
        return [TextOutput(uid, "", [], True, "error", reason, prompt_tokens)], [] if last else [AbortRequest(uid)]

    def _on_tokens(self, output: TokenOutput) -> tuple[list[TextOutput], list[AbortRequest]]:
        uid, stream = output.uid, self.streams[output.uid]
        if output.finished:  # the scheduler is done with uid: forget it after this output
            del self.streams[uid]
            prompt_tokens = self.prompt_tokens.pop(uid)
        else:
            prompt_tokens = self.prompt_tokens[uid]
        if stream.stopped:
            return [], []  # already ended by a stop string; these tokens were in flight
        if output.error is not None:
            return [TextOutput(uid, "", [], True, "error", output.error, prompt_tokens, stream.num_tokens)], []
        text = stream.push(output.token_ids, final=output.finished)
        if stream.stopped:
            # the scheduler still runs uid unless this was its last token: abort it to free its KV
            aborts = [] if output.finished else [AbortRequest(uid)]
            stopped = TextOutput(uid, text, output.token_ids, True, "stop", None, prompt_tokens, stream.num_tokens)
            return [stopped], aborts
        reason = output.finish_reason if output.finished else None
        return [TextOutput(uid, text, output.token_ids, output.finished, reason, None, prompt_tokens,
                           stream.num_tokens)], []
