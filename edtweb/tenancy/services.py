"""Teams and resource groups as the submit paths, the API and (later) the scheduler use them:
which team and group a submission goes into, members and leads, the groups' rules, and the
teams as a policy reads them (docs/architecture.md, "Tenancy")."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from edtweb.tenancy.models import Membership, ResourceGroup, Team
from scheduler.groups import DEFAULT, Rule, RuleError, parse_rule, rule_from


class Conflict(Exception):
    """A change the objects' state refuses (the API's 409), with what to do instead."""


class Unset:
    """A submission that did not name a team (its owner's default team is used)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


def default_team(user: Any) -> Team | None:
    """The user's default team, if they have one."""
    found = Membership.objects.filter(user=user, default=True).select_related("team").first()
    return found.team if found else None


def teams_of(user: Any) -> Any:
    """The teams ``user`` is a member of."""
    return Team.objects.filter(memberships__user=user).order_by("name")


def usable_teams(user: Any) -> Any:
    """The teams ``user`` may submit into: their own (staff: every team)."""
    return Team.objects.all() if user.is_staff else teams_of(user)


def sig_team(user: Any, sig: Any) -> str | Unset:
    """A WMLA instance group's name as a submission's team: the team of that name when
    ``user`` may use it, else left out (their default team): a team of others' is as a
    name no team has."""
    if isinstance(sig, str) and sig and usable_teams(user).filter(name=sig).exists():
        return sig
    return UNSET


def placement(user: Any, team: str | Unset | None = UNSET,
              group: str | None = None) -> tuple[Team | None, str]:  # fmt: skip
    """The team and the resource group a submission of ``user`` goes into: ``team`` named
    (``""`` or None: no team; left out: the user's default team) and ``group`` named (left
    out: the team's group, else ``default``). Refused, with a sentence naming the field,
    for a team the user may not use (one they are not a member of, or none of that name,
    in the same words: a refusal never tells whether another's team exists; staff may
    submit into any), a group that does not exist, or one the team may not use (a job
    without a team runs in ``default``; staff may name any group)."""
    chosen: Team | None
    if isinstance(team, Unset):
        chosen = default_team(user)
    elif not team:
        chosen = None
    else:
        chosen = usable_teams(user).select_related("resource_group").filter(name=team).first()
        if chosen is None:
            yours = Team.objects.order_by("name") if user.is_staff else teams_of(user)
            raise ValidationError({"team": f"no team {team!r} of yours: {_names(yours, 'yours')}"})
    if not group:
        return chosen, str(chosen.resource_group_id) if chosen else DEFAULT
    if group != DEFAULT and not ResourceGroup.objects.filter(name=group).exists():
        raise ValidationError({"resource_group": f"no resource group {group!r}: "
                               f"{_names(ResourceGroup.objects.all(), 'the groups')}"})  # fmt: skip
    if chosen is not None:
        allowed = chosen.groups_allowed()
        if group not in allowed:
            raise ValidationError({"resource_group": f"team {chosen.name} may not use resource "
                                   f"group {group} (it may use {', '.join(allowed)})"})  # fmt: skip
    elif group != DEFAULT and not user.is_staff:
        raise ValidationError({"resource_group": f"a job without a team runs in {DEFAULT}, not "
                               f"{group}: submit it into a team that may use {group}"})  # fmt: skip
    return chosen, group


def _names(objects: Any, what: str) -> str:
    names = [o.name for o in objects]
    return f"{what}: {', '.join(names)}" if names else f"{what}: none"


# Groups and teams, written by staff ------------------------------------------------------


def describe_group(group: ResourceGroup) -> dict[str, Any]:
    rules = group.parsed_rules()
    return {
        "name": group.name,
        "position": group.position,
        "shrink_idle": group.shrink_idle,
        "rules": [r.as_dict() for r in rules],
        "rule_texts": [r.text() for r in rules],
    }


def save_group(group: ResourceGroup | None, data: dict[str, Any]) -> ResourceGroup:
    """Create a group (``group`` None) or change one: ``position``, ``shrink_idle`` (its
    idle jobs held at their minimum: docs/architecture.md, "Idle jobs") and ``rules`` (each a
    text, ``host=gpu*,device=gpu,model=*H100*,slots=8``, or its parts as an object). A
    group's name never changes: jobs name it."""
    if group is None:
        ResourceGroup.objects.default()
        group = ResourceGroup(name=str(data.get("name") or "").strip())
    elif data.get("name") not in (None, group.name):
        raise ValidationError({"name": f"a group's name cannot change ({group.name}): make "
                               "another group"})  # fmt: skip
    if "position" in data:
        group.position = int(data["position"])
    if "shrink_idle" in data:
        group.shrink_idle = bool(data["shrink_idle"])
    if "rules" in data:
        group.rules = [_rule(group.name, given) for given in data["rules"] or []]
    group.full_clean()
    group.save()
    return group


def _rule(group: str, given: Any) -> dict[str, Any]:
    try:
        if isinstance(given, str):
            return parse_rule(group, given).as_dict()
        if isinstance(given, dict):
            return rule_from(group, given).as_dict()
    except RuleError as exc:
        raise ValidationError({"rules": str(exc)}) from None
    raise ValidationError({"rules": f"a rule is a text or an object, not {given!r}"})


def delete_group(group: ResourceGroup) -> None:
    """Delete a group no team and no active job uses; never ``default``."""
    from edtweb.training.models import Job

    if group.name == DEFAULT:
        raise Conflict(f"{DEFAULT} always exists: every slot no rule takes is in it")
    teams = sorted(
        {t.name for t in group.teams.all()} | {t.name for t in group.allowing_teams.all()}
    )
    if teams:
        raise Conflict(
            f"teams {', '.join(teams)} use resource group {group.name}: change them first"
        )
    active = Job.objects.filter(resource_group=group.name, state__in=Job.ACTIVE).count()
    if active:
        raise Conflict(
            f"{active} active job(s) run in resource group {group.name}: stop them first"
        )
    group.delete()


def describe_team(team: Team) -> dict[str, Any]:
    members = list(team.memberships.select_related("user").order_by("user__username"))
    return {
        "name": team.name,
        "parent": team.parent.name if team.parent_id else None,
        "weight": team.weight,
        "guarantee": team.guarantee,
        "limit": team.limit,
        "shrink_idle": team.shrink_idle,
        "resource_group": team.resource_group_id,
        "allowed_groups": sorted(g.name for g in team.allowed_groups.all()),
        "members": [
            {"username": m.user.get_username(), "lead": m.lead, "default": m.default}
            for m in members
        ],
        "leads": [m.user.get_username() for m in members if m.lead],
    }


def save_team(team: Team | None, data: dict[str, Any]) -> Team:
    """Create a team (``team`` None) or change one: ``name``, ``parent`` (a team's name;
    None or ``""``: at the top), ``weight``, ``guarantee``, ``limit`` (None: none),
    ``shrink_idle`` (its idle jobs, its sub-teams' too, held at their minimum),
    ``resource_group`` and ``allowed_groups`` (groups' names), each checked."""
    ResourceGroup.objects.default()
    team = team or Team()
    for field in ("name", "weight", "guarantee", "limit", "shrink_idle"):
        if field in data:
            setattr(team, field, data[field])
    if "parent" in data:
        parent = data["parent"] or None
        team.parent = Team.objects.filter(name=parent).first() if parent else None
        if parent and team.parent is None:
            raise ValidationError({"parent": f"no team {parent!r}"})
    if "resource_group" in data:
        team.resource_group_id = _group_named(data["resource_group"], "resource_group").name
    allowed = None
    if "allowed_groups" in data:
        allowed = [_group_named(name, "allowed_groups") for name in data["allowed_groups"] or []]
    with transaction.atomic():
        team.full_clean()
        team.save()
        if allowed is not None:
            team.allowed_groups.set(allowed)
    return team


def _group_named(name: str, field: str) -> ResourceGroup:
    found = ResourceGroup.objects.filter(name=name).first()
    if found is None:
        names = ", ".join(ResourceGroup.objects.values_list("name", flat=True))
        raise ValidationError({field: f"no resource group {name!r} (the groups: {names})"})
    return found


def delete_team(team: Team) -> None:
    """Delete a team without sub-teams or jobs (its jobs' usage is counted by it)."""
    children = sorted(team.children.values_list("name", flat=True))
    if children:
        raise Conflict(f"team {team.name} has sub-teams {', '.join(children)}: move or delete "
                       "them first")  # fmt: skip
    jobs = team.jobs.count()
    if jobs:
        raise Conflict(f"team {team.name} has {jobs} job(s), whose usage it is counted by: "
                       "delete them first, or keep the team")  # fmt: skip
    team.delete()


# Members ---------------------------------------------------------------------------------


def set_member(team: Team, user: Any, lead: bool | None = None,
               default: bool | None = None) -> Membership:  # fmt: skip
    """Add ``user`` to ``team`` or change their membership: ``lead`` and ``default`` as
    given (None: unchanged; a new member is no lead). A user's first team becomes their
    default team; making another one the default moves it there."""
    with transaction.atomic():
        member, created = Membership.objects.select_for_update().get_or_create(user=user, team=team)
        others = Membership.objects.filter(user=user, default=True).exclude(pk=member.pk)
        if default is None:
            default = member.default or (created and not others.exists())
        if default:
            others.update(default=False)
        member.default = default
        if lead is not None:
            member.lead = lead
        member.save()
    return member


def remove_member(team: Team, user: Any) -> bool:
    """Take ``user`` out of ``team`` (False: they were not in it). When it was their
    default team, their first other team (by name) becomes the default."""
    with transaction.atomic():
        member = Membership.objects.filter(user=user, team=team).first()
        if member is None:
            return False
        member.delete()
        if member.default:
            rest = Membership.objects.filter(user=user).order_by("team__name").first()
            if rest is not None:
                rest.default = True
                rest.save(update_fields=["default"])
    return True


# What the scheduler reads ----------------------------------------------------------------


def rules() -> list[Rule]:
    """Every group's rules, in the order they are tried (the groups' positions, then their
    names, then each group's own order): ``scheduler.groups.group_of`` reads them."""
    return [rule for group in ResourceGroup.objects.all() for rule in group.parsed_rules()]


def idle_shrinkers() -> tuple[frozenset[str], frozenset[str]]:
    """The teams (ids as text) and groups (names) whose rule holds their idle jobs at their
    minimum (docs/architecture.md, "Idle jobs")."""
    teams = Team.objects.filter(shrink_idle=True).values_list("pk", flat=True)
    groups = ResourceGroup.objects.filter(shrink_idle=True).values_list("name", flat=True)
    return frozenset(str(pk) for pk in teams), frozenset(groups)


def policy_teams() -> list[dict[str, Any]]:
    """The teams as a policy reads them (``id``, ``parent``, ``weight``, ``guarantee``,
    ``limit``, ``name``): ids are the rows' keys as text, ``parent`` ``""`` for a team at the
    top. A job's team id is ``str(job.team_id)`` (``""``: no team)."""
    return [
        {"id": str(t.pk), "parent": str(t.parent_id or ""), "weight": t.weight,
         "guarantee": t.guarantee, "limit": t.limit, "name": t.name}
        for t in Team.objects.order_by("pk")
    ]  # fmt: skip
