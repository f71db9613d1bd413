//! `localapi`, the demo's API server, against the real kube-apiserver.

mod localapi_differential;
