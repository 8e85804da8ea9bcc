"""What `kvscribe serve` was asked: the engine (as every command's), where it listens, who
may call it, and its limits; validated once, then frozen."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from kvscribe.controls import in_range
from kvscribe.errors import UsageError
from kvscribe.options import EngineOptions

API_KEY_VARIABLE = "KVSCRIBE_API_KEY"


@dataclass(frozen=True)
class ServeOptions(EngineOptions):
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port, printed
    api_key_file: Path | None = None
    max_body_mb: float = 25.0  # MiB, as OpenAI's upload limit
    max_audio_minutes: float = 180.0
    lanes: int | None = None  # engines loaded; None: one per core on a CPU (cli/serve.py)
    max_queue: int = 64  # requests waiting to start
    max_sessions: int | None = None  # realtime sessions open at once; None: max_queue
    upload_timeout: float = 120.0  # seconds
    kv_budget_mb: float | None = None  # None: the profile's kv_budget_mb, else no budget

    def __post_init__(self) -> None:
        self._check_engine()
        if not 0 <= self.port <= 65535:
            raise UsageError(
                "must be between 0 and 65535", subject="--port", hint=f"got {self.port}"
            )
        in_range("--max-body-mb", self.max_body_mb, 0.01, 4096)
        in_range("--max-audio-minutes", self.max_audio_minutes, 0.01, 24 * 60)
        in_range("--max-queue", self.max_queue, 1, 100_000)
        if self.max_sessions is not None:
            in_range("--max-sessions", self.max_sessions, 1, 100_000)
        if self.lanes is not None:
            in_range("--lanes", self.lanes, 1, 64)
        in_range("--upload-timeout", self.upload_timeout, 1, 3600)
        if self.kv_budget_mb is not None:
            in_range("--kv-budget-mb", self.kv_budget_mb, 0.001, 10**7)
        if self.api_key() is None and not self.loopback():
            raise UsageError(
                f"listening on {self.host} needs an API key",
                subject="--host",
                hint=f"set {API_KEY_VARIABLE} or pass --api-key-file FILE, or bind 127.0.0.1",
            )

    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def api_key(self) -> str | None:
        """The key clients must send: the file's first line, else the environment's; never
        from the command line, where other users of the machine could read it."""
        if self.api_key_file is not None:
            try:
                key = self.api_key_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise UsageError(
                    f"cannot be read: {exc.strerror}",
                    subject=str(self.api_key_file),
                    hint="pass a readable file holding the key",
                ) from None
            if not key:
                raise UsageError(
                    "is empty", subject=str(self.api_key_file), hint="write the key in it"
                )
            return key
        return os.environ.get(API_KEY_VARIABLE) or None

    def sessions_at_once(self) -> int:
        """Each session has at most one decode waiting in the queue: past --max-queue of
        them, their decodes wait their turn and their audio is dropped."""
        return self.max_sessions if self.max_sessions is not None else self.max_queue
