//! The examples run as tests, each against a server the test started.

#[allow(dead_code)]
#[path = "../examples/fencing.rs"]
mod fencing;
#[allow(dead_code)]
#[path = "../examples/lottery.rs"]
mod lottery;
#[allow(dead_code)]
#[path = "../examples/market.rs"]
mod market;

use test_support::RedisServer;

#[tokio::test]
async fn the_fencing_example_refuses_the_paused_holders_write() {
    let server = RedisServer::start().unwrap();
    fencing::run(&server.url()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lottery_example_has_exactly_one_winner() {
    let server = RedisServer::start().unwrap();
    lottery::run(&server.url()).await.unwrap();
}

#[tokio::test]
async fn the_market_example_sells_the_sword_once() {
    let server = RedisServer::start().unwrap();
    market::run(&server.url()).await.unwrap();
}
