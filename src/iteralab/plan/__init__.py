"""Pre-registration, before any timing: the protocol, the corpus, its length strata and the rotated pass order.
Reads the protocol TOML and the corpus / tuning files it names (CSV, JSONL or Parquet); writes the protocol's
lock ``<protocol>.toml.lock.json`` and, when asked (``write_corpus``), a corpus as ``id,text,label`` CSV."""
