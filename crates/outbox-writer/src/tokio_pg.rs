//! The tokio-postgres driver: the row inserted on the caller's open transaction.

use super::{Context, OutboxEvent, OutboxWriter, StoredPayload, WriteError};

impl OutboxWriter {
    /// Appends `event` to the outbox inside `tx` (the caller commits or rolls back) and returns
    /// the row's event id.
    pub async fn append_tokio_postgres<E: OutboxEvent + ?Sized>(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        event: &E,
        ctx: &Context,
    ) -> Result<uuid::Uuid, WriteError> {
        let row = self.row(event, ctx).await?;
        let [p1, p2, p3, p4, p5, p6] = row.text_params();
        let (text, bytes) = match &row.payload {
            None => (None, None),
            Some(StoredPayload::Json(s)) => (Some(s.as_str()), None),
            Some(StoredPayload::Bytes(b)) => (None, Some(b.as_slice())),
        };
        let payload: &(dyn tokio_postgres::types::ToSql + Sync) = if self.payload_is_bytea() {
            &bytes
        } else {
            &text
        };
        tx.execute(self.insert_sql(), &[&p1, &p2, &p3, &p4, &p5, &p6, payload])
            .await?;
        Ok(row.id)
    }
}
