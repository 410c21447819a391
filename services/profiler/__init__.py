"""The profiler: roofline analysis of the live model, target ranking, fingerprints, before/after decode speed."""
