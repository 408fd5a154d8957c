"""The pass engines: each reads one pass spec (``campaign.records.PassSpec``) and the campaign's corpus copy, and
writes the pass's prediction file through the kind's pass sink (``campaign.kinds``, found by the spec's ``kind``)
and reports the pass's result; ``registry`` names them (local, parallel, ray) and hands the runner typed results."""
