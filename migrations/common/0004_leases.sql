-- Each running process holds a lease: a heartbeat row it renews every few seconds.
-- Calls it is running and answers it is streaming name it as their owner, so that
-- when a process dies (its lease lapses) another start, or a live replica, finds
-- exactly what it left unfinished and finishes it (SPEC §6.5, §16).
CREATE TABLE leases (
    owner       TEXT PRIMARY KEY,
    started_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);

-- A call's owner is set while it runs (auto, or confirmed) and cleared with its
-- outcome; `deliveries` counts how often it was sent to the tool; `result` is what
-- the tool answered (what the model was told), so a recovered turn can go on.
ALTER TABLE calls ADD COLUMN owner TEXT;
ALTER TABLE calls ADD COLUMN deliveries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE calls ADD COLUMN result TEXT;
CREATE INDEX calls_in_flight ON calls (owner) WHERE owner IS NOT NULL;

-- A streaming answer's owner, its last saved model transcript (to resume a turn
-- whose tool call was interrupted) and the budget it reserved (to release it).
ALTER TABLE messages ADD COLUMN owner TEXT;
ALTER TABLE messages ADD COLUMN context TEXT;
ALTER TABLE messages ADD COLUMN budget_day TEXT;
ALTER TABLE messages ADD COLUMN reserved BIGINT NOT NULL DEFAULT 0;
CREATE INDEX messages_streaming ON messages (owner) WHERE status = 'streaming';
