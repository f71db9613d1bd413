//! Where a box table's connection comes from: the connection string and optional CA bundle a
//! Secret holds, read the same way whether the Secret came from the API server (the controller)
//! or from the files given to the `migrate` command.

use k8s_openapi::api::core::v1::Secret;

/// The Secret key that may hold a CA bundle (PEM) for verify-ca / verify-full.
pub const CA_KEY: &str = "ca.crt";

/// A key from `data` (already base64-decoded by the client) or, for objects that were never
/// stored, `stringData`.
pub fn lookup(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| bytes.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|data| data.get(key))
                .map(|s| s.as_bytes().to_vec())
        })
}
