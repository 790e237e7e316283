"""EDT workers: the slot host (launcher), Celery entry points, telemetry, learners."""
