"""`kvscribe serve`: the OpenAI audio API over one loaded backend (docs/server.md).

The web stack (Starlette on uvicorn, python-multipart) is imported only here and only by
the `serve` command, so `kvscribe --help` and file runs start as fast without it.

- `api_errors.py`: OpenAI-shaped errors, and kvscribe's errors mapped to their statuses.
- `forms.py`: a multipart request read into a TranscriptionAsk, its upload spooled privately.
- `body.py`: the body's limit, and an upload read to its end before any answer.
- `scheduler.py`: the engine lanes, where every request's audio is decoded.
- `kv_ledger.py`: the KV budget admitted work reserves its rows' bytes in.
- `responses.py`: a finished transcript in each response format.
- `metrics.py`: counters and histograms, in Prometheus' text format.
- `app.py`: the routes.
"""
