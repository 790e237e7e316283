from __future__ import annotations

from django.urls import path

from edtweb.dashboard.consumers import ClusterConsumer, JobConsumer

websocket_urlpatterns = [
    path("ws/cluster/", ClusterConsumer.as_asgi()),
    path("ws/jobs/<int:pk>/", JobConsumer.as_asgi()),
]
