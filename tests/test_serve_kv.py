"""The server's KV budget: what a row reserves on each engine, and how the ledger admits
rows (kvscribe/serve/kv_ledger.py). The budget under load through a real server is in
tests/test_serve.py."""

from __future__ import annotations

import pytest

from kvscribe.contract import DecodeRequest
from kvscribe.provenance import ESTIMATED, MEASURED
from kvscribe.serve.kv_ledger import KvLedger, RowCost, describe_budget
from tests import loaded

ROW = RowCost(10_000_000, MEASURED)


def test_the_ledger_admits_rows_while_they_fit_and_one_request_always():
    ledger = KvLedger(25_000_000, ROW)
    assert ledger.rows_free(8) == 2
    first = ledger.reserve(1)
    assert ledger.rows_free(8) == 1 and ledger.admits(1) and not ledger.admits(2)
    second = ledger.reserve(1)
    assert ledger.rows_free(8) == 0 and not ledger.admits(1)
    ledger.release(first)
    ledger.release(second)
    assert ledger.reserved == 0 and ledger.peak == 20_000_000
    # Below one row, one request still runs alone, as a file run decodes a chunk at a time.
    tight = KvLedger(1, ROW)
    assert tight.rows_free(4) == 1 and tight.admits(16)
    tight.reserve(1)
    assert tight.rows_free(4) == 0 and not tight.admits(1)


def test_without_a_budget_or_a_countable_engine_everything_is_admitted():
    for ledger in (KvLedger(None, ROW), KvLedger(1, None)):
        ledger.reserve(3)
        assert ledger.rows_free(8) == 8 and ledger.admits(100)
    assert "none" in describe_budget(KvLedger(None, ROW))
    assert "2 row(s) of 10.00 MB per row (measured)" in describe_budget(KvLedger(25_000_000, ROW))


@pytest.mark.model
def test_ctranslate2_estimates_a_row_from_the_models_dimensions():
    backend = loaded.backend("ctranslate2")
    one, kind = backend.kv_row_bytes(DecodeRequest(beam_size=1))
    five, _ = backend.kv_row_bytes(DecodeRequest(beam_size=5))
    assert kind == ESTIMATED
    assert five == 5 * one  # a copy of everything per beam, as CTranslate2 keeps it


@pytest.mark.model
@pytest.mark.transformers
def test_a_leaner_cache_policy_reserves_less_per_row_measured():
    """tiny-vram's row (a window with sinks, Q8_0, one shared cross-attention copy) holds a
    fraction of no-loss's full cache: the same budget admits more rows."""
    request = DecodeRequest(beam_size=1)
    full, full_kind = loaded.backend("transformers", "no-loss").kv_row_bytes(request)
    lean, lean_kind = loaded.backend("transformers", "tiny-vram").kv_row_bytes(request)
    assert full_kind == lean_kind == MEASURED
    assert 0 < lean < full / 3, (lean, full)
