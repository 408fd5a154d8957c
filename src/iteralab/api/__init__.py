"""The Python face of the command line, on the same code: reads a campaign folder (raw_table.csv, journal.jsonl,
predictions/, campaign.json, manifest.json, decision.json, the seal) into Arrow tables and typed records; locks,
runs, decides and reports as the commands do (writing what they write); exports a sealed campaign to MLflow.
``iteralab`` re-exports its names lazily (``iteralab.__all__``)."""
