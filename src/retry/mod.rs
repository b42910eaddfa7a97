//! Failed records: dead-letter topics (and, with the retry ladder, `<topic>.retry.<n>`).

pub mod dlt;
