"""GitHub-shaped JSON for the fake's objects (REST responses and webhook payloads).

Pure functions of the fake's state records and the server root URL; the field
sets follow GitHub's REST docs and the payloads in shared/fixtures.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import App, Artifact, CheckRun, Comment, Issue, Repo, User, WorkflowRun


def iso(t: datetime | None) -> str | None:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


def node_id(kind: str, n: int) -> str:
    return base64.b64encode(f"0:{kind}{n}".encode()).decode().rstrip("=")


def user(root: str, u: User) -> dict[str, Any]:
    api = f"{root}/users/{u.login}"
    return {
        "login": u.login, "id": u.id, "node_id": node_id("User", u.id),
        "avatar_url": f"{root}/avatars/u/{u.id}", "gravatar_id": "", "url": api,
        "html_url": f"{root}/{u.login}", "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}", "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions", "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos", "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events", "type": u.type, "site_admin": False,
    }


def repo(root: str, r: Repo) -> dict[str, Any]:
    api = f"{root}/repos/{r.full_name}"
    html = f"{root}/{r.full_name}"
    d: dict[str, Any] = {
        "id": r.id, "node_id": node_id("Repository", r.id), "name": r.name,
        "full_name": r.full_name, "private": r.private, "owner": user(root, r.owner),
        "html_url": html, "description": "", "fork": False, "url": api,
        "created_at": iso(r.created_at), "updated_at": iso(r.created_at),
        "pushed_at": iso(r.created_at), "git_url": f"git://fake/{r.full_name}.git",
        "ssh_url": f"git@fake:{r.full_name}.git", "clone_url": f"{html}.git", "svn_url": html,
        "homepage": None, "size": 0, "stargazers_count": 0, "watchers_count": 0,
        "language": "Python", "has_issues": True, "has_projects": False, "has_downloads": True,
        "has_wiki": False, "has_pages": False, "forks_count": 0, "mirror_url": None,
        "archived": False, "disabled": False, "open_issues_count": r.open_issues(),
        "license": None, "forks": 0, "open_issues": r.open_issues(), "watchers": 0,
        "default_branch": r.default_branch, "is_template": False, "topics": [],
        "visibility": "private" if r.private else "public",
        "web_commit_signoff_required": False, "custom_properties": {},
        "permissions": {"admin": True, "maintain": True, "push": True, "triage": True,
                        "pull": True},
    }
    for key, tail in [
        ("forks_url", "/forks"), ("keys_url", "/keys{/key_id}"),
        ("collaborators_url", "/collaborators{/collaborator}"), ("teams_url", "/teams"),
        ("hooks_url", "/hooks"), ("issue_events_url", "/issues/events{/number}"),
        ("events_url", "/events"), ("assignees_url", "/assignees{/user}"),
        ("branches_url", "/branches{/branch}"), ("tags_url", "/tags"),
        ("blobs_url", "/git/blobs{/sha}"), ("git_tags_url", "/git/tags{/sha}"),
        ("git_refs_url", "/git/refs{/sha}"), ("trees_url", "/git/trees{/sha}"),
        ("statuses_url", "/statuses/{sha}"), ("languages_url", "/languages"),
        ("stargazers_url", "/stargazers"), ("contributors_url", "/contributors"),
        ("subscribers_url", "/subscribers"), ("subscription_url", "/subscription"),
        ("commits_url", "/commits{/sha}"), ("git_commits_url", "/git/commits{/sha}"),
        ("comments_url", "/comments{/number}"), ("issue_comment_url", "/issues/comments{/number}"),
        ("contents_url", "/contents/{+path}"), ("compare_url", "/compare/{base}...{head}"),
        ("merges_url", "/merges"), ("archive_url", "/{archive_format}{/ref}"),
        ("downloads_url", "/downloads"), ("issues_url", "/issues{/number}"),
        ("pulls_url", "/pulls{/number}"), ("milestones_url", "/milestones{/number}"),
        ("notifications_url", "/notifications{?since,all,participating}"),
        ("labels_url", "/labels{/name}"), ("releases_url", "/releases{/id}"),
        ("deployments_url", "/deployments"),
    ]:
        d[key] = api + tail
    return d


def label(root: str, r: Repo, name: str) -> dict[str, Any]:
    lid = r.label_id(name)
    color, description = r.label_meta.get(name, ("ededed", None))
    return {"id": lid, "node_id": node_id("Label", lid),
            "url": f"{root}/repos/{r.full_name}/labels/{name}", "name": name,
            "color": color, "default": False, "description": description}


def reactions_summary(root: str, url: str, counts: dict[str, int]) -> dict[str, Any]:
    keys = ["+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes"]
    d: dict[str, Any] = {"url": f"{url}/reactions", "total_count": sum(counts.values())}
    d.update({k: counts.get(k, 0) for k in keys})
    return d


def issue(root: str, r: Repo, i: Issue) -> dict[str, Any]:
    api = f"{root}/repos/{r.full_name}/issues/{i.number}"
    d: dict[str, Any] = {
        "url": api, "repository_url": f"{root}/repos/{r.full_name}",
        "labels_url": f"{api}/labels{{/name}}", "comments_url": f"{api}/comments",
        "events_url": f"{api}/events",
        "html_url": f"{root}/{r.full_name}/{'pull' if i.pull else 'issues'}/{i.number}",
        "id": i.id, "node_id": node_id("Issue", i.id), "number": i.number, "title": i.title,
        "user": user(root, i.user), "labels": [label(root, r, n) for n in i.labels],
        "state": i.state, "locked": False, "assignee": None, "assignees": [],
        "milestone": None, "comments": len(r.comments_of(i.number)),
        "created_at": iso(i.created_at), "updated_at": iso(i.updated_at),
        "closed_at": iso(i.closed_at), "author_association": r.association(i.user.login),
        "active_lock_reason": None, "body": i.body, "state_reason": None,
        "reactions": reactions_summary(root, api, {}),
        "timeline_url": f"{api}/timeline", "performed_via_github_app": None,
        "draft": bool(i.pull and i.pull.draft),
    }
    if i.pull is not None:
        p = f"{root}/{r.full_name}/pull/{i.number}"
        d["pull_request"] = {"url": f"{root}/repos/{r.full_name}/pulls/{i.number}",
                             "html_url": p, "diff_url": p + ".diff", "patch_url": p + ".patch",
                             "merged_at": iso(i.pull.merged_at)}
    return d


def comment(root: str, r: Repo, c: Comment) -> dict[str, Any]:
    api = f"{root}/repos/{r.full_name}/issues/comments/{c.id}"
    kind = "pull" if r.issues[c.issue_number].pull else "issues"
    return {
        "url": api, "html_url": f"{root}/{r.full_name}/{kind}/{c.issue_number}#issuecomment-{c.id}",
        "issue_url": f"{root}/repos/{r.full_name}/issues/{c.issue_number}", "id": c.id,
        "node_id": node_id("IssueComment", c.id), "user": user(root, c.user),
        "created_at": iso(c.created_at), "updated_at": iso(c.updated_at),
        "author_association": r.association(c.user.login),
        "performed_via_github_app": None, "body": c.body,
        "reactions": reactions_summary(root, api, c.reaction_counts()),
    }


def reaction(root: str, rid: int, content: str, u: User, created: datetime) -> dict[str, Any]:
    return {"id": rid, "node_id": node_id("Reaction", rid), "user": user(root, u),
            "content": content, "created_at": iso(created)}


def branch_part(root: str, r: Repo, ref: str, sha: str) -> dict[str, Any]:
    return {"label": f"{r.owner.login}:{ref}", "ref": ref, "sha": sha,
            "user": user(root, r.owner), "repo": repo(root, r)}


def fork_part(root: str, r: Repo, fork: str, ref: str, sha: str, owner: Any) -> dict[str, Any]:
    """A PR's head in a fork ``fork`` (owned by ``owner``) of ``r``."""
    d = repo(root, r)
    name = fork.split("/", 1)[1]
    d.update(id=r.id + 50_000_000, node_id=node_id("Repository", r.id + 50_000_000), name=name,
             full_name=fork, owner=user(root, owner), fork=True,
             url=f"{root}/repos/{fork}", html_url=f"{root}/{fork}")
    return {"label": f"{owner.login}:{ref}", "ref": ref, "sha": sha,
            "user": user(root, owner), "repo": d}


def pull(root: str, r: Repo, i: Issue) -> dict[str, Any]:
    p = i.pull
    assert p is not None
    api = f"{root}/repos/{r.full_name}/pulls/{i.number}"
    html = f"{root}/{r.full_name}/pull/{i.number}"
    issue_api = f"{root}/repos/{r.full_name}/issues/{i.number}"
    merged = p.merged_at is not None
    return {
        "url": api, "id": i.id + 10_000_000, "node_id": node_id("PullRequest", i.id),
        "html_url": html, "diff_url": html + ".diff", "patch_url": html + ".patch",
        "issue_url": issue_api, "number": i.number, "state": i.state, "locked": False,
        "title": i.title, "user": user(root, i.user), "body": i.body,
        "created_at": iso(i.created_at), "updated_at": iso(i.updated_at),
        "closed_at": iso(i.closed_at), "merged_at": iso(p.merged_at),
        "merge_commit_sha": p.merge_commit_sha, "assignee": None, "assignees": [],
        "requested_reviewers": [user(root, u) for u in p.requested_reviewers],
        "requested_teams": [], "labels": [label(root, r, n) for n in i.labels],
        "milestone": None, "commits_url": f"{api}/commits",
        "review_comments_url": f"{api}/comments",
        "review_comment_url": f"{root}/repos/{r.full_name}/pulls/comments{{/number}}",
        "comments_url": f"{issue_api}/comments",
        "statuses_url": f"{root}/repos/{r.full_name}/statuses/{p.head_sha}",
        "head": (branch_part(root, r, p.head_ref, p.head_sha) if p.head_repo is None
                 else fork_part(root, r, p.head_repo, p.head_ref, p.head_sha, i.user)),
        "base": branch_part(root, r, p.base_ref, p.base_sha),
        "_links": {"self": {"href": api}, "html": {"href": html},
                   "issue": {"href": issue_api}, "comments": {"href": f"{issue_api}/comments"},
                   "review_comments": {"href": f"{api}/comments"},
                   "commits": {"href": f"{api}/commits"},
                   "statuses": {"href": f"{root}/repos/{r.full_name}/statuses/{p.head_sha}"}},
        "author_association": r.association(i.user.login), "auto_merge": None,
        "active_lock_reason": None, "draft": p.draft, "merged": merged,
        "mergeable": None if merged else True, "rebaseable": None if merged else True,
        "mergeable_state": "unknown" if merged else "clean",
        "merged_by": user(root, p.merged_by) if p.merged_by else None,
        "comments": len(r.comments_of(i.number)), "review_comments": 0,
        "maintainer_can_modify": False, "commits": 1, "additions": 0, "deletions": 0,
        "changed_files": 0,
    }


def app(root: str, a: App) -> dict[str, Any]:
    return {"id": a.id, "slug": a.slug, "node_id": node_id("App", a.id),
            "client_id": f"Iv1.{a.id:016x}", "owner": user(root, a.owner), "name": a.slug,
            "description": "", "external_url": root, "html_url": f"{root}/apps/{a.slug}",
            "created_at": iso(a.created_at), "updated_at": iso(a.created_at),
            "permissions": dict(a.permissions), "events": list(a.events),
            "installations_count": len(a.installations)}


def installation(root: str, a: App, inst_id: int, account: User) -> dict[str, Any]:
    return {"id": inst_id, "account": user(root, account), "repository_selection": "selected",
            "access_tokens_url": f"{root}/app/installations/{inst_id}/access_tokens",
            "repositories_url": f"{root}/installation/repositories",
            "html_url": f"{root}/settings/installations/{inst_id}", "app_id": a.id,
            "app_slug": a.slug, "target_id": account.id, "target_type": account.type,
            "permissions": dict(a.permissions), "events": list(a.events),
            "created_at": iso(a.created_at), "updated_at": iso(a.created_at),
            "single_file_name": None, "has_multiple_single_files": False,
            "single_file_paths": [], "suspended_by": None, "suspended_at": None}


def check_run(root: str, r: Repo, c: CheckRun) -> dict[str, Any]:
    api = f"{root}/repos/{r.full_name}/check-runs/{c.id}"
    return {
        "id": c.id, "node_id": node_id("CheckRun", c.id), "head_sha": c.head_sha,
        "external_id": c.external_id or "", "url": api,
        "html_url": f"{root}/{r.full_name}/runs/{c.id}", "details_url": c.details_url,
        "status": c.status, "conclusion": c.conclusion, "started_at": iso(c.started_at),
        "completed_at": iso(c.completed_at),
        "output": {"title": c.output.get("title"), "summary": c.output.get("summary"),
                   "text": c.output.get("text"), "annotations_count": 0,
                   "annotations_url": f"{api}/annotations"},
        "name": c.name, "check_suite": {"id": c.id + 5_000_000},
        "app": {"id": c.app_id, "slug": c.app_slug, "name": c.app_slug} if c.app_id else None,
        "pull_requests": [],
    }


def workflow(root: str, r: Repo, wid: int, file: str) -> dict[str, Any]:
    api = f"{root}/repos/{r.full_name}/actions/workflows/{wid}"
    return {"id": wid, "node_id": node_id("Workflow", wid), "name": file.rsplit(".", 1)[0],
            "path": f".github/workflows/{file}", "state": "active",
            "created_at": iso(r.created_at), "updated_at": iso(r.created_at), "url": api,
            "html_url": f"{root}/{r.full_name}/blob/{r.default_branch}/.github/workflows/{file}",
            "badge_url": f"{root}/{r.full_name}/workflows/{file}/badge.svg"}


def workflow_run(root: str, r: Repo, w: WorkflowRun) -> dict[str, Any]:
    api = f"{root}/repos/{r.full_name}/actions/runs/{w.id}"
    return {
        "id": w.id, "name": w.workflow_file.rsplit(".", 1)[0], "node_id": node_id("WorkflowRun", w.id),
        "head_branch": w.head_branch, "head_sha": w.head_sha,
        "path": f".github/workflows/{w.workflow_file}", "display_title": w.display_title,
        "run_number": w.run_number, "event": "workflow_dispatch", "status": w.status,
        "conclusion": w.conclusion, "workflow_id": w.workflow_id,
        "check_suite_id": w.id + 7_000_000, "check_suite_node_id": node_id("CheckSuite", w.id),
        "url": api, "html_url": f"{root}/{r.full_name}/actions/runs/{w.id}",
        "pull_requests": [], "created_at": iso(w.created_at), "updated_at": iso(w.updated_at),
        "actor": user(root, w.actor), "triggering_actor": user(root, w.actor),
        "run_attempt": 1, "referenced_workflows": [], "run_started_at": iso(w.created_at),
        "jobs_url": f"{api}/jobs", "logs_url": f"{api}/logs",
        "check_suite_url": f"{root}/repos/{r.full_name}/check-suites/{w.id + 7_000_000}",
        "artifacts_url": f"{api}/artifacts", "cancel_url": f"{api}/cancel",
        "rerun_url": f"{api}/rerun", "previous_attempt_url": None,
        "workflow_url": f"{root}/repos/{r.full_name}/actions/workflows/{w.workflow_id}",
        "head_commit": {"id": w.head_sha, "tree_id": w.head_sha, "message": "",
                        "timestamp": iso(w.created_at),
                        "author": {"name": "Fake", "email": "fake@example.com"},
                        "committer": {"name": "Fake", "email": "fake@example.com"}},
        "repository": repo(root, r), "head_repository": repo(root, r),
    }


def artifact(root: str, r: Repo, a: Artifact) -> dict[str, Any]:
    api = f"{root}/repos/{r.full_name}/actions/artifacts/{a.id}"
    return {"id": a.id, "node_id": node_id("Artifact", a.id), "name": a.name,
            "size_in_bytes": len(a.data), "url": api, "archive_download_url": f"{api}/zip",
            "expired": a.expired, "created_at": iso(a.created_at),
            "expires_at": iso(a.created_at), "updated_at": iso(a.created_at),
            "digest": f"sha256:{a.digest}",
            "workflow_run": {"id": a.run_id, "repository_id": r.id, "head_repository_id": r.id,
                             "head_branch": a.head_branch, "head_sha": a.head_sha}}


def hook_delivery(d: Any, *, full: bool = False) -> dict[str, Any]:
    ok = 200 <= d.status_code < 300
    doc = {"id": d.id, "guid": d.guid, "delivered_at": iso(d.delivered_at),
           "redelivery": d.redelivery, "duration": round(d.duration, 3),
           "status": "OK" if ok else ("failed to connect" if d.status_code == 0
                                      else "Invalid HTTP Response: " + str(d.status_code)),
           "status_code": d.status_code, "event": d.event, "action": d.action,
           "installation_id": d.installation_id, "repository_id": None, "throttled_at": None}
    if full:
        doc["request"] = {"headers": {"X-GitHub-Event": d.event, "X-GitHub-Delivery": d.guid},
                          "payload": json.loads(d.body)}
        doc["response"] = {"headers": {}, "payload": None}
    return doc
