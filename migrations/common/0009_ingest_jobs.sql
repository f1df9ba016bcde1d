-- An ingest started from the console runs as a job (`POST …/ingest` with
-- `Prefer: respond-async`), kept in the database so that any replica can tell
-- its progress. The process running it writes `read` and `found` (pages and
-- files) about twice a second; a job not written for a minute while `running`
-- lost its process and is shown as failed.
CREATE TABLE ingest_jobs (
    id          TEXT PRIMARY KEY,
    site        TEXT NOT NULL,
    operator    TEXT NOT NULL,
    state       TEXT NOT NULL,
    read_count  BIGINT NOT NULL,
    found_count BIGINT NOT NULL,
    report      TEXT,
    error       TEXT,
    started_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
