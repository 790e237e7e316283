"""What learners, slot workers and the scheduler agree on, and nothing else: Redis key
names, the connection, the retry rules, a job's shared state as learners and slot tasks
write it, the slot registry, leases and exit codes (docs/architecture.md, "Layering").

It sits beneath ``workers/`` and ``scheduler/``: both import it, it imports neither (nor
Django, nor Celery), so a learner process loads no scheduler code.
"""
