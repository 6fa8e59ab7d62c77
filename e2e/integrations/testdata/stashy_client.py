"""stashy against a Sluice node; the same environment as atlassian_client.py.

stashy has no setting for the API version: for SLUICE_API=latest the script
points its client's core, branch-utils and git paths at latest, which is
what a caller subclassing StashClient does.
"""

import stashy

from conform import env, expect, finish, step

stash = stashy.connect(env("SLUICE_URL"), env("SLUICE_USER"), env("SLUICE_PASSWORD"))
if env("SLUICE_API") != "1.0":
    c = stash._client
    v = env("SLUICE_API")
    c.core_api_path, c.branches_api_path, c.git_api_path = "api/" + v, "branch-utils/" + v, "git/" + v

P, R = env("SEED_PROJECT"), env("SEED_REPO")
NEW = env("SLUICE_NEW_PROJECT")
HEAD = env("SEED_HEAD")
FEATURE = env("SEED_FEATURE")
OTHER = env("SEED_OTHER_USER")
repo = stash.projects[P].repos[R]


def projects():
    keys = [p["key"] for p in stash.projects.list()]
    expect(P in keys, "%s listed" % P, keys)
    stash.projects.create(NEW, "Made by stashy", "conformance")
    p = stash.projects[NEW].get()
    expect(p["key"] == NEW, "the new project", p)
step("list, create, get project", projects)


def repos():
    r = stash.projects[NEW].repos.create("made")
    expect(r["slug"] == "made", "the new repository", r)
    got = stash.projects[NEW].repos["made"].get()
    expect(got["id"] == r["id"], "the same repository", got)
    slugs = [x["slug"] for x in stash.projects[NEW].repos.list()]
    expect(slugs == ["made"], "one repository", slugs)
    stash.projects[NEW].repos["made"].delete()
    slugs = [x["slug"] for x in stash.projects[NEW].repos.list()]
    expect(slugs == [], "no repository left", slugs)
    stash.projects[NEW].delete()
step("create, get, list, delete repository and project", repos)


def all_repos():
    names = [(r["project"]["key"], r["slug"]) for r in stash.repos.list()]
    expect((P, R) in names, "the seeded repository among all", names)
step("list all repositories", all_repos)


def branches():
    names = sorted(b["displayId"] for b in repo.branches())
    expect(names == sorted(["main", FEATURE]), "main and the feature branch", names)
    d = repo.default_branch
    expect(d["displayId"] == "main", "main as default", d)
step("list branches, get default", branches)


def branch_cycle():
    repo.create_branch("stashy-branch", HEAD)
    names = [b["displayId"] for b in repo.branches(filterText="stashy-branch")]
    expect(names == ["stashy-branch"], "the new branch", names)
    repo.default_branch = "refs/heads/stashy-branch"
    d = repo.default_branch
    expect(d["displayId"] == "stashy-branch", "the new default", d)
    repo.default_branch = "refs/heads/main"
    repo.delete_branch("stashy-branch")
    names = [b["displayId"] for b in repo.branches(filterText="stashy-branch")]
    expect(names == [], "the branch gone", names)
step("create branch, set default and back, delete branch", branch_cycle)


def tags():
    # stashy sends Bitbucket 5's body: force as a string, type ANNOTATED.
    repo.create_tag("s1.0", HEAD, message="stashy release")
    names = [t["displayId"] for t in repo.tags()]
    expect(sorted(names) == ["s1.0", "seed-1"], "the new tag beside the seeded one", names)
    repo.delete_tag("s1.0")
    names = [t["displayId"] for t in repo.tags()]
    expect(names == ["seed-1"], "the new tag gone", names)
step("create, list, delete tag", tags)


def commits():
    ids = [c["id"] for c in repo.commits(HEAD)]
    expect(len(ids) == int(env("SEED_COMMITS")) and ids[0] == HEAD and len(set(ids)) == len(ids),
           "every commit once over the default pages", ids)
    c = repo.get_commit(HEAD)
    expect(c["id"] == HEAD, "the head commit", c)
step("list commits (paged), get commit", commits)


def content():
    lines = [l["text"] for l in repo.browse(env("SEED_FILE"))]
    expect(lines == env("SEED_FILE_CONTENT").splitlines(), "the file's lines", lines)
    t = repo.browse(env("SEED_FILE"), type=True)
    expect(t.get("type") == "FILE", "type FILE", t)
step("browse file, type=true", content)


def files():
    names = list(repo.files())
    expect(env("SEED_FILE") in names, "the file listed", names)
step("file list", files)


def permissions():
    repo.permissions.users.grant(OTHER, "REPO_READ")
    users = {u["user"]["name"]: u["permission"] for u in repo.permissions.users.all()}
    expect(users.get(OTHER) == "REPO_READ", "%s with REPO_READ" % OTHER, users)
    repo.permissions.users.revoke(OTHER)
    users = {u["user"]["name"]: u["permission"] for u in repo.permissions.users.all()}
    expect(OTHER not in users, "%s revoked" % OTHER, users)
    repo.permissions.users.grant(OTHER, "REPO_WRITE")
step("grant, list, revoke repository permissions", permissions)


pr = step("create pull request", lambda: repo.pull_requests.create(
    "Feature", "refs/heads/" + FEATURE, "refs/heads/main", "from stashy", reviewers=[OTHER]))
if pr is not None:
    one = repo.pull_requests[pr["id"]]

    def get():
        got = one.get()
        expect(got["state"] == "OPEN" and got["version"] == 0, "open at version 0", got)
        ids = [p["id"] for p in repo.pull_requests.all(author=env("SLUICE_USER"))]
        expect(pr["id"] in ids, "listed with role.1=AUTHOR", ids)
    step("get and list pull request", get)

    def update():
        up = one.update(one.get()["version"], title="Feature, renamed")
        expect(up["title"] == "Feature, renamed", "the new title", up)
    step("update with version", update)

    def decline_reopen():
        # stashy sends the version in the JSON body, not the query.
        one.decline(one.get()["version"])
        expect(one.get()["state"] == "DECLINED", "DECLINED", one.get())
        one.reopen(one.get()["version"])
        expect(one.get()["state"] == "OPEN", "OPEN", one.get())
    step("decline and reopen, version in the body", decline_reopen)

    def comment():
        # stashy answers only whether the request succeeded.
        expect(one.comment("fine by me") is True, "the comment made", None)
    step("comment", comment)

    def merge():
        expect(one.can_merge(), "mergeable", one.merge_info())
        m = one.merge(one.get()["version"])
        expect(m["state"] == "MERGED", "MERGED", m)
    step("can merge, merge with version in the body", merge)

finish()
