"""Metrics of a replayed step: the summary keys (`summary`) and the bytes and busy time of
every link (`traffic`)."""
