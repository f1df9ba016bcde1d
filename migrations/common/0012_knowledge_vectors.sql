-- Passage vectors (SPEC §21), kept by the embedding model that made them and the
-- SHA-256 of the text it read: shared by every replica and every site, so a
-- passage is embedded once however many indexes hold it, and only passages that
-- changed are embedded again. BYTEA is PostgreSQL's byte string; SQLite stores the
-- bytes as given under any declared type.
CREATE TABLE knowledge_vectors (
    model   TEXT NOT NULL,
    chunk   TEXT NOT NULL,
    vector  BYTEA NOT NULL,
    PRIMARY KEY (model, chunk)
);
