"""Measuring a variant: quality metrics, latency meters, contention, energy, memory footprint
and the head-to-head rounds."""
