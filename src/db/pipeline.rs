//! Requests written together on one session. The driver sends a request when its future is first
//! polled and the server answers requests in the order it received them, so futures polled in a
//! fixed order share one network round trip and still run on the server one after another.
//!
//! Inside a transaction a failing statement aborts it, and every later statement of the same batch
//! fails with `25P02` without doing anything: the first error in a batch is its cause.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use futures::future::{MaybeDone, maybe_done};

/// Runs `futures` together, polling each one for the first time in the order given (so their
/// requests go out in that order), and returns their outputs in that order.
///
/// # Cancel safety
/// Dropping the returned future drops every request's future; requests already sent still run
/// on the server, and the driver discards their answers.
pub async fn in_order<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<MaybeDone<F>>>> = futures
        .into_iter()
        .map(|future| Box::pin(maybe_done(future)))
        .collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for future in &mut futures {
            if future.as_mut().poll(cx).is_pending() {
                done = false;
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    futures
        .iter_mut()
        .filter_map(|future| future.as_mut().take_output())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[tokio::test]
    async fn futures_are_first_polled_in_the_order_given_and_answer_in_that_order() {
        let polled = RefCell::new(Vec::new());
        let futures = (0..40)
            .map(|i| {
                let polled = &polled;
                async move {
                    polled.borrow_mut().push(i);
                    // Finish in reverse order: the outputs still come back in the given order.
                    for _ in 0..(40 - i) {
                        tokio::task::yield_now().await;
                    }
                    i * 10
                }
            })
            .collect();
        let out = in_order(futures).await;
        assert_eq!(polled.into_inner(), (0..40).collect::<Vec<_>>());
        assert_eq!(out, (0..40).map(|i| i * 10).collect::<Vec<_>>());
    }
}
