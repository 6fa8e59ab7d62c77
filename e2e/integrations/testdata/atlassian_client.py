"""atlassian-python-api's Bitbucket client against a Sluice node.

Environment (set by the Go test): SLUICE_URL, SLUICE_USER, SLUICE_PASSWORD,
SLUICE_API (1.0 or latest), SLUICE_NEW_PROJECT (a key to create), SEED_PROJECT,
SEED_REPO (a repository whose main branch has SEED_COMMITS commits ending at
SEED_HEAD, and a branch SEED_FEATURE one commit ahead), SEED_FILE and
SEED_FILE_CONTENT (a file on main), SEED_OTHER_USER (a user to grant and to
ask for review).
"""

from atlassian import Bitbucket

from conform import env, expect, finish, step

bb = Bitbucket(env("SLUICE_URL"), username=env("SLUICE_USER"), password=env("SLUICE_PASSWORD"),
               api_version=env("SLUICE_API"))
P, R = env("SEED_PROJECT"), env("SEED_REPO")
NEW = env("SLUICE_NEW_PROJECT")
HEAD = env("SEED_HEAD")
FEATURE = env("SEED_FEATURE")
OTHER = env("SEED_OTHER_USER")


# Projects.
def create_project():
    bb.create_project(NEW, "Made by atlassian-python-api", "conformance")
    p = bb.project(NEW)
    expect(p["key"] == NEW and p["name"] == "Made by atlassian-python-api", "the new project", p)
step("create and get project", create_project)


def projects():
    keys = [p["key"] for p in bb.project_list(limit=1)]
    expect(P in keys and len(keys) >= 2, "every project over pages of one, %s among them" % P, keys)
step("list projects (paged, limit=1)", projects)


# Repositories.
def create_repo():
    r = bb.create_repo(NEW, "made")
    expect(r["slug"] == "made" and r["project"]["key"] == NEW, "the new repository", r)
    got = bb.get_repo(NEW, "made")
    expect(got["id"] == r["id"], "the same repository", got)
    slugs = [x["slug"] for x in bb.repo_all_list(NEW)]
    expect(slugs == ["made"], "the project's one repository", slugs)
step("create, get, list repository", create_repo)


def seed_repo():
    r = bb.get_repo(P, R)
    expect(r["slug"] == R and r["scmId"] == "git", "the seeded repository", r)
    clones = {l["name"]: l["href"] for l in r["links"]["clone"]}
    expect("http" in clones, "an http clone link", r["links"])
step("get seeded repository", seed_repo)


# Branches.
def branches():
    names = sorted(b["displayId"] for b in bb.get_branches(P, R, limit=1))
    expect(names == sorted(["main", FEATURE]), "main and the feature branch over pages of one", names)
    feat = list(bb.get_branches(P, R, filter=FEATURE))
    expect(len(feat) == 1 and feat[0]["id"] == "refs/heads/" + FEATURE, "filterText", feat)
step("list branches (paged, filter)", branches)


def default_branch():
    d = bb.get_default_branch(P, R)
    expect(d["displayId"] == "main" and d["latestCommit"] == HEAD, "main at the seeded head", d)
step("get default branch", default_branch)


def create_branch():
    b = bb.create_branch(P, R, "made-branch", HEAD, "made by the client")
    expect(b["id"] == "refs/heads/made-branch" and b["latestCommit"] == HEAD, "the new branch", b)
step("create branch", create_branch)


def set_default():
    bb.set_default_branch(P, R, "refs/heads/made-branch")
    d = bb.get_default_branch(P, R)
    expect(d["displayId"] == "made-branch", "the new default branch", d)
    bb.set_default_branch(P, R, "refs/heads/main")
    d = bb.get_default_branch(P, R)
    expect(d["displayId"] == "main", "main again", d)
step("set default branch and back", set_default)


def delete_branch():
    bb.delete_branch(P, R, "made-branch", HEAD)
    names = [b["displayId"] for b in bb.get_branches(P, R, filter="made-branch")]
    expect(names == [], "the branch gone", names)
step("delete branch", delete_branch)


# Tags.
def tags():
    t = bb.set_tag(P, R, "v1.0", HEAD, "release 1.0")
    expect(t["displayId"] == "v1.0" and t["latestCommit"] == HEAD, "the new tag", t)
    bb.set_tag(P, R, "v1.1", HEAD)
    names = sorted(x["displayId"] for x in bb.get_tags(P, R, limit=1) if x["displayId"] != "seed-1")
    expect(names == ["v1.0", "v1.1"], "both tags over pages of one", names)
    names = [x["displayId"] for x in bb.get_tags(P, R, filter="1.1")]
    expect(names == ["v1.1"], "filterText", names)
    bb.delete_tag(P, R, "v1.1")
    names = sorted(x["displayId"] for x in bb.get_tags(P, R))
    expect(names == ["seed-1", "v1.0"], "v1.1 deleted", names)
step("create, list, delete tags", tags)


# Commits and content.
def commits():
    ids = [c["id"] for c in bb.get_commits(P, R, hash_newest=HEAD, limit=7)]
    expect(len(ids) == int(env("SEED_COMMITS")) and ids[0] == HEAD and len(set(ids)) == len(ids),
           "every commit once over pages of 7, newest first", ids)
    c = bb.get_commit_info(P, R, HEAD)
    expect(c["id"] == HEAD and c["parents"], "the head commit", c)
step("list commits (paged), get commit", commits)


def raw():
    text = bb.get_content_of_file(P, R, env("SEED_FILE"))
    if isinstance(text, bytes):
        text = text.decode()
    expect(text == env("SEED_FILE_CONTENT"), "the file's bytes", text)
step("raw file", raw)


def files():
    names = list(bb.get_file_list(P, R))
    expect(env("SEED_FILE") in names, "the file listed", names)
step("file list", files)


# Permissions.
def permissions():
    bb.repo_grant_user_permissions(P, R, OTHER, "REPO_WRITE")
    users = {u["user"]["name"]: u["permission"] for u in bb.repo_users(P, R)}
    expect(users.get(OTHER) == "REPO_WRITE", "%s with REPO_WRITE" % OTHER, users)
step("grant and list repository permissions", permissions)


# Pull requests, each change carrying the version it read.
pr = step("open pull request", lambda: bb.open_pull_request(
    P, R, P, R, FEATURE, "main", "Feature", "from atlassian-python-api", reviewers=[OTHER]))
if pr is not None:
    ID = pr["id"]

    def opened():
        expect(pr["state"] == "OPEN" and pr["version"] == 0, "an open pull request at version 0", pr)
        expect([r["user"]["name"] for r in pr["reviewers"]] == [OTHER], "the reviewer", pr["reviewers"])
        got = bb.get_pull_request(P, R, ID)
        expect(got["id"] == ID and got["fromRef"]["displayId"] == FEATURE, "the same pull request", got)
    step("get pull request", opened)

    def update():
        cur = bb.get_pull_request(P, R, ID)
        up = bb.update_pull_request(P, R, ID, {"title": "Feature, renamed", "version": cur["version"],
                                              "description": cur.get("description", ""),
                                              "reviewers": cur["reviewers"]})
        expect(up["title"] == "Feature, renamed" and up["version"] == cur["version"] + 1, "a new version", up)
    step("update pull request with version", update)

    def decline_reopen():
        cur = bb.get_pull_request(P, R, ID)
        bb.decline_pull_request(P, R, ID, cur["version"])
        got = bb.get_pull_request(P, R, ID)
        expect(got["state"] == "DECLINED", "DECLINED", got)
        bb.reopen_pull_request(P, R, ID, got["version"])
        got = bb.get_pull_request(P, R, ID)
        expect(got["state"] == "OPEN", "OPEN again", got)
    step("decline and reopen with version", decline_reopen)

    def comment():
        c = bb.add_pull_request_comment(P, R, ID, "looks good")
        expect(c["text"] == "looks good", "the comment", c)
        acts = [a["action"] for a in bb.get_pull_requests_activities(P, R, ID)]
        expect("COMMENTED" in acts and "OPENED" in acts, "OPENED and COMMENTED activities", acts)
    step("comment and activities", comment)

    def listing():
        ids = [p["id"] for p in bb.get_pull_requests(P, R, state="ALL", limit=1)]
        expect(ID in ids, "the pull request listed", ids)
    step("list pull requests (paged)", listing)

    def can_merge():
        m = bb.is_pull_request_can_be_merged(P, R, ID)
        expect(m["canMerge"] is True and m["conflicted"] is False, "mergeable", m)
    step("can merge", can_merge)

    def merge():
        cur = bb.get_pull_request(P, R, ID)
        m = bb.merge_pull_request(P, R, ID, "merged by atlassian-python-api", pr_version=cur["version"])
        expect(m["state"] == "MERGED", "MERGED", m)
        d = bb.get_default_branch(P, R)
        expect(d["latestCommit"] != HEAD, "main moved by the merge", d)
    step("merge with version", merge)


# Clean up what the script made.
def delete_repo():
    bb.delete_repo(NEW, "made")
    slugs = [x["slug"] for x in bb.repo_all_list(NEW)]
    expect(slugs == [], "no repository left", slugs)
step("delete repository", delete_repo)

finish()
