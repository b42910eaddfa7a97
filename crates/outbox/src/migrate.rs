//! The outbox table's migration: `migrations/0001_outbox.sql` with the configured names.

use eosflow::config::OutboxConfig;

use super::{bare_table, pg_err, quote_ident, quoted_table, OutboxError};

/// The migration's SQL template, embedded so the binary needs no files at run time.
pub const MIGRATION: &str = include_str!("../../../migrations/0001_outbox.sql");

/// The migration with the configured (validated) identifiers filled in.
pub fn render(cfg: &OutboxConfig) -> String {
    let index = quote_ident(&format!("{}_unsent_idx", bare_table(cfg)));
    MIGRATION
        .replace("{{table}}", &quoted_table(cfg))
        .replace("{{unsent_index}}", &index)
        .replace("{{id}}", &quote_ident(&cfg.column_id))
        .replace("{{occurred_at}}", &quote_ident(&cfg.column_occurred_at))
        .replace(
            "{{aggregate_type}}",
            &quote_ident(&cfg.column_aggregate_type),
        )
        .replace("{{aggregate_id}}", &quote_ident(&cfg.column_aggregate_id))
        .replace("{{type}}", &quote_ident(&cfg.column_type))
        .replace("{{payload}}", &quote_ident(&cfg.column_payload))
        .replace("{{headers}}", &quote_ident(&cfg.column_headers))
        .replace("{{sent_at}}", &quote_ident(&cfg.column_sent_at))
}

/// Whether the outbox table exists.
pub async fn table_exists(
    client: &tokio_postgres::Client,
    cfg: &OutboxConfig,
) -> Result<bool, OutboxError> {
    let row = client
        .query_one("select to_regclass($1) is not null", &[&quoted_table(cfg)])
        .await
        .map_err(pg_err("looking up the outbox table"))?;
    Ok(row.get(0))
}

/// Applies the migration (idempotent). Returns whether the table was absent before.
pub async fn migrate(
    client: &tokio_postgres::Client,
    cfg: &OutboxConfig,
) -> Result<bool, OutboxError> {
    let existed = table_exists(client, cfg).await?;
    if let Err(e) = client.batch_execute(&render(cfg)).await {
        // Two routers starting together race on CREATE … IF NOT EXISTS (a unique violation in
        // the catalog); the loser finds the table there.
        if !table_exists(client, cfg).await? {
            return Err(pg_err("applying migrations/0001_outbox.sql")(e));
        }
    }
    Ok(!existed)
}

/// Applies the migration only when the table is absent (what the router does at start, so an
/// existing table is never touched). Returns whether it was created.
pub async fn ensure(
    client: &tokio_postgres::Client,
    cfg: &OutboxConfig,
) -> Result<bool, OutboxError> {
    if table_exists(client, cfg).await? {
        return Ok(false);
    }
    migrate(client, cfg).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_configured_names_and_nothing_is_left_over() {
        let cfg = OutboxConfig {
            table: "app.events".into(),
            column_aggregate_id: "agg".into(),
            ..OutboxConfig::default()
        };
        let sql = render(&cfg);
        assert!(
            sql.contains(r#"CREATE TABLE IF NOT EXISTS "app"."events""#),
            "{sql}"
        );
        assert!(sql.contains(r#""agg""#), "{sql}");
        assert!(sql.contains(r#""events_unsent_idx""#), "{sql}");
        assert!(sql.contains(r#"WHERE "sent_at" IS NULL"#), "{sql}");
        assert!(!sql.contains("{{"), "{sql}");
    }
}
