"""Runs the locked protocol: reads the protocol and its lock, the corpus (and tuning file) and the model; writes
the campaign folder (inputs/ copies: protocol.toml, protocol.toml.lock.json, corpus.csv; campaign.json,
manifest.json, journal.jsonl, predictions/<pass_id>.parquet), whose one typed reader is ``folder.py``.
Its modules are the folder layer; ``engines/`` runs the passes, ``verdict/`` judges each, ``runner`` drives both."""
