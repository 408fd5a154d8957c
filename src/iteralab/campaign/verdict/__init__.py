"""The verdict on each pass: reads a pass's prediction file, the corpus copy and the reference pass of a campaign
folder; writes nothing itself, it returns the intrinsic verdict the runner journals (``evaluate.evaluate_pass``)."""
