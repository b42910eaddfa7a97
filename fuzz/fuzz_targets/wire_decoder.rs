//! The Confluent wire-format decoder on arbitrary bytes, against fixed schemas (no registry):
//! ids 1..=3 are order placed v1, order cancelled v1 and order status changed v1. Any input must
//! decode or come back as bad input; a panic, hang or runaway allocation is a finding.
#![no_main]

use std::cell::RefCell;
use std::collections::HashMap;

use eosflow::internals::codec::decode::{DecodeError, Decoder, FixedSource};
use eosflow::internals::codec::Catalog;
use libfuzzer_sys::fuzz_target;

thread_local! {
    static DECODER: RefCell<Decoder> = RefCell::new({
        let cat = Catalog::from_texts([
            (
                "orders/order-placed.v1.avsc",
                include_str!("../../schemas/orders/order-placed.v1.avsc"),
            ),
            (
                "orders/order-cancelled.v1.avsc",
                include_str!("../../schemas/orders/order-cancelled.v1.avsc"),
            ),
            (
                "orders/order-status-changed.v1.avsc",
                include_str!("../../schemas/orders/order-status-changed.v1.avsc"),
            ),
        ])
        .expect("the repository's contracts");
        let text = |t: &str| cat.get(t).expect("contract").text.clone();
        let ids = HashMap::from([
            (1, text("orders.order-placed.v1")),
            (2, text("orders.order-cancelled.v1")),
            (3, text("orders.order-status-changed.v1")),
        ]);
        Decoder::new(FixedSource(ids), cat)
    });
}

fuzz_target!(|data: &[u8]| {
    DECODER.with(|d| match d.borrow_mut().decode_avro(data) {
        Ok(_) | Err(DecodeError::Bad(_)) => {}
        Err(e @ DecodeError::Unavailable(_)) => panic!("{e} from a fixed source"),
    });
});
