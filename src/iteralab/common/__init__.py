"""Helpers shared by every stage, holding no stage logic: reads any file to hash it (``sha256_file``); writes
any file atomically (temporary name, fsync, rename) and JSON deterministically (sorted keys, indented)."""
