//! Enrichment on the driver: the order processor stamps each line with the catalog's product
//! (a global table read through `GlobalTableHandle::get`), the read model joins the customer's
//! profile (a co-partitioned table) into the view.

use serde_json::{json, Value};

use eosflow::testing::TestRecord;
use eosflow_orders::catalog::{self, CustomerProfile, Product};
use eosflow_orders::messages::types;

use super::support::*;

fn product(sku: &str, name: &str, category: &str) -> Product {
    Product {
        sku: sku.into(),
        name: name.into(),
        category: category.into(),
        list_price_minor: 100,
    }
}

#[test]
fn a_placed_order_carries_the_catalogs_product_names_and_a_sku_it_lacks_loses_nothing() {
    let t = topics();
    let mut d = orders();
    let products = catalog::products(&t);
    // sku-1 is in the catalog, sku-2 is not (yet).
    d.pipe_global(
        &products,
        &"sku-1".into(),
        Some(&product("sku-1", "teapot", "kitchen")),
    )
    .expect("catalog row");
    place(&mut d, "o-1", "c-1", "e-1");
    let feed = bodies(&mut d, &t.feed);
    assert_eq!(feed.len(), 1, "{feed:?}");
    assert_eq!(
        feed[0]["products"],
        json!([
            {"sku": "sku-1", "quantity": 2, "name": "teapot", "category": "kitchen"},
            {"sku": "sku-2", "quantity": 1, "name": null, "category": null}
        ])
    );
    // The order was not lost for its unknown sku: its saga started.
    assert_eq!(d.read_raw_output(&t.stock).len(), 1);

    // The catalog learns sku-2 and renames sku-1: a later order sees both changes, the first
    // order's later updates keep the names it was placed with.
    d.pipe_global(
        &products,
        &"sku-2".into(),
        Some(&product("sku-2", "kite", "toys")),
    )
    .expect("catalog row");
    d.pipe_global(
        &products,
        &"sku-1".into(),
        Some(&product("sku-1", "big teapot", "kitchen")),
    )
    .expect("catalog row");
    d.pipe(event(
        types::ORDER_CANCELLED,
        "o-1",
        &cancelled("o-1"),
        "e-2",
    ))
    .expect("cancel");
    place(&mut d, "o-2", "c-1", "e-3");
    let feed = bodies(&mut d, &t.feed);
    let of = |order: &str| -> Vec<Value> {
        feed.iter()
            .filter(|u| u["order_id"] == order)
            .map(|u| u["products"].clone())
            .collect()
    };
    assert_eq!(of("o-1").len(), 1, "the cancel's update: {feed:?}");
    assert_eq!(of("o-1")[0][0]["name"], "teapot");
    assert_eq!(of("o-1")[0][1]["name"], Value::Null);
    assert_eq!(of("o-2")[0][0]["name"], "big teapot");
    assert_eq!(of("o-2")[0][1]["name"], "kite");
}

fn update(customer: &str, order: &str, version: u64) -> TestRecord {
    let v = json!({"customer_id": customer, "order_id": order, "status": "PLACED",
                   "version": version, "total_minor": 500,
                   "products": [{"sku": "sku-1", "quantity": 1, "name": "teapot", "category": "kitchen"}]});
    TestRecord::new(
        topics().feed,
        Some(customer),
        Some(serde_json::to_vec(&v).expect("json")),
    )
    .header("type", types::CUSTOMER_ORDER_UPDATED)
}

#[test]
fn the_read_model_view_carries_the_customers_profile_and_a_tier_change_with_the_next_update() {
    let t = topics();
    let mut d = customers();
    let profiles = catalog::profiles(&t);
    let profile = |tier: &str| CustomerProfile {
        customer_id: "c-1".into(),
        name: "Ada Lovelace".into(),
        tier: tier.into(),
    };
    d.pipe_table(&profiles, &"c-1".into(), Some(&profile("gold")))
        .expect("profile");
    d.pipe(update("c-1", "o-1", 1)).expect("update");
    // c-2 has no profile yet: the view says so, and gets it with its next update.
    d.pipe(update("c-2", "o-2", 1)).expect("update");
    d.pipe_table(&profiles, &"c-1".into(), Some(&profile("silver")))
        .expect("tier change");
    d.pipe_table(
        &profiles,
        &"c-2".into(),
        Some(&CustomerProfile {
            customer_id: "c-2".into(),
            name: "Alan Turing".into(),
            tier: "bronze".into(),
        }),
    )
    .expect("profile");
    d.pipe(update("c-2", "o-3", 1)).expect("update");
    d.pipe(update("c-1", "o-4", 1)).expect("update");

    let views = bodies(&mut d, &t.customers);
    let pick = |v: &Value| {
        (
            v["customer_id"].as_str().unwrap_or_default().to_string(),
            v["name"].clone(),
            v["tier"].clone(),
        )
    };
    let got: Vec<_> = views.iter().map(pick).collect();
    assert_eq!(
        got,
        vec![
            ("c-1".into(), json!("Ada Lovelace"), json!("gold")),
            ("c-2".into(), Value::Null, Value::Null),
            ("c-2".into(), json!("Alan Turing"), json!("bronze")),
            ("c-1".into(), json!("Ada Lovelace"), json!("silver")),
        ]
    );
    assert_eq!(views[3]["orders"]["o-1"]["products"][0]["name"], "teapot");
    // The table is read-only for the handler: the profile rows are the table's own.
    assert_eq!(
        d.table_get(&profiles, &"c-1".into())
            .expect("table")
            .map(|p| p.tier),
        Some("silver".into())
    );
}
