-- A visitor's rating of an answer (thumbs up or down, with an optional
-- comment). One row per answer: rating it again replaces the row, so what a
-- visitor last said is what counts (the first time is kept in created_at).
CREATE TABLE feedback (
    message      TEXT PRIMARY KEY,
    conversation TEXT NOT NULL,
    site         TEXT NOT NULL,
    rating       TEXT NOT NULL,
    comment      TEXT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX feedback_by_conversation ON feedback (conversation);
CREATE INDEX feedback_by_site_and_time ON feedback (site, updated_at);
