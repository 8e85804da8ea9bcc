"""Which tokens may come next: suppression and openai-whisper's timestamp rules.

Suppression is one precomputed boolean mask per situation (first step / later
steps) applied in place: transformers' processors rebuild it with `torch.isin` over the
vocabulary at every step, which costs ~3 ms per step on CPU. The masks and logits are
torch's on a torch device, numpy's when `device` is None (kvscribe.arrays).
"""

from __future__ import annotations

from kvscribe import arrays
from kvscribe.models.vocab import SpecialTokens

MAX_INITIAL_TIMESTAMP = 50  # the first timestamp is at most 1.00 s
NEG_INF = float("-inf")


class TokenRules:
    def __init__(
        self, special: SpecialTokens, vocab: int, suppress: list[int], timestamps: bool, device
    ) -> None:
        self.special = special
        self.timestamps = timestamps
        self.ts_begin = special.timestamp_begin
        banned = [*suppress, special.translate, special.transcribe, special.sot, special.sot_prev]
        if special.no_speech >= 0:
            banned.append(special.no_speech)
        mask = arrays.bool_mask(vocab, device)
        mask[[t for t in banned if 0 <= t < vocab]] = True
        if timestamps:
            mask[special.no_timestamps] = True
        else:
            mask[self.ts_begin :] = True
        self.later = mask
        self.first = arrays.owned(mask)
        self.first[[220, special.eot]] = True  # no blank or empty transcript
        if timestamps:
            self.first[: self.ts_begin] = True  # start with a timestamp...
            self.first[self.ts_begin + MAX_INITIAL_TIMESTAMP + 1 :] = True  # ...early in the window

    def logprobs(self, logits, sampled: list[list[int]]):
        """Log-probabilities [batch, vocab] of what may come next after each row's `sampled`.

        Masks `logits` in place, then takes one log-softmax (renormalising only the rows
        the timestamp-preference rule changes).
        """
        first_step = not sampled[0]
        arrays.mask_(logits, self.first if first_step else self.later, NEG_INF)
        if self.timestamps and not first_step:
            for row, tokens in enumerate(sampled):
                self._timestamp_pairs(logits[row], tokens)
        logprobs = arrays.log_softmax(logits)
        if self.timestamps and not first_step:
            self._prefer_timestamps(logprobs)
        return logprobs

    def _timestamp_pairs(self, logits, tokens: list[int]) -> None:
        """Timestamps come in pairs (end, start) and never go backwards."""
        ts_begin = self.ts_begin
        last_ts = tokens[-1] >= ts_begin
        before_ts = len(tokens) < 2 or tokens[-2] >= ts_begin
        if last_ts:
            if before_ts:
                logits[ts_begin:] = NEG_INF  # a pair just closed: text or end next
            else:
                logits[: self.special.eot] = NEG_INF  # a lone timestamp: another must follow
        stamps = [t for t in tokens if t >= ts_begin]
        if stamps:
            floor = stamps[-1] if (last_ts and not before_ts) else stamps[-1] + 1
            logits[ts_begin:floor] = NEG_INF

    def _prefer_timestamps(self, logprobs) -> None:
        """If all timestamps together are likelier than any single text token, emit one."""
        timestamp_mass = arrays.logsumexp(logprobs[:, self.ts_begin :])
        best_text = arrays.row_max(logprobs[:, : self.ts_begin])
        for row in arrays.true_rows(timestamp_mass > best_text):
            logprobs[row, : self.ts_begin] = NEG_INF
            logprobs[row] -= timestamp_mass[row]  # renormalise over the timestamps left
