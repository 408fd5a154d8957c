"""Chooses the configuration to rent: reads one or more campaign folders (raw_table.csv, journal.jsonl,
inputs/protocol.toml, campaign.json, manifest.json) and the package catalog; writes stats.txt, stats.json,
decision.md, decision.json and report.html into the output folder."""
