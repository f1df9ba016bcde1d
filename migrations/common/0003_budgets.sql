-- Daily token budgets per site: settled spend and reservations of running turns.
CREATE TABLE budgets (
    site        TEXT NOT NULL,
    day         TEXT NOT NULL,
    spent       BIGINT NOT NULL DEFAULT 0,
    reserved    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (site, day)
);
