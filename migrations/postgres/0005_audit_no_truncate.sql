-- TRUNCATE bypasses row triggers, so the append-only audit table refuses it with a
-- statement trigger of its own.
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION deskbell_audit_append_only();
