//! The checks every market run ends with: money conserved, every item in exactly one place,
//! no item bought twice, every purchase debited and credited exactly once.

use std::collections::HashMap;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

use super::model::{BUYER_FUNDS, Keys, seller_of};
use cli_support::exit::CliError;

/// What the workers of one run did, as they recorded it.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Items each seller created (`<item>` names), by seller id.
    pub created: HashMap<String, Vec<String>>,
    /// Purchases `(itemid, price)` by buyer id.
    pub purchases: HashMap<String, Vec<(String, i64)>>,
}

/// Every violation found; empty when the run was consistent.
pub async fn check(
    data: &mut MultiplexedConnection,
    keys: &Keys,
    ledger: &Ledger,
) -> Result<Vec<String>, CliError> {
    let failed = |err: redis::RedisError| CliError::Unavailable(format!("market check: {err}"));
    let mut violations = Vec::new();

    // Money: buyers' debits and sellers' credits.
    let mut total = 0i64;
    let mut credited: HashMap<&str, i64> = HashMap::new();
    for (buyer, purchases) in &ledger.purchases {
        let funds: i64 = data.hget(keys.user(buyer), "funds").await.map_err(failed)?;
        total += funds;
        let spent: i64 = purchases.iter().map(|(_, price)| price).sum();
        if BUYER_FUNDS - funds != spent {
            violations.push(format!(
                "{buyer} was debited {} for purchases worth {spent}",
                BUYER_FUNDS - funds
            ));
        }
        for (itemid, price) in purchases {
            *credited.entry(seller_of(itemid)).or_default() += price;
        }
    }
    for seller in ledger.created.keys() {
        let funds: i64 = data
            .hget(keys.user(seller), "funds")
            .await
            .map_err(failed)?;
        total += funds;
        let sold = credited.get(seller.as_str()).copied().unwrap_or(0);
        if funds != sold {
            violations.push(format!(
                "{seller} was credited {funds} for sales worth {sold}"
            ));
        }
    }
    let initial = BUYER_FUNDS * ledger.purchases.len() as i64;
    if total != initial {
        violations.push(format!(
            "money not conserved: {total} in all, {initial} at the start"
        ));
    }

    // Items: each created item in exactly one place.
    let mut places: HashMap<String, Vec<String>> = HashMap::new();
    let listed: Vec<String> = data.zrange(keys.market(), 0, -1).await.map_err(failed)?;
    for itemid in listed {
        let item = itemid
            .rsplit_once('.')
            .map_or(itemid.clone(), |(i, _)| i.to_string());
        places.entry(item).or_default().push("market".into());
    }
    for user in ledger.created.keys().chain(ledger.purchases.keys()) {
        let items: Vec<String> = data.smembers(keys.inventory(user)).await.map_err(failed)?;
        for item in items {
            places
                .entry(item)
                .or_default()
                .push(format!("inventory of {user}"));
        }
    }
    let mut created = 0;
    for items in ledger.created.values() {
        for item in items {
            created += 1;
            match places.get(item).map(Vec::len) {
                Some(1) => {}
                Some(n) => violations.push(format!("{item} is in {n} places: {:?}", places[item])),
                None => violations.push(format!("{item} vanished")),
            }
        }
    }
    if places.len() != created {
        violations.push(format!(
            "{} items exist, {created} were created",
            places.len()
        ));
    }
    for (buyer, purchases) in &ledger.purchases {
        let owned: usize = data.scard(keys.inventory(buyer)).await.map_err(failed)?;
        if owned != purchases.len() {
            violations.push(format!(
                "{buyer} owns {owned} items after {} purchases",
                purchases.len()
            ));
        }
    }
    Ok(violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::AsyncCommands;

    /// One seller with two items (one listed, one sold to the buyer for 30).
    async fn consistent_market() -> (
        test_support::RedisServer,
        MultiplexedConnection,
        Keys,
        Ledger,
    ) {
        let server = test_support::RedisServer::start().unwrap();
        let mut data = server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let keys = Keys::new("t:".into());
        let _: () = data.hset(keys.user("seller0"), "funds", 30).await.unwrap();
        let _: () = data
            .hset(keys.user("buyer0"), "funds", BUYER_FUNDS - 30)
            .await
            .unwrap();
        let _: () = data
            .zadd(keys.market(), "item1s0.seller0", 20)
            .await
            .unwrap();
        let _: () = data
            .sadd(keys.inventory("buyer0"), "item2s0")
            .await
            .unwrap();
        let mut ledger = Ledger::default();
        ledger
            .created
            .insert("seller0".into(), vec!["item1s0".into(), "item2s0".into()]);
        ledger
            .purchases
            .insert("buyer0".into(), vec![("item2s0.seller0".into(), 30)]);
        (server, data, keys, ledger)
    }

    #[tokio::test]
    async fn a_consistent_market_passes() {
        let (_server, mut data, keys, ledger) = consistent_market().await;
        assert_eq!(
            check(&mut data, &keys, &ledger).await.unwrap(),
            Vec::<String>::new()
        );
    }

    #[tokio::test]
    async fn money_from_nowhere_is_caught() {
        let (_server, mut data, keys, ledger) = consistent_market().await;
        let _: () = data.hincr(keys.user("seller0"), "funds", 5).await.unwrap();
        let violations = check(&mut data, &keys, &ledger).await.unwrap();
        assert!(
            violations.iter().any(|v| v.contains("money not conserved")),
            "{violations:?}"
        );
        assert!(
            violations.iter().any(|v| v.contains("credited")),
            "{violations:?}"
        );
    }

    #[tokio::test]
    async fn an_item_both_listed_and_owned_is_caught() {
        let (_server, mut data, keys, ledger) = consistent_market().await;
        let _: () = data
            .zadd(keys.market(), "item2s0.seller0", 30)
            .await
            .unwrap();
        let violations = check(&mut data, &keys, &ledger).await.unwrap();
        assert!(
            violations
                .iter()
                .any(|v| v.contains("item2s0 is in 2 places")),
            "{violations:?}"
        );
    }

    #[tokio::test]
    async fn a_purchase_not_debited_is_caught() {
        let (_server, mut data, keys, mut ledger) = consistent_market().await;
        ledger
            .purchases
            .get_mut("buyer0")
            .unwrap()
            .push(("item1s0.seller0".into(), 20));
        let violations = check(&mut data, &keys, &ledger).await.unwrap();
        assert!(
            violations.iter().any(|v| v.contains("debited")),
            "{violations:?}"
        );
        assert!(
            violations
                .iter()
                .any(|v| v.contains("owns 1 items after 2 purchases")),
            "{violations:?}"
        );
    }
}
