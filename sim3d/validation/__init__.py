"""sim3d against reality: published runs (`published_row` turns a row into a scenario,
`published` predicts and compares: `python -m sim3d.validation`) and measured NCCL bus
bandwidths (`nccl_check`)."""
