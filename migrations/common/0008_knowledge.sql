-- Knowledge lives in the database (SPEC §16): each site's documents as read at
-- the last ingest (the chunks are made from them the same way everywhere), and a
-- version that moves with every change. Each replica's search index is a cache
-- it brings up to date when the version moves.
CREATE TABLE knowledge_documents (
    site    TEXT NOT NULL,
    path    TEXT NOT NULL,
    title   TEXT NOT NULL,
    url     TEXT,
    text    TEXT NOT NULL,
    hash    TEXT NOT NULL,
    PRIMARY KEY (site, path)
);
CREATE TABLE knowledge_versions (
    site      TEXT PRIMARY KEY,
    version   BIGINT NOT NULL
);
