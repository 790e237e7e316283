"""/platform/rest/deeplearning/v1/ and /platform/rest/conductor/v1/: the WMLA-compatible
subset (edtweb/api/wmla.py)."""

from __future__ import annotations

from django.urls import path, re_path

from edtweb.api import wmla, wmla_hpo

app_name = "wmla"

urlpatterns = [
    path("execs/frameworks", wmla.Frameworks.as_view(), name="frameworks"),
    path("execs", wmla.Execs.as_view(), name="execs"),
    path("execs/<int:pk>", wmla.ExecDetail.as_view(), name="exec"),
    path("execs/<int:pk>/stop", wmla.ExecStop.as_view(), name="exec-stop"),
    path("execs/<int:pk>/log", wmla.ExecLog.as_view(), name="exec-log"),
    path("execs/<int:pk>/result", wmla.ExecResult.as_view(), name="exec-result"),
    path("hypersearch", wmla_hpo.Hypersearches.as_view(), name="hypersearches"),
    path("hypersearch/<str:name>", wmla_hpo.HypersearchDetail.as_view(), name="hypersearch"),
    re_path(r"^(?P<rest>.*)$", wmla.slash_tolerant, name="slash-tolerant"),
]

# /platform/rest/conductor/v1/: what the WMLA notebooks call of Spectrum Conductor
conductor_urlpatterns = [
    path("auth/logon", wmla.ConductorLogon.as_view(), name="conductor-logon"),
    path("instances/<str:sig>/applications", wmla.ConductorApplications.as_view(),
         name="conductor-applications"),
    path("instances/<str:sig>/applications/<int:pk>/logs/<str:stream>/download",
         wmla.ConductorDriverLog.as_view(), name="conductor-driver-log"),
]  # fmt: skip
