from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from edtweb.ownership import get_owned, owned
from edtweb.registry import services
from edtweb.registry.models import ModelDefinition


@login_required
def model_list(request: HttpRequest) -> HttpResponse:
    error = ""
    if request.method == "POST":
        upload = request.FILES.get("file")
        try:
            if upload is None:
                raise services.ModelUploadError("choose a .py file or an archive")
            name = request.POST.get("name") or upload.name.rsplit(".", 1)[0]
            model = services.create(request.user, name, upload.name, upload.read(),
                                    request.POST.get("entry", "").strip())  # fmt: skip
            return redirect("model", model.pk)
        except services.ModelUploadError as exc:
            error = str(exc)
    context = {"models": owned(request, ModelDefinition), "error": error, "nav": "models"}
    return render(request, "registry/list.html", context)


@login_required
def model_detail(request: HttpRequest, pk: int) -> HttpResponse:
    model = get_owned(request, ModelDefinition, pk)
    source = model.entry_path.read_text(errors="replace") if model.entry_path.exists() else ""
    check = services.check_progress(model)
    context = {"model": model, "source": source, "nav": "models", "check": check}
    return render(request, "registry/detail.html", context)


@login_required
@require_POST
def model_delete(request: HttpRequest, pk: int) -> HttpResponse:
    services.delete(get_owned(request, ModelDefinition, pk))
    return redirect("models")
