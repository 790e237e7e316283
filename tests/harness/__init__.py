"""The live-cluster harness every live test and ``bench/`` use, in one place.

- ``processes``: the project's path, a subprocess's environment, processes that never
  outlive a test;
- ``waiting``: ``wait_for``, a deadline scaled by the machine's load and ended by the test's
  own (its timeout, scaled alike by tests/conftest.py); ``bound``, a duration asserted, scaled;
- ``redis``: private redis-servers and the ``store`` on the Redis a test module names;
- ``cluster``: slot workers, schedulers and a supervised web of a test's own, with fault
  injection (a host, a slot worker, a learner, a scheduler killed) and a watch on the job;
  a control worker alone (model checks, dataset preparations);
- ``stack``: one whole EDT (``edt_run``) for the run, driven through the ``edt`` CLI, and
  EDTs of a test's own, configured otherwise;
- ``accounts``: an unprivileged user to run EDT as;
- ``jobs`` and ``api``: a job as the tests submit and observe it, and its records read back
  through the REST API.

tests/conftest.py registers the fixtures; test modules import helpers from here, never from
one another (tests/test_docs.py checks).
"""
