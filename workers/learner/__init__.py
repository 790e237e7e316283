"""The elastic learner: one process per (job, slot)."""
