//! Identifier validation and quoting: table and column names never reach SQL unchecked.

use crate::ProjectionError;

/// Longest identifier Postgres keeps (`NAMEDATALEN - 1`); longer ones are silently truncated,
/// which could make two names collide, so they are refused.
const MAX_IDENT: usize = 63;

/// Checks one identifier (a column, or one part of a table name) and returns it double-quoted.
///
/// Only `[A-Za-z_][A-Za-z0-9_$]*` of at most 63 bytes is accepted, and it is quoted as well, so
/// a reserved word (`order`) works and nothing a record carries can change the statement.
/// Quoting keeps case: `Orders` names the table created as `"Orders"`, not `orders`.
pub(crate) fn quote_ident(name: &str) -> Result<String, ProjectionError> {
    let mut chars = name.chars();
    let ok_first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let ok_rest = chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if !ok_first || !ok_rest || name.len() > MAX_IDENT {
        return Err(ProjectionError::InvalidIdentifier(name.to_string()));
    }
    Ok(format!("\"{name}\""))
}

/// A table name, optionally schema-qualified (`schema.table`), checked and quoted part by part.
pub(crate) fn quote_table(name: &str) -> Result<String, ProjectionError> {
    match name.split_once('.') {
        Some((schema, table)) => Ok(format!("{}.{}", quote_ident(schema)?, quote_ident(table)?)),
        None => quote_ident(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_are_refused_and_plain_ones_quoted() {
        assert_eq!(quote_table("orders").unwrap(), "\"orders\"");
        assert_eq!(quote_table("app.orders").unwrap(), "\"app\".\"orders\"");
        for bad in [
            "a\"; drop table x; --",
            "",
            "1abc",
            "a b",
            "a.b.c",
            "x;",
            "\"q\"",
            &"a".repeat(64),
        ] {
            assert!(quote_table(bad).is_err(), "{bad:?} accepted");
        }
    }
}
