//! The manifests decoded first and judged beside the passes. The judge's thread hands the decoded
//! BoxTables over before it checks them against the CRD's schema and rules (most of its cost), so
//! each table's session starts reading while the judge works. A pass changes nothing before its
//! document's verdict: the run's gate waits for it, a refusal cancels whatever the pass is still
//! doing (a lock wait, a read), and a refused document's result is its refusal, never the pass's.

use std::future::Future;
use std::path::PathBuf;

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::core::v1::Secret;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use boxtable_operator::manifests::{self, Document, Manifests, SchemaCompileError};
use boxtable_operator::migrate::runner::Withdrawal;

/// Whether a document was accepted: false when refused, and when the judge never said (it
/// failed); cheap to clone, and every clone gets the answer.
pub type Accepted = Shared<BoxFuture<'static, bool>>;

/// What the judge's thread hands over before judging.
pub struct Decoded {
    /// Each decoded BoxTable, in file order, with its verdict to come.
    pub documents: Vec<(Document, Accepted)>,
    /// The Secrets among the files (for connection strings).
    pub secrets: Vec<Secret>,
    /// Documents of other kinds that were skipped.
    pub skipped: Vec<String>,
    /// Whether the files hold no BoxTable document and nothing went wrong reading them.
    pub empty: bool,
}

/// Decodes `files`, hands the decoded documents to `handover`, then judges them, each verdict
/// told as soon as it is known. Blocks: run it on a thread of its own.
///
/// # Errors
/// [`SchemaCompileError`] only if the generated CRD schema is broken; every verdict is then a
/// refusal.
pub fn decode_and_judge(
    files: &[PathBuf],
    handover: oneshot::Sender<Decoded>,
) -> Result<Manifests, SchemaCompileError> {
    let decoded = manifests::decode(files)?;
    let (mut verdicts, accepted): (Vec<_>, Vec<_>) = decoded
        .provisional
        .iter()
        .map(|_| {
            let (verdict, accepted) = oneshot::channel::<bool>();
            let accepted = accepted.map(|told| told == Ok(true)).boxed().shared();
            (Some(verdict), accepted)
        })
        .unzip();
    // The receiver is gone only when the command has given up; judging still ends the thread.
    let _ = handover.send(Decoded {
        documents: decoded.provisional.iter().cloned().zip(accepted).collect(),
        secrets: decoded.secrets.clone(),
        skipped: decoded.skipped.clone(),
        empty: decoded.is_empty(),
    });
    decoded.judge(|place, verdict| {
        if let Some(told) = verdicts.get_mut(place).and_then(Option::take) {
            // A pass that has already ended no longer listens.
            let _ = told.send(verdict.is_ok());
        }
    })
}

/// The run's gate for a document: lets the change go on once the document is accepted, and
/// withdraws it (rolled back, unlocked, nothing changed) when it is refused.
///
/// # Errors
/// The [`Withdrawal`] of a refused document.
pub async fn gate(accepted: Accepted) -> Result<(), Withdrawal> {
    if accepted.await {
        Ok(())
    } else {
        Err(Withdrawal {
            why: "the manifest is not a valid BoxTable".to_owned(),
            transient: false,
        })
    }
}

/// Runs `work` beside its document's verdict: `work` gets a token cancelled when the document is
/// refused (or `cancel` fires), so a refusal ends a lock wait or a read at once. `None` when the
/// document is refused: its problem, not what `work` found, is then its result.
pub async fn unless_refused<T, W, F>(
    accepted: &Accepted,
    cancel: &CancellationToken,
    work: W,
) -> Option<T>
where
    W: FnOnce(CancellationToken) -> F,
    F: Future<Output = T>,
{
    let refused = cancel.child_token();
    let verdict = async {
        let accepted = accepted.clone().await;
        if !accepted {
            refused.cancel();
        }
        accepted
    };
    let (found, accepted) = tokio::join!(work(refused.clone()), verdict);
    accepted.then_some(found)
}
