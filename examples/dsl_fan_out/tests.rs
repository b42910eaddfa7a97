//! The fan-out example's unit tests: the topology in `TopologyTestDriver`, no broker.
//! `cargo test --locked --example dsl_fan_out` runs them.

use std::collections::BTreeMap;

use eosflow::serdes::{JsonSerde, StringSerde};
use eosflow::testing::DltClass;
use eosflow::testing::{TestRecord, TopologyTestDriver};
use eosflow::topology::Topology;

use super::{topology, Payment, DOMESTIC, FOREIGN, LARGE, OUTPUTS, PAYMENTS, REFUNDS};

type TestResult = Result<(), Box<dyn std::error::Error>>;
type Driver = TopologyTestDriver<Topology>;

/// A payment record: key = account id, value = the payment as JSON.
fn payment(account: &str, amount_cents: i64, currency: &str) -> TestRecord {
    let payment = Payment {
        amount_cents,
        currency: currency.to_string(),
    };
    let json = serde_json::to_vec(&payment).expect("a payment serializes");
    TestRecord::new(PAYMENTS, Some(account), Some(json))
}

/// What each output topic got since the last read, as `account amount currency` (or
/// `account -` for a tombstone); topics that got nothing are left out.
fn fanned_out(
    driver: &mut Driver,
) -> Result<BTreeMap<&'static str, Vec<String>>, Box<dyn std::error::Error>> {
    let mut out = BTreeMap::new();
    for topic in OUTPUTS {
        let records = driver.read_output(topic, &StringSerde, &JsonSerde::<Payment>::new())?;
        let lines: Vec<String> = records
            .into_iter()
            .map(|(account, p)| {
                let account = account.unwrap_or_default();
                match p {
                    Some(p) => format!("{account} {} {}", p.amount_cents, p.currency),
                    None => format!("{account} -"),
                }
            })
            .collect();
        if !lines.is_empty() {
            out.insert(topic, lines);
        }
    }
    Ok(out)
}

fn expect(pairs: &[(&'static str, &[&str])]) -> BTreeMap<&'static str, Vec<String>> {
    pairs
        .iter()
        .map(|(topic, lines)| (*topic, lines.iter().map(|l| l.to_string()).collect()))
        .collect()
}

#[test]
fn each_payment_goes_to_the_first_branch_that_takes_it_and_to_no_other() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(payment("a1", -500, "EUR"))?;
    driver.pipe(payment("a2", -5, "USD"))?; // a refund and foreign: a refund
    driver.pipe(payment("a3", 2_000_000, "USD"))?; // large and foreign: large
    driver.pipe(payment("a4", 1_000_000, "EUR"))?; // exactly 10 000.00: large
    driver.pipe(payment("a5", 999_999, "EUR"))?; // 1 cent less: domestic
    driver.pipe(payment("a6", 100, "CHF"))?;
    driver.pipe(payment("a7", 100, "eur"))?; // EUR in any case: domestic
    assert_eq!(
        fanned_out(&mut driver)?,
        expect(&[
            (REFUNDS, &["a1 -500 EUR", "a2 -5 USD"]),
            (LARGE, &["a3 2000000 USD", "a4 1000000 EUR"]),
            (FOREIGN, &["a6 100 CHF"]),
            (DOMESTIC, &["a5 999999 EUR", "a7 100 eur"]),
        ])
    );
    Ok(())
}

#[test]
fn a_payment_no_branch_takes_goes_to_the_default_branch_unchanged() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(payment("a1", 0, "EUR").timestamp(42_000))?;
    let domestic = driver.output_topic(DOMESTIC, StringSerde, JsonSerde::<Payment>::new());
    let records = domestic.read_records(&mut driver)?;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key.as_deref(), Some("a1"));
    assert_eq!(
        records[0].value,
        Some(Payment {
            amount_cents: 0,
            currency: "EUR".into()
        })
    );
    assert_eq!(records[0].timestamp, Some(42_000));
    assert!(fanned_out(&mut driver)?.is_empty());
    Ok(())
}

#[test]
fn a_tombstone_goes_to_the_default_branch_and_a_value_that_is_not_json_to_the_dlt() -> TestResult {
    let mut driver = TopologyTestDriver::new(topology()?)?;
    driver.pipe(TestRecord::new(PAYMENTS, Some("a1"), None::<&[u8]>))?;
    driver.pipe(TestRecord::new(PAYMENTS, Some("a2"), Some(b"".as_slice())))?;
    driver.pipe(TestRecord::new(
        PAYMENTS,
        Some("a3"),
        Some(b"{\"amount_cents\":5}".as_slice()),
    ))?;
    driver.pipe(payment("a4", 5, "EUR"))?;
    assert_eq!(
        fanned_out(&mut driver)?,
        expect(&[(DOMESTIC, &["a1 -", "a4 5 EUR"])])
    );
    let dead = driver.dead_letters(PAYMENTS);
    let accounts: Vec<String> = dead.iter().map(|d| d.record.key_text()).collect();
    assert_eq!(accounts, ["a2", "a3"]); // empty, and no currency
    assert!(dead.iter().all(|d| d.class == DltClass::Permanent));
    assert!(dead.iter().all(|d| d.reason.contains("not JSON")));
    Ok(())
}

/// A `kill -9` anywhere — inside a batch, at each batch boundary, between a batch's commit and
/// its local apply — changes no committed output or dead letter: each payment reaches its one
/// topic exactly once, in every run.
#[test]
fn a_crash_anywhere_changes_no_committed_output() -> TestResult {
    for seed in [1, 2, 3] {
        let mut crash_test = TopologyTestDriver::with_crashes(seed, topology);
        for (i, (amount, currency)) in [
            (-500, "EUR"),
            (2_000_000, "USD"),
            (100, "CHF"),
            (100, "EUR"),
            (1_000_000, "EUR"),
            (7, "GBP"),
        ]
        .into_iter()
        .enumerate()
        {
            crash_test.pipe(payment(&format!("a{i}"), amount, currency).partition(i as i32 % 2));
        }
        crash_test.pipe(TestRecord::new(PAYMENTS, Some("a9"), None::<&[u8]>));
        crash_test.pipe(TestRecord::new(PAYMENTS, Some("a9"), Some(b"{".as_slice())));
        let summary = crash_test.run()?;
        assert!(summary.crashes.len() >= summary.batches);
        let written = |topic| summary.written.get(topic).copied().unwrap_or(0);
        assert_eq!(OUTPUTS.map(written), [1, 2, 2, 2], "{:?}", summary.written);
        assert_eq!(written("dsl-fan-out.payments.DLT"), 1);
    }
    Ok(())
}
