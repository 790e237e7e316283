"""/api/v1/: every route here is in the OpenAPI schema (tests/test_openapi.py checks)."""

from __future__ import annotations

from django.urls import path, re_path

from edtweb.api import auth, cluster, datasets, jobs, modeldefs, sweeps, tenancy
from edtweb.api.errors import unknown_endpoint

app_name = "api"

urlpatterns = [
    path("auth/token/", auth.TokenView.as_view(), name="token"),
    path("auth/me/", auth.Me.as_view(), name="me"),
    path("datasets/", datasets.DatasetList.as_view(), name="datasets"),
    path("datasets/register/", datasets.DatasetRegister.as_view(), name="dataset-register"),
    path("datasets/uploads/", datasets.UploadStart.as_view(), name="upload-start"),
    path("datasets/uploads/<int:pk>/", datasets.UploadChunk.as_view(), name="upload"),
    path(
        "datasets/uploads/<int:pk>/complete/",
        datasets.UploadComplete.as_view(),
        name="upload-complete",
    ),
    path("datasets/<int:pk>/", datasets.DatasetDetail.as_view(), name="dataset"),
    path(
        "datasets/<int:pk>/thumbnails/<str:name>",
        datasets.DatasetThumbnail.as_view(),
        name="dataset-thumbnail",
    ),
    path("models/", modeldefs.ModelList.as_view(), name="models"),
    path("models/<int:pk>/", modeldefs.ModelDetail.as_view(), name="model"),
    path("models/<int:pk>/source/", modeldefs.ModelSource.as_view(), name="model-source"),
    path("jobs/", jobs.JobList.as_view(), name="jobs"),
    path("jobs/compare/", sweeps.JobCompare.as_view(), name="jobs-compare"),
    path("jobs/<int:pk>/", jobs.JobDetail.as_view(), name="job"),
    path("jobs/<int:pk>/priority/", jobs.JobPriority.as_view(), name="job-priority"),
    path(
        "jobs/<int:pk>/priority/preview/",
        jobs.JobPriorityPreview.as_view(),
        name="job-priority-preview",
    ),
    path("jobs/<int:pk>/stop/", jobs.JobStop.as_view(), name="job-stop"),
    path("jobs/<int:pk>/events/", jobs.JobEvents.as_view(), name="job-events"),
    path("jobs/<int:pk>/metrics/", jobs.JobMetrics.as_view(), name="job-metrics"),
    path(
        "jobs/<int:pk>/metrics/records/",
        jobs.JobMetricRecords.as_view(),
        name="job-metric-records",
    ),
    path("jobs/<int:pk>/logs/", jobs.JobLogs.as_view(), name="job-logs"),
    path("jobs/<int:pk>/logs/<str:slot>/", jobs.JobLog.as_view(), name="job-log"),
    path("jobs/<int:pk>/checkpoints/", jobs.JobCheckpoints.as_view(), name="job-checkpoints"),
    path("jobs/<int:pk>/files/<str:name>", jobs.JobFile.as_view(), name="job-file"),
    path("sweeps/", sweeps.SweepList.as_view(), name="sweeps"),
    path("sweeps/<int:pk>/", sweeps.SweepDetail.as_view(), name="sweep"),
    path("sweeps/<int:pk>/stop/", sweeps.SweepStop.as_view(), name="sweep-stop"),
    path("sweeps/<int:pk>/resume/", sweeps.SweepResume.as_view(), name="sweep-resume"),
    path("sweeps/<int:pk>/clone/", sweeps.SweepClone.as_view(), name="sweep-clone"),
    path("cluster/slots/", cluster.Slots.as_view(), name="cluster-slots"),
    path("cluster/allocations/", cluster.Allocations.as_view(), name="cluster-allocations"),
    path("cluster/queue/", cluster.Queue.as_view(), name="cluster-queue"),
    path("cluster/decisions/", cluster.Decisions.as_view(), name="cluster-decisions"),
    path("cluster/shares/", cluster.Shares.as_view(), name="cluster-shares"),
    path("cluster/shares/preview/", tenancy.SharesPreview.as_view(), name="cluster-shares-preview"),
    path("cluster/shares/teams/", tenancy.SharesNow.as_view(), name="cluster-shares-teams"),
    path("groups/", tenancy.Groups.as_view(), name="groups"),
    path("groups/<str:name>/", tenancy.GroupDetail.as_view(), name="group"),
    path("teams/", tenancy.Teams.as_view(), name="teams"),
    path("teams/<str:name>/", tenancy.TeamDetail.as_view(), name="team"),
    path("teams/<str:name>/share/", tenancy.TeamShare.as_view(), name="team-share"),
    path("teams/<str:name>/members/", tenancy.TeamMembers.as_view(), name="team-members"),
    path(
        "teams/<str:name>/members/<str:username>/",
        tenancy.TeamMember.as_view(),
        name="team-member",
    ),
    path("users/", tenancy.Users.as_view(), name="users"),
    path("usage/", tenancy.Usage.as_view(), name="usage"),
    re_path(r"^.*$", unknown_endpoint, name="unknown"),
]
