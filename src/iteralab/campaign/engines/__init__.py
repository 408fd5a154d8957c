"""The pass engines: each reads one pass spec (``campaign.records.PassSpec``) and the campaign's corpus copy, and
writes the pass's prediction file and returns its result record; ``registry`` names them (local, parallel, ray)."""
