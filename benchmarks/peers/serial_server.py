"""A one-model transcription server that serialises its requests, the way the popular
faster-whisper servers run it: faster-whisper's WhisperModel behind a lock, OpenAI's
`POST /v1/audio/transcriptions` (json) on Starlette and uvicorn. The peer
benchmarks/serve_load.py sets beside `kvscribe serve`.

    python serial_server.py --model-dir DIR --port PORT [--threads 2] [--beam-size 5]

Prints "listening on http://127.0.0.1:PORT" as it starts (poll the port). It imports nothing from
kvscribe, so it pays only faster-whisper's own start-up and loading.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import threading

import uvicorn
from faster_whisper import WhisperModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", required=True, help="a CTranslate2 Whisper model folder")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2 cpu_threads")
    parser.add_argument("--beam-size", type=int, default=5)
    return parser.parse_args()


def main() -> None:
    args = parse()
    model = WhisperModel(
        args.model_dir, device="cpu", compute_type="int8", cpu_threads=args.threads
    )
    lock = threading.Lock()

    def transcribe(audio: bytes) -> str:
        with lock:  # one request at a time on the one model
            segments, _ = model.transcribe(io.BytesIO(audio), beam_size=args.beam_size)
            return "".join(segment.text for segment in segments).strip()

    async def transcriptions(request: Request) -> JSONResponse:
        form = await request.form()
        audio = await form["file"].read()
        await form.close()
        return JSONResponse({"text": await asyncio.to_thread(transcribe, audio)})

    app = Starlette(routes=[Route("/v1/audio/transcriptions", transcriptions, methods=["POST"])])
    print(f"listening on http://127.0.0.1:{args.port}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
