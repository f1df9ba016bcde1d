-- Ids, JSON and times are TEXT and BIGINT (milliseconds since the epoch) so that
-- one set of queries runs on SQLite and PostgreSQL through sqlx's Any driver.

CREATE TABLE visitors (
    id          TEXT PRIMARY KEY,
    site        TEXT NOT NULL,
    user_id     TEXT,
    created_at  BIGINT NOT NULL
);

-- One visitor per verified user of a site, so the same user gets the same visitor.
CREATE TABLE identities (
    site        TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    visitor     TEXT NOT NULL,
    PRIMARY KEY (site, user_id)
);

CREATE TABLE conversations (
    id          TEXT PRIMARY KEY,
    site        TEXT NOT NULL,
    visitor     TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE messages (
    id              TEXT PRIMARY KEY,
    conversation    TEXT NOT NULL,
    turn            TEXT NOT NULL,
    role            TEXT NOT NULL,
    text            TEXT NOT NULL,
    status          TEXT NOT NULL,
    citations       TEXT,
    input_tokens    BIGINT NOT NULL DEFAULT 0,
    output_tokens   BIGINT NOT NULL DEFAULT 0,
    created_at      BIGINT NOT NULL
);
CREATE INDEX messages_by_conversation ON messages (conversation, created_at, id);

CREATE TABLE calls (
    id              TEXT PRIMARY KEY,
    model_call_id   TEXT NOT NULL,
    conversation    TEXT NOT NULL,
    message         TEXT NOT NULL,
    turn            TEXT NOT NULL,
    site            TEXT NOT NULL,
    visitor         TEXT NOT NULL,
    tool            TEXT NOT NULL,
    label           TEXT NOT NULL,
    policy          TEXT NOT NULL,
    kind            TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    lines           TEXT,
    status          TEXT NOT NULL,
    config_digest   TEXT,
    expires_at      BIGINT,
    signature       TEXT,
    decided_at      BIGINT,
    reason          TEXT,
    context         TEXT,
    run_message     TEXT,
    run_status      TEXT,
    created_at      BIGINT NOT NULL
);
CREATE INDEX calls_by_message ON calls (message);
CREATE INDEX calls_by_conversation ON calls (conversation, status);
CREATE INDEX calls_by_expiry ON calls (status, expires_at);

CREATE TABLE audit (
    id              TEXT PRIMARY KEY,
    at              BIGINT NOT NULL,
    event           TEXT NOT NULL,
    reason          TEXT,
    call            TEXT NOT NULL,
    site            TEXT NOT NULL,
    conversation    TEXT NOT NULL,
    visitor         TEXT NOT NULL,
    tool            TEXT NOT NULL,
    policy          TEXT NOT NULL,
    arguments       TEXT NOT NULL,
    http_status     BIGINT,
    duration_ms     BIGINT
);
CREATE INDEX audit_by_time ON audit (at, id);
CREATE INDEX audit_by_call ON audit (call);
