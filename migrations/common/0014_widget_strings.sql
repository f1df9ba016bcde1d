-- The console's own words for a site's widget (SPEC §22): one row per string
-- and language ('*' for every language), winning over the config file's
-- [site.strings] until reset. Shared by replicas like the tools' overrides.
CREATE TABLE widget_strings (
    site       TEXT NOT NULL,
    key        TEXT NOT NULL,
    language   TEXT NOT NULL,
    text       TEXT NOT NULL,
    operator   TEXT NOT NULL,
    changed_at BIGINT NOT NULL,
    PRIMARY KEY (site, key, language)
);
