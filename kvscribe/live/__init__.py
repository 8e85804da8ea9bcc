"""Live transcription: capture -> voice activity -> LocalAgreement commits (`kvscribe mic`)."""
