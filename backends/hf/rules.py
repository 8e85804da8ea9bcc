"""Which tokens may come next: suppression and openai-whisper's timestamp rules.

Suppression is one precomputed boolean mask per situation (first step / later
steps) applied with `masked_fill`: transformers' processors rebuild it with
`torch.isin` over the vocabulary at every step, which costs ~3 ms per step on CPU.
"""

from __future__ import annotations

import torch

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
        mask = torch.zeros(vocab, dtype=torch.bool, device=device)
        mask[[t for t in banned if 0 <= t < vocab]] = True
        if timestamps:
            mask[special.no_timestamps] = True
        else:
            mask[self.ts_begin :] = True
        self.later = mask
        self.first = mask.clone()
        self.first[[220, special.eot]] = True  # no blank or empty transcript
        if timestamps:
            self.first[: self.ts_begin] = True  # start with a timestamp...
            self.first[self.ts_begin + MAX_INITIAL_TIMESTAMP + 1 :] = True  # ...early in the window

    def logprobs(self, logits: torch.Tensor, sampled: list[list[int]]) -> torch.Tensor:
        """Log-probabilities [batch, vocab] of what may come next after each row's `sampled`.

        Masks `logits` in place, then takes one log-softmax (renormalising only the rows
        the timestamp-preference rule changes).
        """
        first_step = not sampled[0]
        logits.masked_fill_(self.first if first_step else self.later, NEG_INF)
        if self.timestamps and not first_step:
            for row, tokens in enumerate(sampled):
                self._timestamp_pairs(logits[row], tokens)
        logprobs = torch.log_softmax(logits, dim=-1)
        if self.timestamps and not first_step:
            self._prefer_timestamps(logprobs)
        return logprobs

    def _timestamp_pairs(self, logits: torch.Tensor, tokens: list[int]) -> None:
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

    def _prefer_timestamps(self, logprobs: torch.Tensor) -> None:
        """If all timestamps together are likelier than any single text token, emit one."""
        timestamp_mass = torch.logsumexp(logprobs[:, self.ts_begin :], dim=-1)
        best_text = logprobs[:, : self.ts_begin].max(dim=-1).values
        for row in torch.nonzero(timestamp_mass > best_text).flatten().tolist():
            logprobs[row, : self.ts_begin] = NEG_INF
            logprobs[row] -= timestamp_mass[row]  # renormalise over the timestamps left
