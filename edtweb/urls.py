from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from edtweb import monitoring
from edtweb.api.wmla_urls import conductor_urlpatterns
from edtweb.dashboard import views
from edtweb.datasets import views as datasets
from edtweb.registry import views as registry
from edtweb.sweeps import views as sweeps
from edtweb.tenancy import views as tenancy
from edtweb.training import views as training

urlpatterns = [
    path("", views.cluster, name="cluster"),
    path("api/cluster/allocations", views.cluster_allocations, name="cluster-allocations"),
    path("datasets/", datasets.dataset_list, name="datasets"),
    path("datasets/register", datasets.dataset_register, name="dataset-register"),
    path("datasets/uploads", datasets.upload_start, name="upload-start"),
    path("datasets/uploads/<int:pk>", datasets.upload_chunk, name="upload-chunk"),
    path("datasets/uploads/<int:pk>/complete", datasets.upload_finish, name="upload-finish"),
    path("datasets/<int:pk>/", datasets.dataset_detail, name="dataset"),
    path("datasets/<int:pk>/status", datasets.dataset_status, name="dataset-status"),
    path("datasets/<int:pk>/thumbs/<str:name>", datasets.thumbnail, name="dataset-thumb"),
    path("datasets/<int:pk>/delete", datasets.dataset_delete, name="dataset-delete"),
    path("models/", registry.model_list, name="models"),
    path("models/<int:pk>/", registry.model_detail, name="model"),
    path("models/<int:pk>/delete", registry.model_delete, name="model-delete"),
    path("train/", training.train, name="train"),
    path("jobs/", training.job_list, name="jobs"),
    path("jobs/<int:pk>/", training.job_detail, name="job"),
    path("jobs/<int:pk>/metrics", training.job_metrics, name="job-metrics"),
    path("jobs/<int:pk>/metrics.csv", training.job_metrics_csv, name="job-metrics-csv"),
    path("jobs/<int:pk>/resume", training.job_resume, name="job-resume"),
    path("jobs/<int:pk>/state", training.job_state, name="job-state"),
    path("jobs/<int:pk>/log", training.job_log, name="job-log"),
    path("jobs/<int:pk>/priority", training.job_priority, name="job-priority"),
    path("jobs/<int:pk>/priority/preview", training.job_priority_preview, name="job-preview"),
    path("jobs/<int:pk>/stop", training.job_stop, name="job-stop"),
    path("jobs/<int:pk>/delete", training.job_delete, name="job-delete"),
    path("jobs/<int:pk>/files/<str:name>", training.job_download, name="job-download"),
    path("sweeps/", sweeps.sweep_list, name="sweeps"),
    path("sweeps/new/", sweeps.sweep_new, name="sweep-new"),
    path("sweeps/<int:pk>/", sweeps.sweep_detail, name="sweep"),
    path("sweeps/<int:pk>/state", sweeps.sweep_state, name="sweep-state"),
    path("sweeps/<int:pk>/curves", sweeps.sweep_curves, name="sweep-curves"),
    path("sweeps/<int:pk>/stop", sweeps.sweep_stop, name="sweep-stop"),
    path("sweeps/<int:pk>/resume", sweeps.sweep_resume, name="sweep-resume"),
    path("compare/", sweeps.compare_page, name="compare"),
    path("compare/curves", sweeps.compare_curves, name="compare-curves"),
    path("compare.csv", sweeps.compare_csv, name="compare-csv"),
    path("teams/", tenancy.teams_page, name="teams"),
    path("groups/", tenancy.groups_page, name="groups"),
    path("shares/", tenancy.shares_page, name="shares"),
    path("usage/", tenancy.usage_page, name="usage"),
    path("usage.csv", tenancy.usage_csv, name="usage-csv"),
    path("accounts/login/", views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("metrics", monitoring.metrics, name="metrics"),
    path("healthz", monitoring.healthz, name="healthz"),
    path("readyz", monitoring.readyz, name="readyz"),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/", include("edtweb.api.urls")),
    path("platform/rest/deeplearning/v1/", include("edtweb.api.wmla_urls")),
    path("platform/rest/conductor/v1/", include((conductor_urlpatterns, "conductor"))),
]
