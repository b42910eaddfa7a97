//! An application's own metrics, described like eosflow's: a `const` table of [`MetricDef`]s
//! (name, kind, unit, the `# HELP` text) handed to [`register`], so `/metrics` describes them
//! and a test can check the names a dashboard or an alert uses against the table.
//!
//! ```
//! use eosflow::metric_catalog::{metric, register, MetricDef, MetricKind, Unit};
//!
//! const METRICS: &[MetricDef] = &[metric(
//!     "myapp_orders_total",
//!     MetricKind::Counter,
//!     Unit::Count,
//!     "Orders accepted.",
//! )];
//! register(METRICS); // harmless before a recorder exists: described again at install
//! assert_eq!(METRICS[0].kind, MetricKind::Counter);
//! ```

/// The table entries and how a table is handed to the exporter: the one way an application's
/// metrics get their HELP text and unit on `/metrics`.
pub use crate::telemetry::catalog::{metric, register, MetricDef, MetricKind, Unit};
