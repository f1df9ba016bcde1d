-- The audit table is append-only: the database itself refuses changes to a row.
CREATE FUNCTION deskbell_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit table is append-only';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_no_update BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION deskbell_audit_append_only();
