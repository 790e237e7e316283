"""The live scheduler: the decision loop (``loop.py``), the one snapshot builder
(``snapshot.py``) and the per-job controller (``job.py``), behind the ports of
``ports.py`` (docs/architecture.md, "One decision's path"). Nothing here imports Django or
Celery: the web's side of the ports is ``edtweb/training/live_adapter.py``.
"""
