-- Approvals beyond the visitor (SPEC §20): what decided a call's gate, the
-- quota use a call holds, and the card an edited card replaced.
-- `rule`: the `confirm_when` record (`{"confirm_when": …, "result": …}`), kept
-- on the call and on its `requested` audit row.
ALTER TABLE calls ADD COLUMN rule TEXT;
ALTER TABLE audit ADD COLUMN rule TEXT;
-- The quota use a call holds (who it counts for, and which UTC day or month),
-- given back when its card closes without running; `quota_note` is what the
-- card showed (`{"left", "max", "window"}`).
ALTER TABLE calls ADD COLUMN quota_subject TEXT;
ALTER TABLE calls ADD COLUMN quota_period TEXT;
ALTER TABLE calls ADD COLUMN quota_note TEXT;
-- A card signed for a visitor's edits names the card it replaced; `editable`
-- is the card's editable fields as shown (JSON), kept with the card.
ALTER TABLE calls ADD COLUMN edited_from TEXT;
ALTER TABLE calls ADD COLUMN editable TEXT;

-- Uses counted per tool, subject (a visitor, or '*' for the site) and period.
-- One row per count, changed only by a conditional upsert in the transaction
-- that stores the call, so racing calls on any replica are counted exactly.
CREATE TABLE quota_uses (
    site    TEXT NOT NULL,
    tool    TEXT NOT NULL,
    subject TEXT NOT NULL,
    period  TEXT NOT NULL,
    used    BIGINT NOT NULL,
    PRIMARY KEY (site, tool, subject, period)
);

-- The console's `confirm_when` for a tool (SPEC §20): '' turns the file's rule
-- off (the policy's gate always holds); NULL keeps the file's.
ALTER TABLE tool_overrides ADD COLUMN confirm_when TEXT;
