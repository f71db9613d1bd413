//! Who may read `/metrics` when the server is secured: the caller's bearer token must be one the
//! API server authenticates (a TokenReview) and its user must be allowed `get` on the
//! non-resource URL `/metrics` (a SubjectAccessReview), the same check the API server makes for
//! its own `/metrics`. Verdicts are kept for a short while, in a bounded table keyed by a hash of
//! the token (the token itself is never kept or logged).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::TelemetryError;

/// The non-resource URL and verb a caller must be allowed.
const PATH: &str = "/metrics";
const VERB: &str = "get";
/// How long an allowed caller is let in without asking again.
const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a refusal stands (short, so that a new RoleBinding takes effect soon).
const REFUSED_FOR: Duration = Duration::from_secs(10);
/// Verdicts kept at most.
const MAX_VERDICTS: usize = 512;
/// Reviews in flight at most; a request beyond them is answered 503 at once.
const MAX_REVIEWS: usize = 8;
/// Time for the TokenReview and the SubjectAccessReview together.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request's credentials allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The token is valid and its user may `get /metrics`.
    Allowed,
    /// No bearer token, or one the API server does not accept (401).
    Unauthenticated,
    /// A valid token whose user may not `get /metrics` (403).
    Forbidden,
}

/// Checks callers of `/metrics` against the API server, with a short-lived cache.
pub struct MetricsAccess {
    client: kube::Client,
    verdicts: Mutex<Verdicts>,
    reviews: Semaphore,
}

impl std::fmt::Debug for MetricsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAccess").finish_non_exhaustive()
    }
}

impl MetricsAccess {
    /// Checks callers with `client` (which needs `create` on `tokenreviews` and
    /// `subjectaccessreviews`).
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            verdicts: Mutex::new(Verdicts::default()),
            reviews: Semaphore::new(MAX_REVIEWS),
        }
    }

    /// The verdict for a request with `headers`: from the cache, else from a TokenReview and a
    /// SubjectAccessReview.
    ///
    /// # Errors
    /// [`TelemetryError::ReviewsBusy`] when too many reviews are in flight,
    /// [`TelemetryError::ReviewTimeout`] when the API server takes too long, and
    /// [`TelemetryError::TokenReview`] or [`TelemetryError::AccessReview`] when it fails.
    pub async fn check(&self, headers: &HeaderMap) -> Result<Verdict, TelemetryError> {
        let Some(token) = bearer(headers) else {
            return Ok(Verdict::Unauthenticated);
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(verdict) = self.lock().get(&key, Instant::now()) {
            return Ok(verdict);
        }
        let _permit = self
            .reviews
            .try_acquire()
            .map_err(|_| TelemetryError::ReviewsBusy)?;
        let verdict = tokio::time::timeout(REVIEW_TIMEOUT, self.review(token))
            .await
            .map_err(|_| TelemetryError::ReviewTimeout)??;
        self.lock().insert(key, verdict, Instant::now());
        Ok(verdict)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Verdicts> {
        self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the API server who `token` is, then whether that user may `get /metrics`.
    async fn review(&self, token: &str) -> Result<Verdict, TelemetryError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(TelemetryError::TokenReview)?;
        let user = match reviewed.status {
            Some(status) if status.authenticated == Some(true) => status.user,
            _ => None,
        };
        let Some(user) = user.filter(|u| u.username.as_deref().is_some_and(|n| !n.is_empty()))
        else {
            return Ok(Verdict::Unauthenticated);
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(PATH.to_owned()),
                    verb: Some(VERB.to_owned()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(TelemetryError::AccessReview)?;
        Ok(if decided.status.is_some_and(|s| s.allowed) {
            Verdict::Allowed
        } else {
            Verdict::Forbidden
        })
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Recent verdicts by token hash, each until it expires; never more than [`MAX_VERDICTS`].
#[derive(Debug, Default)]
struct Verdicts(HashMap<[u8; 32], (Verdict, Instant)>);

impl Verdicts {
    fn get(&mut self, key: &[u8; 32], now: Instant) -> Option<Verdict> {
        match self.0.get(key) {
            Some((verdict, until)) if *until > now => Some(*verdict),
            Some(_) => {
                self.0.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: [u8; 32], verdict: Verdict, now: Instant) {
        if self.0.len() >= MAX_VERDICTS && !self.0.contains_key(&key) {
            self.0.retain(|_, (_, until)| *until > now);
            if self.0.len() >= MAX_VERDICTS {
                let soonest = self
                    .0
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| *k);
                if let Some(soonest) = soonest {
                    self.0.remove(&soonest);
                }
            }
        }
        let lasts = match verdict {
            Verdict::Allowed => ALLOWED_FOR,
            Verdict::Unauthenticated | Verdict::Forbidden => REFUSED_FOR,
        };
        self.0.insert(key, (verdict, now + lasts));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_authorization(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn the_token_is_read_from_a_bearer_authorization_header_only() {
        assert_eq!(
            bearer(&with_authorization("Bearer abc.def")),
            Some("abc.def")
        );
        assert_eq!(bearer(&with_authorization("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&with_authorization("Basic dXNlcjpwYXNz")), None);
        assert_eq!(bearer(&with_authorization("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn an_allowed_verdict_lasts_a_minute_and_a_refusal_ten_seconds() {
        let mut verdicts = Verdicts::default();
        let now = Instant::now();
        verdicts.insert([1; 32], Verdict::Allowed, now);
        verdicts.insert([2; 32], Verdict::Forbidden, now);
        let later = now + Duration::from_secs(11);
        assert_eq!(verdicts.get(&[1; 32], later), Some(Verdict::Allowed));
        assert_eq!(verdicts.get(&[2; 32], later), None);
        assert_eq!(verdicts.get(&[1; 32], now + Duration::from_secs(61)), None);
    }

    #[test]
    fn the_table_never_holds_more_than_its_bound() {
        let mut verdicts = Verdicts::default();
        let now = Instant::now();
        for i in 0..(MAX_VERDICTS as u32 * 3) {
            let mut key = [0u8; 32];
            key[..4].copy_from_slice(&i.to_be_bytes());
            verdicts.insert(
                key,
                Verdict::Allowed,
                now + Duration::from_millis(u64::from(i)),
            );
            assert!(verdicts.0.len() <= MAX_VERDICTS);
        }
        let mut newest = [0u8; 32];
        newest[..4].copy_from_slice(&(MAX_VERDICTS as u32 * 3 - 1).to_be_bytes());
        assert_eq!(verdicts.get(&newest, now), Some(Verdict::Allowed));
    }
}
