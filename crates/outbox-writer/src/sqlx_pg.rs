//! The sqlx driver: the row inserted on the caller's connection, normally the one of its open
//! `sqlx::Transaction` (`&mut *tx`).

use super::{Context, OutboxEvent, OutboxWriter, StoredPayload, WriteError};

impl OutboxWriter {
    /// Appends `event` to the outbox on `conn` (pass `&mut *tx` of the caller's transaction,
    /// which the caller commits or rolls back) and returns the row's event id.
    pub async fn append_sqlx<E: OutboxEvent + ?Sized>(
        &self,
        conn: &mut sqlx::PgConnection,
        event: &E,
        ctx: &Context,
    ) -> Result<uuid::Uuid, WriteError> {
        let row = self.row(event, ctx).await?;
        let mut q = sqlx::query(self.insert_sql());
        for p in row.text_params() {
            q = q.bind(p);
        }
        q = match row.payload {
            None if self.payload_is_bytea() => q.bind(None::<Vec<u8>>),
            None => q.bind(None::<String>),
            Some(StoredPayload::Json(s)) => q.bind(s),
            Some(StoredPayload::Bytes(b)) => q.bind(b),
        };
        q.execute(conn).await?;
        Ok(row.id)
    }
}
