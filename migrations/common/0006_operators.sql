-- The operator side (SPEC §15): accounts, API tokens, server-side sessions, failed
-- sign-ins (for the lockout), the console's tool changes, and the last ingest
-- report of each site's knowledge.
CREATE TABLE operators (
    email           TEXT PRIMARY KEY,
    role            TEXT NOT NULL,
    password_hash   TEXT NOT NULL,
    created_at      BIGINT NOT NULL
);

-- Tokens are stored as the SHA-256 of their text: they are long random strings,
-- so a slow hash adds nothing, and a lookup by hash never compares secrets.
CREATE TABLE operator_tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    role        TEXT NOT NULL,
    hash        TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);

-- A session is stored under a keyed hash of its cookie, never the cookie itself.
CREATE TABLE operator_sessions (
    id            TEXT PRIMARY KEY,
    email         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    last_seen_at  BIGINT NOT NULL,
    revoked_at    BIGINT
);

-- Each sign-in is recorded here before its password is checked (and removed when
-- it succeeds), so sign-ins sent at once cannot all slip under the limit.
CREATE TABLE operator_login_failures (
    key       TEXT NOT NULL,
    at        BIGINT NOT NULL,
    attempt   TEXT NOT NULL
);
CREATE INDEX operator_login_failures_by_key ON operator_login_failures (key, at);
-- One row per key, locked by each attempt's transaction before it counts: on
-- PostgreSQL concurrent attempts of one key then count one after another.
CREATE TABLE operator_login_keys (
    key   TEXT PRIMARY KEY
);

-- The console's value of a tool's label, description or policy wins over the
-- file's until it is reset. `tool_versions` moves with every change, so each
-- replica notices a change with one indexed read per model round.
CREATE TABLE tool_overrides (
    site          TEXT NOT NULL,
    tool          TEXT NOT NULL,
    label         TEXT,
    description   TEXT,
    policy        TEXT,
    operator      TEXT NOT NULL,
    changed_at    BIGINT NOT NULL,
    PRIMARY KEY (site, tool)
);
CREATE TABLE tool_versions (
    site      TEXT PRIMARY KEY,
    version   BIGINT NOT NULL
);

CREATE TABLE knowledge_reports (
    site    TEXT PRIMARY KEY,
    at      BIGINT NOT NULL,
    report  TEXT NOT NULL
);

-- Operator changes are audit rows too, naming the operator (null on call rows).
ALTER TABLE audit ADD COLUMN operator TEXT;

-- The console's lists page newest first, by keyset, optionally within one site.
CREATE INDEX conversations_newest ON conversations (created_at, id);
CREATE INDEX conversations_by_site ON conversations (site, created_at, id);
CREATE INDEX conversations_by_visitor ON conversations (visitor, created_at, id);
CREATE INDEX audit_by_site ON audit (site, at, id);
CREATE INDEX audit_by_event ON audit (event, at, id);
CREATE INDEX audit_by_tool ON audit (tool, at, id);
CREATE INDEX messages_by_status ON messages (status, conversation);

-- The installation's id: replicas sharing this database share counters in Redis
-- under it (SPEC §16), and another installation on the same Redis never does.
CREATE TABLE installation (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    id          TEXT NOT NULL
);
