"""Models from the Hugging Face Hub, for users who are online (or have them cached).

Only CTranslate2 conversions are looked up by short name, through faster-whisper's own
name -> repository map; any `org/name` is taken as given: a CTranslate2 conversion, or a
transformers Whisper repository (openai/whisper-small) for the backends that read one.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvscribe.errors import ModelNotFoundError

# Every file a model folder of either format needs (kvscribe/models/formats.py), and no
# other weights: a transformers repository's pytorch_model.bin, TensorFlow and Flax copies
# stay on the hub.
_PATTERNS = [
    "config.json",
    "model.bin",
    "tokenizer.json",
    "vocabulary.*",
    "preprocessor_config.json",
    "generation_config.json",
    "model.safetensors",
]


def short_names() -> dict[str, str]:
    """Short model name -> hub repository, exactly as faster-whisper's `WhisperModel(name)`
    maps it (imported here, not at module import, since it loads the whole engine)."""
    try:
        import faster_whisper  # noqa: F401
    except ImportError as exc:
        raise ModelNotFoundError(
            "model names need faster-whisper, which is missing",
            subject="--model",
            hint="pip install faster-whisper, or pass --model PATH",
        ) from exc
    from kvscribe.adapters import faster_whisper as adapter

    return adapter.model_repositories()


def repo_for(name: str) -> str | None:
    """The hub repository a model name means, or None if it is not a hub name."""
    if name.count("/") == 1 and not name.startswith((".", "/")):
        return name  # an org/name id, taken as given (no short name has a slash)
    return short_names().get(name)


def fetch(name: str, repo: str) -> Path:
    """Local snapshot of `repo`: from the hub cache, else downloaded when online."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as exc:
        raise ModelNotFoundError(
            "not installed, and huggingface_hub is missing to fetch it",
            subject=name,
            hint="pip install huggingface_hub",
        ) from exc
    try:
        return Path(snapshot_download(repo, allow_patterns=_PATTERNS, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    except ValueError as exc:  # huggingface_hub's HFValidationError: not a repository id
        raise ModelNotFoundError(
            "not a model name, an existing path or a Hugging Face id (org/name)",
            subject=name,
            hint="check the spelling; `kvscribe models` lists the models available here",
        ) from exc
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise ModelNotFoundError(
            f"not in the Hugging Face cache ({repo}) and HF_HUB_OFFLINE is set",
            subject=name,
            hint="unset HF_HUB_OFFLINE once to download it, "
            "or pass --model PATH; `kvscribe models` lists what is here",
        )
    return _download(name, repo, snapshot_download)


def _download(name: str, repo: str, snapshot_download) -> Path:
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo, allow_patterns=_PATTERNS))
    except RepositoryNotFoundError as exc:
        raise ModelNotFoundError(
            f"no such model on the Hugging Face Hub ({repo})",
            subject=name,
            hint="`kvscribe models` lists the models available here",
        ) from exc
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise ModelNotFoundError(
            f"could not download {repo} (offline?)",
            subject=name,
            hint="connect once to fetch it, or pass --model PATH; "
            "`kvscribe models` lists what is here",
        ) from exc


def cached_repos() -> list[tuple[str, Path]]:
    """Whisper-looking repositories already in the local Hugging Face cache."""
    try:
        from huggingface_hub import scan_cache_dir
        from huggingface_hub.errors import CacheNotFound
    except ImportError:
        return []
    try:
        info = scan_cache_dir()
    except (CacheNotFound, OSError):
        return []
    found = []
    for repo in info.repos:
        if repo.repo_type == "model" and "whisper" in repo.repo_id.lower():
            newest = max(repo.revisions, key=lambda r: r.last_modified, default=None)
            if newest is not None:
                found.append((repo.repo_id, Path(newest.snapshot_path)))
    return sorted(found)
