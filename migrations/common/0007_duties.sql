-- Work that one replica at a time does (the expiry sweep, SPEC §16): the holder
-- renews its hold; when it lapses, another replica takes the duty over.
CREATE TABLE duties (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
