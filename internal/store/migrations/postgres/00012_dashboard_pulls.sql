-- Indexes for the dashboard's pull requests across repositories
-- (store/pulldash.go): "my open pull requests" looks pull requests up by
-- author and state, "reviews waiting for me" looks participants up by
-- user and status. Without them both queries scan every pull request or
-- every participant row (Bitbucket's Small profile: 118,000 pull
-- requests). Expand-only: indexes older releases simply do not use.
--
-- Twin of ../sqlite/00012_dashboard_pulls.sql.

-- +goose Up
CREATE INDEX pull_requests_author ON pull_requests (author_id, state, updated_at);
CREATE INDEX pull_request_participants_user ON pull_request_participants (user_id, status, role);

-- +goose Down
DROP INDEX pull_request_participants_user;
DROP INDEX pull_requests_author;
