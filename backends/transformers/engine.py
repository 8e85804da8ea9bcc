"""The loaded PyTorch Whisper and what a decoding plan calls on it: the encoder, the cross-
attention fill, the word aligner, a speech chunk's log-mel, language detection, and the
plan itself (kvscribe.stepped.longform.WindowPlan) for the backend's paths.

The backend (backends/transformers/__init__.py) owns settings, reports and which path a request
takes; this owns the torch work, on one device and in one dtype.
"""

from __future__ import annotations

from kvscribe.contract import DecodeRequest


class TorchWhisper:
    def __init__(self, network, vocab, device: str, dtype, self_specs, cross_spec):
        self.network = network
        self.vocab = vocab
        self.special = vocab.special
        self.device = device
        self.dtype = dtype
        self.self_specs = self_specs
        self.cross_spec = cross_spec
        # The last window encoded on the CPU and its output: language detection encodes a
        # file's first window, which its decode then encodes again (a whole encoder pass).
        self._last_window: tuple[object, object] | None = None

    def plan(
        self,
        language: str,
        task: str,
        beams: int,
        request: DecodeRequest,
        timestamps: bool,
        condition: bool,
    ):
        """The decoding plan for one input. `timestamps` False: batched chunks, decoded
        without them and every word aligned."""
        import torch

        from kvscribe.backends.transformers.decoder import PolicyDecoder
        from kvscribe.decoding import PROMPT_MAX
        from kvscribe.stepped.longform import WindowPlan
        from kvscribe.stepped.rules import TokenRules
        from kvscribe.stepped.search import SearchSetup

        config = self.network.config
        special = self.special
        rules = TokenRules(
            special,
            config.vocab_size,
            self.vocab.suppressed(request.suppress_tokens),
            timestamps=timestamps,
            device=self.device,
        )
        setup = SearchSetup(
            PolicyDecoder(self.network),
            rules,
            special.eot,
            special.no_speech,
            torch.device(self.device),
        )
        bytes_per_position = 2 * config.decoder_layers * config.d_model * self.dtype.itemsize
        return WindowPlan(
            encode=self.encode,
            setup=setup,
            fill_cross=self.fill_cross,
            special=special,
            sot_sequence=self.vocab.sot_sequence(language, task),
            self_specs=self.self_specs,
            cross_spec=self.cross_spec,
            beams=beams,
            condition=condition,
            text_ctx=config.max_target_positions,
            kv_bytes_per_position=bytes_per_position,
            fallback=request.fallback,
            align_words=self.aligner() if request.word_timestamps or not timestamps else None,
            hotwords=tuple(self.vocab.prompt_tokens(request.hotwords)[:PROMPT_MAX]),
            max_new_tokens=request.max_new_tokens,
            timestamps=timestamps,
        )

    def encode(self, window_mel):
        """[n_mels, 3000] (one window) or [chunks, n_mels, 3000] -> [chunks, 1500, d].

        On the CPU a batch is encoded a chunk at a time: the same values (bit for bit on
        the machines measured), no slower, and the activations of one window (tiny: 64 MB)
        instead of a batch's (16 chunks: 400 MB), so memory does not depend on how many
        chunks a file fills."""
        import torch

        with torch.inference_mode():
            batched = window_mel if window_mel.dim() == 3 else window_mel[None]
            features = batched.to(self.dtype)
            encoder = self.network.model.encoder
            if self.device != "cpu":
                return encoder(features)
            return torch.cat([self._encoded_window(encoder, one[None]) for one in features])

    def _encoded_window(self, encoder, window):
        """`encoder(window)`, or the last window's output where `window` is that window again,
        equal value for value: the encoder is a pure function of its input, so it is the
        output it would give (one entry, compared exactly: nothing else is kept)."""
        import torch

        last = self._last_window
        if last is not None and last[0].shape == window.shape and torch.equal(last[0], window):
            return last[1]
        encoded = encoder(window)
        self._last_window = (window.clone(), encoded)  # not a view holding the whole batch
        return encoded

    def fill_cross(self, cross, encoded) -> None:
        """The encoder output's cross-attention K/V through the decoder's projections."""
        cross.fill(encoded, self.network.model.decoder)

    def aligner(self):
        """Word times from the alignment heads' cross-attention (None where the module is
        not in this install)."""
        try:
            from kvscribe.backends.transformers.alignment import WordAligner
        except ImportError:
            return None
        return WordAligner(self.network, self.special, self.vocab.text, self.device, self.dtype)

    def chunk_mel(self, samples):
        """The first 30 s window of `samples` (one speech chunk, a numpy array)."""
        import torch

        from kvscribe.audio.mel import FRAMES_PER_WINDOW, log_mel

        with torch.inference_mode():
            mel = log_mel(
                torch.from_numpy(samples).to(self.device), self.network.config.num_mel_bins
            )
        return mel[:, :FRAMES_PER_WINDOW]

    def silent_chunk(self):
        """An encoder output of one chunk, all zeros: what a KV size probe decodes."""
        import torch

        config = self.network.config
        shape = (1, config.max_source_positions, config.d_model)
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    def detect_language(self, mel) -> tuple[str, float]:
        """The language of `mel`'s first window, and its probability."""
        import torch

        from kvscribe.audio.mel import FRAMES_PER_WINDOW
        from kvscribe.backends.transformers.decoder import PolicyDecoder
        from kvscribe.stepped.language import detect_language

        encoded = self.encode(mel[:, :FRAMES_PER_WINDOW])
        decoder = PolicyDecoder(self.network)
        specs = (self.self_specs, self.cross_spec)
        device = torch.device(self.device)
        return detect_language(decoder, self.fill_cross, encoded, self.special, *specs, device)
