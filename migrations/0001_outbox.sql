-- The outbox table (Debezium Outbox Event Router shape) and the index of unsent rows.
-- Applied by `eosflow outbox migrate` and by the router at start when the table is absent.
-- The double-brace placeholders are the configured (validated, quoted) identifiers: see [outbox] in
-- the configuration; every statement is idempotent.
CREATE TABLE IF NOT EXISTS {{table}} (
    {{id}}             uuid        PRIMARY KEY,
    {{occurred_at}}    timestamptz NOT NULL DEFAULT now(),
    {{aggregate_type}} text,
    {{aggregate_id}}   text        NOT NULL,
    {{type}}           text        NOT NULL,
    {{payload}}        jsonb,
    {{headers}}        jsonb,
    {{sent_at}}        timestamptz
);

-- The polling publisher's scan (`WHERE sent_at IS NULL ORDER BY occurred_at`) stays small
-- however many sent rows wait for pruning.
CREATE INDEX IF NOT EXISTS {{unsent_index}} ON {{table}} ({{occurred_at}}) WHERE {{sent_at}} IS NULL;
