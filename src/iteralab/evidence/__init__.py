"""Judges a campaign from its stored files: reads journal.jsonl, predictions/, inputs/, campaign.json,
manifest.json, raw_table.csv (and the model's config.json for memory); writes raw_table.csv, pass_excluded
journal events, the seal SHA256SUMS + SHA256SUMS.sha256, the .tar.gz bundle, a rerun's comparison.md/.json."""
