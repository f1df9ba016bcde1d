-- The human desk (SPEC §19). A conversation is held by the assistant, waits in
-- the queue, or is held by an operator (`operator:<email>`); `holder_since` is
-- when it entered its holder's hands (the queue's wait is timed from it).
ALTER TABLE conversations ADD COLUMN holder TEXT NOT NULL DEFAULT 'assistant';
ALTER TABLE conversations ADD COLUMN holder_since BIGINT;
-- The last sequence number given to the conversation's events: taking the next
-- one locks the conversation's row, so on each conversation events commit in
-- the order of their numbers and a reader that saw n never later meets n - 1.
ALTER TABLE conversations ADD COLUMN event_seq BIGINT NOT NULL DEFAULT 0;
-- An operator's reply carries the display name it was written under (never the
-- operator's email); a line such as "Back with the assistant" has role `event`.
ALTER TABLE messages ADD COLUMN author TEXT;
-- The name visitors see for an operator (`deskbell operator add --name`).
ALTER TABLE operators ADD COLUMN name TEXT;

-- What a visitor's live channel (`GET /v1/conversations/{id}/events`) carries,
-- kept so that a reconnect with `Last-Event-ID` resumes without loss or
-- duplicate, whichever replica it reaches.
CREATE TABLE conversation_events (
    conversation TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    kind         TEXT NOT NULL,
    data         TEXT NOT NULL,
    at           BIGINT NOT NULL,
    PRIMARY KEY (conversation, seq)
);
CREATE INDEX conversations_by_holder ON conversations (holder, holder_since);

-- An email a visitor left when nobody was there to answer (SPEC §19): shown in
-- the console, never sent to the model. The latest one counts.
CREATE TABLE conversation_contacts (
    conversation TEXT NOT NULL,
    email        TEXT NOT NULL,
    at           BIGINT NOT NULL,
    PRIMARY KEY (conversation, at)
);
