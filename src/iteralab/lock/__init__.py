"""The input lock: reads a protocol's corpus or datasets, the model's files and the catalog; writes the lock entry
of their fingerprints (``inputs.lock``), checks them again before a run, and carries the model's files into a
campaign folder (``carry``)."""
