"""Teams, resource groups, users and usage over the API (docs/architecture.md, "Tenancy").

Everyone reads the resource groups, the teams they are in (staff: all) and the usage of the
jobs they may see; only staff write: groups, teams, members and leads, users.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb.api import serializers as s
from edtweb.api.errors import ApiError
from edtweb.tenancy import entitlement, preview, services, usage
from edtweb.tenancy.models import ResourceGroup, Team

TAGS = ["teams"]
STAFF = {403: s.problem("only staff may")}
BAD = {400: s.problem("malformed request; `fields` names the field")}
CONFLICT = {409: s.problem("still in use: the message says by what")}


def staff_only(request: Request, what: str) -> None:
    if not request.user.is_staff:
        raise ApiError(f"only staff may {what}", 403)


def conflict(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except services.Conflict as exc:
        raise ApiError(str(exc), 409) from None


def form(serializer: Any, request: Request, partial: bool = False) -> dict[str, Any]:
    checked = serializer(data=request.data, partial=partial)
    checked.is_valid(raise_exception=True)
    return dict(checked.validated_data)


# Resource groups -------------------------------------------------------------------------


def group_named(name: str) -> ResourceGroup:
    if name == services.DEFAULT:
        return ResourceGroup.objects.default()
    found = ResourceGroup.objects.filter(name=name).first()
    if found is None:
        raise ApiError(f"no resource group {name}", 404)
    return found


class Groups(generics.GenericAPIView):
    serializer_class = s.ResourceGroupWriteSerializer

    @extend_schema(tags=TAGS, responses={200: s.ResourceGroupSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """The resource groups with their rules, in the order the rules are tried; a slot
        no rule takes is in ``default``."""
        ResourceGroup.objects.default()
        return Response([services.describe_group(g) for g in ResourceGroup.objects.all()])

    @extend_schema(tags=TAGS, responses={201: s.ResourceGroupSerializer, **BAD, **STAFF})
    def post(self, request: Request) -> Response:
        """Staff: make a group. ``rules`` in order, each a text such as
        ``host=gpu*,device=gpu,model=*H100*,slots=8`` (any part left out matches anything)
        or its parts as an object."""
        staff_only(request, "make resource groups")
        data = form(s.ResourceGroupWriteSerializer, request)
        if not data.get("name"):
            raise ValidationError({"name": ["name the group"]})
        group = services.save_group(None, data)
        return Response(services.describe_group(group), status=status.HTTP_201_CREATED)


class GroupDetail(generics.GenericAPIView):
    serializer_class = s.ResourceGroupWriteSerializer

    @extend_schema(tags=TAGS, responses={200: s.ResourceGroupSerializer, 404: s.problem("none")})
    def get(self, request: Request, name: str) -> Response:
        """A resource group and its rules."""
        return Response(services.describe_group(group_named(name)))

    @extend_schema(
        tags=TAGS,
        responses={200: s.ResourceGroupSerializer, **BAD, **STAFF, 404: s.problem("none")},
    )
    def patch(self, request: Request, name: str) -> Response:
        """Staff: change a group's position or its rules (all of them, in order). Its name
        never changes."""
        staff_only(request, "change resource groups")
        group = services.save_group(
            group_named(name), form(s.ResourceGroupWriteSerializer, request, True)
        )
        return Response(services.describe_group(group))

    @extend_schema(tags=TAGS, responses={204: None, **STAFF, **CONFLICT, 404: s.problem("none")})
    def delete(self, request: Request, name: str) -> Response:
        """Staff: delete a group that no team and no active job uses (never ``default``)."""
        staff_only(request, "delete resource groups")
        conflict(services.delete_group, group_named(name))
        return Response(status=status.HTTP_204_NO_CONTENT)


# Teams -----------------------------------------------------------------------------------


def teams_seen(request: Request) -> Any:
    """The teams the user may see: their own (staff: all)."""
    teams = Team.objects.select_related("parent").prefetch_related("allowed_groups")
    return teams if request.user.is_staff else teams.filter(memberships__user=request.user)


def team_named(request: Request, name: str) -> Team:
    found = teams_seen(request).filter(name=name).first()
    if found is None:
        raise ApiError(f"no team {name}: it does not exist or you are not in it", 404)
    return found  # type: ignore[no-any-return]


class Teams(generics.GenericAPIView):
    serializer_class = s.TeamWriteSerializer

    @extend_schema(tags=TAGS, responses={200: s.TeamSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """The teams you are in (staff: all): weight, guarantee and limit in slots, parent,
        resource groups, members and leads."""
        return Response([services.describe_team(t) for t in teams_seen(request)])

    @extend_schema(tags=TAGS, responses={201: s.TeamSerializer, **BAD, **STAFF})
    def post(self, request: Request) -> Response:
        """Staff: make a team (``name``; ``weight`` 1, ``guarantee`` 0, no ``limit``, no
        ``parent``, resource group ``default`` unless given)."""
        staff_only(request, "make teams")
        data = form(s.TeamWriteSerializer, request)
        if not data.get("name"):
            raise ValidationError({"name": ["name the team"]})
        team = services.save_team(None, data)
        return Response(services.describe_team(team), status=status.HTTP_201_CREATED)


class TeamDetail(generics.GenericAPIView):
    serializer_class = s.TeamWriteSerializer

    @extend_schema(
        tags=TAGS, responses={200: s.TeamSerializer, 404: s.problem("none, or not yours")}
    )
    def get(self, request: Request, name: str) -> Response:
        """A team you are in (staff: any)."""
        return Response(services.describe_team(team_named(request, name)))

    @extend_schema(tags=TAGS, responses={200: s.TeamSerializer, **BAD, **STAFF})
    def patch(self, request: Request, name: str) -> Response:
        """Staff: change a team: name, parent, weight, guarantee, limit, resource groups."""
        staff_only(request, "change teams")
        team = services.save_team(
            team_named(request, name), form(s.TeamWriteSerializer, request, True)
        )
        return Response(services.describe_team(team))

    @extend_schema(tags=TAGS, responses={204: None, **STAFF, **CONFLICT})
    def delete(self, request: Request, name: str) -> Response:
        """Staff: delete a team without sub-teams or jobs."""
        staff_only(request, "delete teams")
        conflict(services.delete_team, team_named(request, name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TeamShare(generics.GenericAPIView):
    @extend_schema(
        tags=TAGS, responses={200: s.TeamsNowSerializer, 404: s.problem("none, or not yours")}
    )
    def get(self, request: Request, name: str) -> Response:
        """Why a team you are in (staff: any) has the share it has, as the scheduler last
        published it: per resource group its weight, guarantee, limit, fair share, slots
        held and asked for, borrowed or lent, its users' parts; its waiting jobs with the
        scheduler's reasons."""
        return Response(entitlement.teams_now(request.user, team_named(request, name)))


class SharesNow(generics.GenericAPIView):
    @extend_schema(tags=TAGS, responses={200: s.TeamsNowSerializer})
    def get(self, request: Request) -> Response:
        """As ``teams/{name}/share/``, for every team you are in (staff: every team, and
        the jobs of no team)."""
        return Response(entitlement.teams_now(request.user))


def user_named(name: str) -> Any:
    found = get_user_model().objects.filter(username=name).first()
    if found is None:
        raise ValidationError({"username": [f"no user {name!r}"]})
    return found


class TeamMembers(generics.GenericAPIView):
    serializer_class = s.MemberWriteSerializer

    @extend_schema(tags=TAGS, responses={200: s.MemberSerializer(many=True)})
    def get(self, request: Request, name: str) -> Response:
        """The team's members, their lead and default-team flags."""
        return Response(services.describe_team(team_named(request, name))["members"])

    @extend_schema(tags=TAGS, responses={200: s.MemberSerializer(many=True), **BAD, **STAFF})
    def post(self, request: Request, name: str) -> Response:
        """Staff: add a member (``username``), or change one: ``lead``, ``default``. A
        user's first team becomes their default team. Answers the members."""
        staff_only(request, "change a team's members")
        team = team_named(request, name)
        data = form(s.MemberWriteSerializer, request)
        if not data.get("username"):
            raise ValidationError({"username": ["name the user to add"]})
        services.set_member(
            team, user_named(data["username"]), data.get("lead"), data.get("default")
        )
        return Response(services.describe_team(team)["members"])


class TeamMember(generics.GenericAPIView):
    serializer_class = s.MemberWriteSerializer

    @extend_schema(tags=TAGS, responses={200: s.MemberSerializer(many=True), **BAD, **STAFF})
    def patch(self, request: Request, name: str, username: str) -> Response:
        """Staff: make a member a lead or not, or their default team. Answers the members."""
        staff_only(request, "change a team's members")
        team = team_named(request, name)
        user = user_named(username)
        if not team.memberships.filter(user=user).exists():
            raise ApiError(f"{username} is not a member of team {team.name}", 404)
        data = form(s.MemberWriteSerializer, request, True)
        services.set_member(team, user, data.get("lead"), data.get("default"))
        return Response(services.describe_team(team)["members"])

    @extend_schema(tags=TAGS, responses={200: s.MemberSerializer(many=True), **STAFF})
    def delete(self, request: Request, name: str, username: str) -> Response:
        """Staff: take a member out of the team (their jobs stay in it). Answers the
        members."""
        staff_only(request, "change a team's members")
        team = team_named(request, name)
        if not services.remove_member(team, user_named(username)):
            raise ApiError(f"{username} is not a member of team {team.name}", 404)
        return Response(services.describe_team(team)["members"])


class SharesPreview(generics.GenericAPIView):
    serializer_class = s.SharesPreviewRequestSerializer

    @extend_schema(tags=TAGS, responses={200: s.SharesPreviewSerializer, **BAD, **STAFF})
    def post(self, request: Request) -> Response:
        """Staff: what changing teams' ``weight``, ``guarantee``, ``limit``, ``parent`` or
        ``resource_group`` would do, before anything is saved: per resource group, each
        team's slots now, the slots the scheduler's policy gives it with the teams as they
        are and with the change, and its entitlement before and after, over the active jobs
        and usable slots now (``{"teams": {"vision": {"guarantee": 4}}}``)."""
        staff_only(request, "preview teams' shares")
        data = form(s.SharesPreviewRequestSerializer, request)
        return Response(preview.preview({name: dict(v) for name, v in data["teams"].items()}))


# Users -----------------------------------------------------------------------------------


class Users(generics.GenericAPIView):
    serializer_class = s.NewUserSerializer

    @extend_schema(tags=TAGS, responses={200: s.UserListSerializer(many=True), **STAFF})
    def get(self, request: Request) -> Response:
        """Staff: every user, whether staff, and their teams."""
        staff_only(request, "list users")
        users = get_user_model().objects.order_by("username").prefetch_related("teams")
        rows = [
            {"username": u.get_username(), "is_staff": u.is_staff,
             "teams": sorted(t.name for t in u.teams.all())}
            for u in users
        ]  # fmt: skip
        return Response(rows)

    @extend_schema(tags=TAGS, responses={201: s.UserListSerializer, **BAD, **STAFF})
    def post(self, request: Request) -> Response:
        """Staff: make a user (``is_staff``: one who sees everything and writes teams)."""
        staff_only(request, "make users")
        data = form(s.NewUserSerializer, request)
        model = get_user_model()
        if model.objects.filter(username=data["username"]).exists():
            raise ValidationError({"username": [f"a user {data['username']!r} exists already"]})
        candidate = model(username=data["username"], is_staff=data["is_staff"])
        try:
            candidate.full_clean(exclude=["password"])
            validate_password(data["password"], candidate)
        except DjangoValidationError as exc:
            messages = (
                exc.message_dict if hasattr(exc, "error_dict") else {"password": exc.messages}
            )
            raise ValidationError(messages) from None
        user = model.objects.create_user(data["username"], password=data["password"],
                                         is_staff=data["is_staff"])  # fmt: skip
        body = {"username": user.get_username(), "is_staff": user.is_staff, "teams": []}
        return Response(body, status=status.HTTP_201_CREATED)


# Usage -----------------------------------------------------------------------------------


class Usage(generics.GenericAPIView):
    @extend_schema(
        tags=TAGS,
        parameters=[
            OpenApiParameter("since", str, description="a date, a date and time, or 12h, 7d, 2w "
                             "back (default: 7 days; 4 weeks by week)"),
            OpenApiParameter("until", str, description="as since (default: now)"),
            OpenApiParameter("by", str, enum=list(usage.BY), description="default team"),
            OpenApiParameter("period", str, enum=list(usage.PERIODS), description="default day"),
            OpenApiParameter("team", str, description="only this team's jobs ('-': of no team)"),
            OpenApiParameter("user", str, description="only this user's jobs"),
        ],
        responses={200: s.UsageSerializer, **BAD},
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        """Slot-hours of the jobs you may see (yours and your teams'; staff: all), per team
        or per user, per day or per week, from the jobs' timelines; only one team's or one
        user's jobs where named."""
        return Response(usage.asked(request.user, request.query_params))
